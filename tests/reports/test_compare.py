"""``kvbench compare``: key figures side by side, ratios vs the first, overlapping trial ranges flagged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvbench_core.cli import main
from kvbench_core.reports.compare import compare
from kvbench_core.reports.key_figures import HEADLINE
from kvbench_core.results.document import ResultDocument


def _record(name: str, **run: Any) -> dict[str, Any]:
    """The ``run`` and ``spec`` sections every result has, empty but for the run's name."""
    return {"kvbench_result": 2,
            "run": {"id": name, "name": name, "status": "completed", "stop_reason": "requests done", "error": None,
                    "trial": None, "client_index": None, "started_at": None, "finished_at": 0.0, "traced": False,
                    **run},
            "spec": {"as_written": {}, "resolved": {}, "sha256": ""}}


def _run(name: str, **headline: float) -> dict[str, Any]:
    """A minimal single-run result carrying the given headline figures."""
    return {**_record(name), "metrics": {"headline": {f.key: headline.get(f.key) for f in HEADLINE},
                                         "latency_ms": {"storage": {"p95": headline.get("storage_p95")}}}}


def _summary(name: str, **ranges: tuple[float, float, float]) -> dict[str, Any]:
    """A minimal trials summary: figure -> (min, median, max) over three trials."""
    metrics = {key: {"label": key, "unit": "", "better": "higher", "median": mid, "min": low, "max": high,
                     "cv": 0.1, "values": [low, mid, high]} for key, (low, mid, high) in ranges.items()}
    return {**_record(name, kind="trials-summary"),
            "metrics": {"headline": {key: mid for key, (_, mid, _) in ranges.items()}},
            "trials": {"requested": 3, "count": 3, "statistic": "median", "runs": [], "metrics": metrics}}


def test_ratios_are_against_the_first_result() -> None:
    fast = _run("fast", decode_bytes_read_gb=1195.0, avg_throughput_tokens_per_sec=610.36, storage_p95=36504.0)
    slow = _run("slow", decode_bytes_read_gb=447.0, avg_throughput_tokens_per_sec=290.02, storage_p95=45091.0)
    rows = {row.figure.key: row for row in compare([ResultDocument.of(slow), ResultDocument.of(fast)])}
    assert rows["avg_throughput_tokens_per_sec"].cells[1].ratio == pytest.approx(2.1046, rel=1e-3)
    assert rows["decode_bytes_read_gb"].cells[1].ratio == pytest.approx(2.673, rel=1e-3)
    assert rows["storage_latency_p95_ms"].cells[1].ratio == pytest.approx(36504 / 45091)
    assert rows["decode_bytes_read_gb"].cells[0].ratio is None  # the baseline
    assert rows["decode_bytes_read_gb"].cells[1].overlap is None  # single runs: nothing to judge by
    assert "cache_hit_rate" not in rows  # no result has it


def test_overlapping_trial_ranges_are_flagged_as_no_real_difference() -> None:
    a = _summary("a", decode_bytes_read_gb=(100.0, 110.0, 120.0), avg_throughput_tokens_per_sec=(50.0, 55.0, 60.0))
    b = _summary("b", decode_bytes_read_gb=(115.0, 130.0, 150.0), avg_throughput_tokens_per_sec=(70.0, 80.0, 90.0))
    rows = {row.figure.key: row for row in compare([ResultDocument.of(a), ResultDocument.of(b)])}
    assert rows["decode_bytes_read_gb"].cells[1].overlap is True
    assert rows["avg_throughput_tokens_per_sec"].cells[1].overlap is False
    assert rows["avg_throughput_tokens_per_sec"].cells[1].ratio == pytest.approx(80 / 55)


