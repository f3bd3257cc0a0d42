"""``kvbench check`` (default rules) cannot be fooled by an edit: every figure of a real run's result is
re-derived from the result's own histograms and counts, the spec's sha256 recomputed, the schema and format
version validated, and a trials summary's headline re-derived from its trial files (issue #28 §3)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvbench_core.cli import main

Edit = Callable[[dict[str, Any]], None]
TIER = "disk"  # the run's persistent tier: MLPerf's nvme_* figures are its


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """A real two-trial run (DRAM in front of a directory tier): one trial's result and the summary."""
    from tiny_spec import history_spec

    root = tmp_path_factory.mktemp("rederive")
    tier = {"name": TIER, "backend": "nvme", "capacity": "64MiB",
            "options": {"path": str(root / "cache"), "fsync": False}}
    spec = history_spec([tier], users=4, requests=40, trials=2, name="rederive",
                        output={"directory": str(root / "out"), "progress": "off"})
    path = root / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert main(["run", str(path), "--quiet"]) == 0
    out = root / "out"
    yield next(out.glob("*-trial1.json")), next(out.glob("*-summary.json"))


def _check(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, str]]:
    capsys.readouterr()
    code = main(["check", str(path), "--json"])
    report = json.loads(capsys.readouterr().out)
    return code, {c["rule"]: c["reason"] for c in report["checks"] if not c["passed"]}


def _edited(original: Path, edit: Edit) -> Path:
    """``original`` with ``edit`` applied, written beside it (a summary finds its trial files there)."""
    doc = json.loads(original.read_text())
    edit(doc)
    path = original.with_name(f"edited-{original.name}")
    path.write_text(json.dumps(doc, indent=2))
    return path


def _scale(*paths: str, by: float = 0.0, to: Any = None) -> Edit:
    """Multiply (``by``) or set (``to``) the figure at each dotted path, as a hand edit would."""
    def edit(doc: dict[str, Any]) -> None:
        for dotted in paths:
            *parents, last = dotted.split(".")
            node = doc
            for key in parents:
                node = node[key]
            node[last] = to if by == 0.0 else type(node[last])(node[last] * by)
    return edit


def _spec_edited(doc: dict[str, Any]) -> None:
    doc["spec"]["as_written"]["seed"] = 8  # the recorded sha256 left as it was


HEAD = "metrics.headline"
DEVICE_P95 = f"metrics.tiers.{TIER}.read.latency_ms.device.p95"
#: (edit, the rule that fails, a fragment its reason must contain: the figure it names)
EDITS: list[tuple[str, Edit, str, str]] = [
    ("storage throughput x10", _scale(f"{HEAD}.storage_throughput_tokens_per_sec", by=10),
     "figures re-derived", "metrics.headline.storage_throughput_tokens_per_sec"),
    ("hit rate 0.99", _scale(f"{HEAD}.cache_hit_rate", to=0.99),
     "figures re-derived", "metrics.headline.cache_hit_rate"),
    ("device p95 0.5 ms", _scale(f"{HEAD}.nvme_read_device_p95_ms", DEVICE_P95, to=0.5),
     "figures re-derived", DEVICE_P95),
    ("e2e p95 halved", _scale(f"{HEAD}.end_to_end_latency_p95_ms", "metrics.latency_ms.end_to_end.p95", by=0.5),
     "figures re-derived", "metrics.latency_ms.end_to_end.p95"),
    ("headline request count x2", _scale(f"{HEAD}.requests_completed", by=2),
     "figures re-derived", "metrics.headline.requests_completed"),
    ("request count x2 everywhere", _scale(f"{HEAD}.requests_completed", "metrics.requests.completed", by=2),
     "invariants", "requests_timed"),
    ("tier bandwidth x2", _scale(f"metrics.tiers.{TIER}.read.bandwidth_bytes_per_s", by=2),
     "figures re-derived", f"metrics.tiers.{TIER}.read.bandwidth_bytes_per_s"),
    ("tier read bytes x2", _scale(f"metrics.tiers.{TIER}.read.bytes", by=2),
     "invariants", f"logical_bytes.{TIER}.read"),
    ("spec edited, hash kept", _spec_edited, "format, schema and spec hash", "spec.as_written does not hash"),
    ("status splendid", _scale("run.status", to="splendid"), "format, schema and spec hash", "run/status"),
    ("format 999", _scale("kvbench_result", to=999), "format, schema and spec hash", "kvbench_result is 999"),
    ("status degraded", _scale("run.status", to="degraded"), "status re-derived", "the rules give 'completed'"),
    ("an error recorded, completed kept", _scale("run.error", to="tier disk: No space left on device"),
     "status re-derived", "the rules give 'failed'"),
    ("interval rate x2", lambda doc: doc["timeseries"][0].update(read_bytes_per_s=doc["timeseries"][0]
                                                                 ["read_bytes_per_s"] * 2 + 1),
     "figures re-derived", "timeseries[0].read_bytes_per_s"),
]


