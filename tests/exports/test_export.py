"""``kvbench export``: tidy Parquet/CSV tables that pyarrow reads back equal to the result they came from,
stacked across results, and the I/O log as a trace-event timeline with a track per tier and thread, a slice
per command and a flow from each request to its commands.  One real run (DRAM -> directory tier, with an
I/O log) feeds every test."""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import shutil
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from tiny_spec import tiny_spec

from kvbench_core.cli import main

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
pacsv = pytest.importorskip("pyarrow.csv")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One finished tiny run with an I/O log, and a copy of its result under a second name."""
    root = tmp_path_factory.mktemp("export")
    spec = tiny_spec(root, output={"directory": str(root / "out"), "interval": 0.5, "progress": "off",
                                   "io_log": str(root / "io.jsonl")})
    assert _cli("run", str(spec), "--quiet")[0] == 0
    [result] = (root / "out").glob("*.json")
    shutil.copy(result, root / "second.json")
    shutil.copy(result, root / "first.json")
    return root


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    assert "Traceback" not in err.getvalue()
    return code, out.getvalue(), err.getvalue()


def _result(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "first.json").read_text())


def _log(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "io.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def parquet(run_dir: Path) -> dict[str, Any]:
    target = run_dir / "parquet"
    code, out, err = _cli("export", str(run_dir / "first.json"), str(run_dir / "second.json"),
                          "--to", "parquet", str(target))
    assert code == 0, err
    assert sorted(Path(line).name for line in out.split()) == sorted(p.name for p in target.iterdir())
    return {path.stem: pq.read_table(path).to_pylist() for path in target.iterdir()}


def test_every_table_stacks_both_results(parquet: dict[str, Any]) -> None:
    assert set(parquet) == {"timeseries", "tier_timeseries", "latency_histograms", "classes", "commands"}
    for name, rows in parquet.items():
        labels = Counter(row["result"] for row in rows)
        assert set(labels) == {"first", "second"}, name
        assert labels["first"] == labels["second"] > 0, name


def test_the_tier_table_holds_each_intervals_tier_figures(parquet: dict[str, Any], run_dir: Path) -> None:
    series = _result(run_dir)["timeseries"]
    rows = [row for row in parquet["tier_timeseries"] if row["result"] == "first"]
    for tier in _result(run_dir)["metrics"]["tiers"]:
        for op in ("read", "write"):
            assert ([row[f"{op}_bytes"] for row in rows if row["tier"] == tier]
                    == [(point["tiers"].get(tier) or {}).get(f"{op}_bytes") for point in series])
        assert ([row["stored_bytes"] for row in rows if row["tier"] == tier]
                == [point["occupancy"][tier]["bytes"] for point in series])
    assert [row["t_s"] for row in parquet["timeseries"] if row["result"] == "first"] == [p["t_s"] for p in series]
    assert [row["requests"] for row in parquet["timeseries"] if row["result"] == "first"] == [
        p["requests"] for p in series]


def test_histogram_buckets_hold_every_sample_within_their_bounds(parquet: dict[str, Any], run_dir: Path) -> None:
    metrics = _result(run_dir)["metrics"]
    rows = [row for row in parquet["latency_histograms"] if row["result"] == "first"]
    counts: Counter[tuple[Any, ...]] = Counter()
    for row in rows:
        counts[(row["scope"], row["tier"], row["op"], row["layer"], row["qos_class"])] += row["count"]
        assert row["lower_ms"] < row["upper_ms"]
    for tier, figures in metrics["tiers"].items():
        for op in ("read", "write"):
            for layer, hist in figures[op]["histograms"].items():
                assert counts[("tier", tier, op, layer, None)] == hist["count"], (tier, op, layer)
    assert counts[("request", None, None, "end_to_end", None)] == metrics["histograms"]["end_to_end"]["count"]
    for qos, hist in metrics["histograms"]["service_by_qos"].items():
        assert counts[("request", None, None, "service", qos)] == hist["count"]
    # the slowest end-to-end request lies in the last bucket's bounds (relative error 1 %)
    last = max((r for r in rows if r["layer"] == "end_to_end" and r["qos_class"] is None), key=lambda r: r["upper_ms"])
    assert last["lower_ms"] <= metrics["latency_ms"]["end_to_end"]["max"] <= last["upper_ms"] * 1.0001


def test_class_rows_are_the_results_class_figures(parquet: dict[str, Any], run_dir: Path) -> None:
    qos = _result(run_dir)["metrics"]["qos"]
    rows = {row["qos_class"]: row for row in parquet["classes"] if row["result"] == "first"}
    assert set(rows) == set(qos)
    for name, figures in qos.items():
        assert rows[name]["requests"] == figures["requests"]
        assert rows[name]["e2e_p95_ms"] == figures["latency_ms"]["p95"]
        assert rows[name]["service_p99_ms"] == figures["service_latency_ms"]["p99"]
        assert rows[name]["sla_met"] == figures["sla_met"]


def test_commands_are_the_io_log_with_tier_thread_and_request(parquet: dict[str, Any], run_dir: Path) -> None:
    log = _log(run_dir)
    rows = [row for row in parquet["commands"] if row["result"] == "first"]
    assert len(rows) == len(log)
    assert sum(row["bytes"] for row in rows) == sum(record["bytes"] for record in log)
    assert {row["tier"] for row in rows} == set(_result(run_dir)["metrics"]["tiers"])
    assert all(row["thread"] for row in rows)
    assert any(row["request"] for row in rows)
    assert all(row["duration_ms"] == pytest.approx((row["end_s"] - row["start_s"]) * 1000) for row in rows)


def test_csv_holds_the_same_rows(run_dir: Path, parquet: dict[str, Any]) -> None:
    target = run_dir / "csv"
    assert _cli("export", str(run_dir / "first.json"), "--to", "csv", str(target))[0] == 0
    for path in target.iterdir():
        rows = pacsv.read_csv(path).num_rows
        assert rows == sum(1 for row in parquet[path.stem] if row["result"] == "first"), path.stem


def test_an_existing_file_is_refused_and_nothing_is_written(run_dir: Path) -> None:
    target = run_dir / "taken"
    target.mkdir()
    (target / "classes.parquet").write_text("mine")
    code, _, err = _cli("export", str(run_dir / "first.json"), "--to", "parquet", str(target))
    assert code == 2 and err.count("\n") == 1 and "never overwrites" in err
    assert [p.name for p in target.iterdir()] == ["classes.parquet"]
    assert (target / "classes.parquet").read_text() == "mine"


def test_an_unknown_format_is_one_line(run_dir: Path) -> None:
    code, _, err = _cli("export", str(run_dir / "first.json"), "--to", "xlsx", str(run_dir / "x"))
    assert code == 2 and "choose one of parquet, csv, perfetto" in err and not (run_dir / "x").exists()


def test_a_log_rewritten_after_the_run_gives_no_commands_table(run_dir: Path) -> None:
    result = _result(run_dir)
    stale = run_dir / "stale.jsonl"
    shutil.copy(run_dir / "io.jsonl", stale)
    later = result["run"]["finished_at"] + 3600
    os.utime(stale, (later, later))
    result["spec"]["resolved"]["output"]["io_log"] = str(stale)
    (run_dir / "stale.json").write_text(json.dumps(result))
    code, _, err = _cli("export", str(run_dir / "stale.json"), "--to", "parquet", str(run_dir / "stale"))
    assert code == 0 and "rewritten after the run ended" in err
    assert not (run_dir / "stale" / "commands.parquet").exists()
    assert (run_dir / "stale" / "classes.parquet").exists()


@pytest.fixture(scope="module")
def trace(run_dir: Path) -> dict[str, Any]:
    code, _, err = _cli("export", str(run_dir / "first.json"), "--to", "perfetto", str(run_dir / "trace"))
    assert code == 0, err
    return json.loads((run_dir / "trace" / "first.perfetto.json").read_text())


def test_the_trace_has_a_slice_per_command_on_its_tier_and_threads_track(trace: dict[str, Any],
                                                                          run_dir: Path) -> None:
    events = trace["traceEvents"]
    names = {(e["pid"], e.get("tid")): e["args"]["name"] for e in events if e["ph"] == "M"}
    commands = [e for e in events if e["ph"] == "X" and e["cat"] == "command"]
    log = _log(run_dir)
    assert len(commands) == len(log)
    for event, record in zip(commands, log, strict=True):
        assert names[(event["pid"], 0)] == f"tier {record['tier']}"
        assert names[(event["pid"], event["tid"])] == record["thread"]
        assert event["name"] == record["op"] and event["args"]["bytes"] == record["bytes"]
        assert event["dur"] == pytest.approx((record["end_s"] - record["start_s"]) * 1e6, abs=0.01)
    assert min(e["ts"] for e in commands) == 0


def test_every_command_of_a_request_has_a_flow_from_that_request(trace: dict[str, Any], run_dir: Path) -> None:
    events = trace["traceEvents"]
    requests = {e["name"].removeprefix("request "): e for e in events if e["ph"] == "X" and e["cat"] == "request"}
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e["ph"] == "f"}
    commands = [e for e in events if e["ph"] == "X" and e["cat"] == "command"]
    with_request = [e for e in commands if "request" in e["args"]]
    assert with_request and len(starts) == len(ends) == len(with_request)
    assert set(requests) == {e["args"]["request"] for e in with_request}
    by_ts = {(e["pid"], e["tid"], e["ts"]) for e in with_request}
    for flow, end in ends.items():
        start = starts[flow]
        assert (end["pid"], end["tid"], end["ts"]) in by_ts
        owner = next(r for r in requests.values() if r["tid"] == start["tid"] and r["ts"] == start["ts"])
        assert owner["ts"] <= end["ts"] <= owner["ts"] + owner["dur"]
    for request in requests.values():  # a request's span covers its commands
        mine = [e for e in with_request if f"request {e['args']['request']}" == request["name"]]
        assert request["ts"] == min(e["ts"] for e in mine)


def test_the_trace_loads_in_perfettos_trace_processor(trace: dict[str, Any], run_dir: Path) -> None:
    tp = pytest.importorskip("perfetto.trace_processor", reason="the perfetto package is not installed; its trace "
                             "processor downloads a binary at first use, which this project's machines may not do")
    try:
        processor = tp.TraceProcessor(trace=str(run_dir / "trace" / "first.perfetto.json"))
    except Exception as error:  # no binary and no way to download one
        pytest.skip(f"perfetto's trace processor cannot start here: {error}")
    rows = processor.query("select count(*) as n from slice where category = 'command'").as_pandas_dataframe()
    assert int(rows["n"][0]) == len(_log(run_dir))


def test_without_pyarrow_the_export_names_the_extra(run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # as on a machine without the export extra
    code, _, err = _cli("export", str(run_dir / "first.json"), "--to", "parquet", str(run_dir / "none"))
    assert code == 2 and err.count("\n") == 1 and "pip install 'kvbench-core[export]'" in err
    assert not (run_dir / "none").exists()


def test_commands_a_thread_ran_at_once_get_lanes_and_no_track_overlaps(tmp_path: Path) -> None:
    """io_uring or a queue depth above 1: one thread's commands overlap in time; a trace-event track holds
    only nested slices, so each parallel command goes on a lane of its own, named after the thread."""
    from kvbench_core.exports.perfetto import write_trace

    log = tmp_path / "io.jsonl"
    spans = [(0.000, 0.010), (0.002, 0.012), (0.004, 0.006), (0.011, 0.013), (0.013, 0.014)]
    log.write_text("".join(json.dumps({"trace_id": 7, "key": f"k{i}", "op": "read", "offset": 0, "bytes": 4096,
                                       "start_s": 100 + a, "end_s": 100 + b, "tier": "nvme",
                                       "thread": "kvbench-worker-0", "request": "u0.1"}) + "\n"
                           for i, (a, b) in enumerate(spans)))
    assert write_trace(log, tmp_path / "t.json") == len(spans)
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"
             and e["pid"] != 0}
    commands = [e for e in events if e["ph"] == "X" and e["cat"] == "command"]
    by_track: dict[int, list[dict[str, Any]]] = {}
    for event in commands:
        by_track.setdefault(event["tid"], []).append(event)
    assert sorted(names.values()) == ["kvbench-worker-0", "kvbench-worker-0 (parallel 2)",
                                      "kvbench-worker-0 (parallel 3)"]
    for track in by_track.values():
        track.sort(key=lambda e: e["ts"])
        assert all(a["ts"] + a["dur"] <= b["ts"] for a, b in itertools.pairwise(track))