def test_compare_command_prints_the_table_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = []
    for doc in (_summary("base", decode_bytes_read_gb=(100.0, 110.0, 120.0)),
                _summary("new", decode_bytes_read_gb=(115.0, 130.0, 150.0))):
        path = tmp_path / f"{doc['run']['name']}.json"
        path.write_text(json.dumps(doc))
        paths.append(str(path))
    assert main(["compare", *paths]) == 0
    out = capsys.readouterr().out
    assert "(1.18x)" in out and "overlap" in out and "not a real difference" in out
    assert main(["compare", *paths, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    entry = rows[0]["results"][1]
    assert (rows[0]["metric"], entry["result"], entry["trial_ranges_overlap"]) == ("decode_bytes_read_gb", "new", True)
    assert entry["ratio_to_first"] == pytest.approx(130 / 110)


def test_compare_needs_two_results(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "one.json"
    path.write_text(json.dumps(_run("one", decode_bytes_read_gb=1.0)))
    assert main(["compare", str(path)]) == 2
    assert "at least two results" in capsys.readouterr().err


def test_compare_warns_about_a_run_that_did_not_complete_or_ran_another_model(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base, stopped = _run("base", decode_bytes_read_gb=2.0), _run("stopped", decode_bytes_read_gb=1.0)
    stopped["run"].update(status="interrupted", stop_reason="SIGINT")
    other = _run("other", decode_bytes_read_gb=2.0)
    base["model"], stopped["model"], other["model"] = {"name": "llama3.1-8b"}, {"name": "llama3.1-8b"}, {
        "name": "llama3.1-70b-instruct"}
    paths = []
    for doc in (base, stopped, other):
        paths.append(tmp_path / f"{doc['run']['name']}.json")
        paths[-1].write_text(json.dumps(doc))
    assert main(["compare", *map(str, paths), "--json"]) == 0
    assert capsys.readouterr().err.splitlines() == [
        "kvbench: warning: stopped: the run ended interrupted (SIGINT); its figures cover only what it measured",
        "kvbench: warning: other: model llama3.1-70b-instruct, the baseline's is llama3.1-8b: entry sizes differ",
    ]


def _documents(*results: dict[str, Any]) -> list[ResultDocument]:
    return [ResultDocument.of(result) for result in results]


def _with_spec(doc: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """``doc`` with a resolved spec: 20 s, 8 users, one DRAM tier, unless ``fields`` (dotted) say otherwise."""
    spec: dict[str, Any] = {"duration": 20.0, "requests": None, "warmup": 0, "clients": 1, "verify": False,
                            "workload": {"users": 8, "users_scope": "per_client", "max_inflight": 16,
                                         "source": "synthetic", "mode": "mixed", "generation": "none",
                                         "decode_batch": 32},
                            "model": {"name": "tiny-1b", "dtype": "bf16", "tp": 1},
                            "cache": {"promotion": "none", "tiers": [{"name": "dram", "capacity": 1 << 30}]},
                            "autoscaler": None}
    for path, value in fields.items():
        *parents, last = path.split("__")
        node = spec
        for part in parents:
            node = node[part]
        node[last] = value
    return {**doc, "spec": {**doc["spec"], "resolved": spec}}


def test_every_spec_difference_that_changes_a_ratio_is_a_warning(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """20 s / 8 users against 10 s / 4 users used to compare silently."""
    base = _with_spec(_run("base", decode_bytes_read_gb=10.0))
    other = _with_spec(_run("other", decode_bytes_read_gb=5.0), duration=10.0, workload__users=4)
    paths = []
    for name, doc in (("base", base), ("other", other)):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(doc))
        paths.append(str(path))
    assert main(["compare", *paths]) == 0
    err = capsys.readouterr().err
    assert "other: duration 10.0 vs the baseline's 20.0" in err
    assert "other: workload.users 4 vs the baseline's 8" in err
    assert len(err.strip().splitlines()) == 2


@pytest.mark.parametrize("field", ["warmup", "clients", "workload__max_inflight", "workload__mode",
                                   "workload__generation", "model__dtype", "cache__promotion", "verify"])
def test_each_meaningful_field_is_named(field: str) -> None:
    from kvbench_core.reports.compare import caveats

    base = _with_spec(_run("a"))
    other = _with_spec(_run("b"), **{field: "changed"})
    notes = caveats(_documents(base, other), ["a", "b"])
    assert len(notes) == 1 and notes[0].startswith(f"b: {field.replace('__', '.')} 'changed'")


def test_the_same_spec_on_another_backend_compares_without_warnings() -> None:
    from kvbench_core.reports.compare import caveats

    base, other = _with_spec(_run("a")), _with_spec(_run("b"))
    other["spec"]["resolved"]["cache"]["tiers"][0]["backend"] = "nvme"  # the device is what is compared
    assert caveats(_documents(base, other), ["a", "b"]) == []
    other["spec"]["resolved"]["cache"]["tiers"][0]["capacity"] = 2 << 30
    assert "cache tiers (name, capacity)" in caveats(_documents(base, other), ["a", "b"])[0]


def test_a_result_whose_invariants_failed_is_a_warning() -> None:
    from kvbench_core.reports.compare import caveats

    base, other = _with_spec(_run("a")), _with_spec(_run("b"))
    other["checks"] = {"passed": False, "violations": ["written_bytes: written bytes = stored + demoted (...)"],
                       "items": []}
    assert caveats(_documents(base, other), ["a", "b"]) == [
        "b: 1 invariant(s) violated (written_bytes: written bytes = stored + demoted (...)): its figures do not add up"]


def _nvme_run(name: str, *, options: dict[str, Any] | None = None, describe: dict[str, Any] | None = None,
              codec: str = "none", **fields: Any) -> dict[str, Any]:
    """A result with a DRAM and an nvme tier as a real one records them: the spec's options as written,
    what the tier ran with in ``metrics.tiers.nvme.describe``, the codec, and the QoS targets."""
    doc = _with_spec(_run(name), **fields)
    doc["spec"]["resolved"]["cache"]["tiers"] = [
        {"name": "dram", "backend": "cpu", "capacity": 1 << 30, "options": {}},
        {"name": "nvme", "backend": "nvme", "capacity": 8 << 30,
         "options": {"path": f"/mnt/{name}", **(options or {})}}]
    doc["metrics"]["tiers"] = {"dram": {"describe": {"backend": "cpu"}, "codec": {"name": "none", "options": {}}},
                               "nvme": {"describe": {"backend": "nvme", "engine": "psync", "queue_depth": 1,
                                                     "transfer_size": 1 << 20, "direct": False, **(describe or {})},
                                        "codec": {"name": codec, "options": {}}}}
    doc["metrics"]["qos"] = {"batch": {"sla_p95_ms": 1000.0, "sla_p99_ms": 5000.0, "priority": 1}}
    return doc


def test_the_runs_dtype_is_compared_not_the_spec_as_written() -> None:
    from kvbench_core.reports.compare import caveats

    base, other = _nvme_run("a", model__dtype=None), _nvme_run("b")  # 'a' left dtype to the model's default
    base["model"], other["model"] = {"name": "tiny-1b", "dtype": "bf16"}, {"name": "tiny-1b", "dtype": "bf16"}
    assert caveats(_documents(base, other), ["a", "b"]) == []
    other["model"]["dtype"] = "fp8"
    assert caveats(_documents(base, other), ["a", "b"]) == [
        "b: model.dtype 'fp8' vs the baseline's 'bf16': other entry sizes"]


@pytest.mark.parametrize(("option", "ran"), [("engine", "io_uring"), ("queue_depth", 32),
                                              ("transfer_size", 4 << 20), ("direct", True)])
def test_a_tier_option_that_changes_the_access_path_is_a_warning(option: str, ran: Any) -> None:
    from kvbench_core.reports.compare import caveats

    base, other = _nvme_run("a"), _nvme_run("b", options={option: ran}, describe={option: ran})
    # the tiers' paths differ too: where data lives is not warned on
    [note] = caveats(_documents(base, other), ["a", "b"])
    assert note.startswith(f"b: cache.tiers.nvme.options.{option} {ran!r} vs the baseline's ")
    assert "access path" in note


def test_a_default_the_spec_left_out_is_compared_with_one_written_out() -> None:
    from kvbench_core.reports.compare import caveats

    base, other = _nvme_run("a"), _nvme_run("b", options={"fsync": False})  # nvme's default fsync is True
    [note] = caveats(_documents(base, other), ["a", "b"])
    assert note.startswith("b: cache.tiers.nvme.options.fsync False vs the baseline's True")
    assert caveats(_documents(_nvme_run("a"), _nvme_run("b", options={"fsync": True})), ["a", "b"]) == []


def test_codec_payload_and_qos_targets_are_warnings() -> None:
    from kvbench_core.reports.compare import caveats

    base = _nvme_run("a", payload="random")
    other = _nvme_run("b", codec="zstd", payload="synthetic_kv")
    other["metrics"]["qos"]["batch"]["sla_p95_ms"] = 200.0
    notes = caveats(_documents(base, other), ["a", "b"])
    assert [n.split(" ")[1] for n in notes] == ["payload", "qos.batch.sla_p95_ms", "cache.tiers.nvme.codec"]
    assert "b: cache.tiers.nvme.codec 'zstd' vs the baseline's 'none'" in notes[2]