def test_the_unedited_result_and_summary_pass(session: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    for path in session:
        assert _check(path, capsys) == (0, {})


@pytest.mark.parametrize(("edit", "rule", "fragment"), [case[1:] for case in EDITS], ids=[c[0] for c in EDITS])
def test_each_edit_of_a_result_fails_check_naming_the_figure(edit: Edit, rule: str, fragment: str,
                                                              session: tuple[Path, Path],
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    code, failed = _check(_edited(session[0], edit), capsys)
    assert code == 1
    assert rule in failed and fragment in failed[rule], failed


def test_the_edit_of_both_a_figure_and_its_raw_material_is_still_caught(session: tuple[Path, Path],
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """Bytes doubled with the bandwidth and mean entry size made to match: the device's bytes still differ."""
    def edit(doc: dict[str, Any]) -> None:
        read = doc["metrics"]["tiers"][TIER]["read"]
        for key in ("bytes", "bandwidth_bytes_per_s", "mean_entry_bytes"):
            read[key] = type(read[key])(read[key] * 2)
    code, failed = _check(_edited(session[0], edit), capsys)
    assert code == 1 and f"logical_bytes.{TIER}.read" in failed["invariants"], failed


def test_a_summary_whose_headline_was_edited_fails_by_default(session: tuple[Path, Path],
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    def edit(doc: dict[str, Any]) -> None:
        doc["metrics"]["headline"]["storage_throughput_tokens_per_sec"] = 9999
        doc["trials"]["metrics"]["storage_throughput_tokens_per_sec"]["median"] = 9999
    code, failed = _check(_edited(session[1], edit), capsys)
    assert code == 1
    assert "storage_throughput_tokens_per_sec is 9999" in failed["summary re-derived"], failed


def test_a_summary_whose_statistics_were_edited_fails(session: tuple[Path, Path],
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    def edit(doc: dict[str, Any]) -> None:
        stats = doc["trials"]["metrics"][f"{TIER}.read_gb_s"]
        stats["max"] = (stats["max"] or 0) * 3 + 1
    code, failed = _check(_edited(session[1], edit), capsys)
    assert code == 1 and f"trials.metrics.{TIER}.read_gb_s.max" in failed["summary re-derived"], failed


def test_a_result_whose_raw_material_was_removed_is_not_trusted(session: tuple[Path, Path],
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Deleting the histograms so nothing can be re-derived fails, it does not pass for want of evidence."""
    def edit(doc: dict[str, Any]) -> None:
        del doc["metrics"]["histograms"]
    code, failed = _check(_edited(session[0], edit), capsys)
    assert code == 1
    assert "no 'histograms'" in failed["figures re-derived"], failed
    assert "metrics" in failed["format, schema and spec hash"], failed


def test_the_trial_files_of_a_summary_are_re_derived_too(session: tuple[Path, Path]) -> None:
    """A trial whose figure is edited and whose recorded file hash is updated to match still fails."""
    from kvbench_core.reports.aggregate import file_sha256
    from kvbench_core.reports.rules import check
    from kvbench_core.results.document import ResultDocument

    trial, summary = session
    directory = trial.parent / "resealed"
    directory.mkdir(exist_ok=True)
    doc = json.loads(summary.read_text())
    for run in doc["trials"]["runs"]:
        data = json.loads((trial.parent / run["file"]).read_text())
        if run["trial"] == 1:
            data["metrics"]["headline"]["cache_hit_rate"] = 0.99
        (directory / run["file"]).write_text(json.dumps(data))
        run["sha256"] = file_sha256(directory / run["file"])
    outcomes = check(ResultDocument.unchecked(copy.deepcopy(doc)), "invariants", directory)
    failed = {o.rule: o.reason for o in outcomes if not o.passed}
    assert "trial 1: metrics.headline.cache_hit_rate" in failed["figures re-derived"], failed


@pytest.mark.slow
def test_a_merged_multi_client_result_re_derives_and_an_edit_of_it_fails(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """The merged result of two local clients: its figures come from the merged histograms, so they re-derive
    exactly as a single run's; its merged bandwidth edited fails like any other."""
    from tiny_spec import history_spec

    tier = {"name": TIER, "backend": "nvme", "capacity": "64MiB",
            "options": {"path": str(tmp_path / "cache"), "fsync": False}}
    spec = history_spec([tier], users=4, requests=60, name="merged",
                        output={"directory": str(tmp_path / "out"), "progress": "off"})
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    assert main(["run", str(tmp_path / "spec.yaml"), "--clients", "2", "--quiet"]) == 0
    merged = next((tmp_path / "out").glob("*.json"))
    assert json.loads(merged.read_text())["scale_out"]["clients"] == 2
    assert _check(merged, capsys) == (0, {})
    code, failed = _check(_edited(merged, _scale(f"{HEAD}.end_to_end_latency_p95_ms", by=0.5)), capsys)
    assert code == 1 and "metrics.headline.end_to_end_latency_p95_ms" in failed["figures re-derived"], failed
