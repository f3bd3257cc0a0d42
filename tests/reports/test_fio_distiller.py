"""``kvbench fio``: the job distilled from a block trace or from kvbench's own I/O record, and fio accepts it."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvbench_core.cli import main
from kvbench_core.contracts.errors import UserError
from kvbench_core.reports.fio import MAX_SPLIT, block_split, distill
from kvbench_core.results.document import ResultDocument

MiB = 1 << 20
needs_fio = pytest.mark.skipif(shutil.which("fio") is None, reason="fio is not installed")


def op(ops: int, nbytes: int, commands: int) -> dict[str, int]:
    return {"ops": ops, "bytes": nbytes, "commands": commands}


def make_result(*, read: dict[str, int] | None = None, write: dict[str, int] | None = None, users: int = 2,
                workers: int = 4, generation: Any = "fast", generated_mean: float = 100.0, requests: int = 10,
                describe: dict[str, Any] | None = None, sections: dict[str, Any] | None = None) -> dict[str, Any]:
    """The parts of a result the distiller reads (the full format: docs/results.md)."""
    nvme = {"volatile": False, "capacity_bytes": 1 << 30,
            "describe": {"transfer_size": MiB, "queue_depth": 2, "fsync": True, "path": "/mnt/kv",
                         **(describe or {})},
            "read": read or op(0, 0, 0), "write": write or op(0, 0, 0)}
    return {
        "kvbench_result": 2,
        "run": {"id": "20260101T000000-abcdef", "name": "demo run", "status": "completed",
                "stop_reason": "requests done", "error": None, "trial": None, "client_index": None,
                "started_at": None, "finished_at": 0.0, "traced": False},
        "spec": {"as_written": {}, "sha256": "",
                 "resolved": {"workload": {"users": users, "max_inflight": workers, "generation": generation,
                                           "generation_ms_per_token": "***"}}},
        "workload": {"workers": workers, "users_final": users,
                     "stats": {"generation_length": {"mean": generated_mean}}},
        "metrics": {"window": {"measured_s": 29.2}, "requests": {"completed": requests},
                    "tiers": {"dram": {"volatile": True, "capacity_bytes": MiB, "read": op(9, 9, 9),
                                       "write": op(9, 9, 9)}, "nvme": nvme}},
        "sections": sections or {},
    }


def job_options(job: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in job.splitlines() if "=" in line and not line.startswith(";"))


# -- bssplit -----------------------------------------------------------------------------------------------


def test_block_split_percents_of_ios() -> None:
    assert block_split({4096: 3, 131072: 1}) == [(4096, 75), (131072, 25)]
    assert block_split({4096: 1, 8192: 1, 12288: 1}) == [(4096, 34), (8192, 33), (12288, 33)]
    assert block_split({}) == []


def test_block_split_aligns_sizes_to_4k() -> None:
    assert block_split({512: 1, 4096: 1, 6000: 2}) == [(4096, 50), (8192, 50)]


def test_block_split_keeps_at_most_64_sizes_and_no_io_is_lost() -> None:
    sizes = {4096 * (i + 1): 1 + i % 7 for i in range(200)}
    split = block_split(sizes)
    assert len(split) <= MAX_SPLIT and sum(pct for _, pct in split) == 100
    assert all(size % 4096 == 0 for size, _ in split)


# -- from kvbench's own record -----------------------------------------------------------------------------


def test_record_source_rebuilds_pieces_and_tails() -> None:
    # 2 entries of 3.25 MiB written in 1 MiB pieces: 6 full pieces and 2 tails of 256 KiB
    result = make_result(write=op(2, int(6.5 * MiB), 8), read=op(1, 4 * MiB, 4))
    job = distill(ResultDocument.of(result))
    options = job_options(job)
    assert options["bssplit"] == "1m/100,256k/25:1m/75"
    assert options["rw"] == "randrw" and options["rwmixread"] == "33"  # 4 of 12 commands
    assert options["numjobs"] == "2" and options["iodepth"] == "2"  # min(users, workers) streams; per-entry depth
    assert options["fsync"] == "4"  # one fsync per entry of 4 commands
    assert options["thinktime"] == "200000" and options["thinktime_blocks"] == "1"  # 2 ms/token x 100 tokens
    assert options["size"] == "6m" and options["directory"] == "/mnt/kv"  # 10.5 MiB moved over 2 jobs
    assert options["runtime"] == "30" and job.count("[kvbench-demo-run]") == 1
    assert "; source: kvbench's per-tier counters" in job


def test_record_source_says_when_the_run_did_not_use_libaio_direct_io() -> None:
    # The quick start's nvme tier runs psync through the page cache; the job is libaio direct=1 regardless,
    # which the header claimed came "from the observations": it now says where the two differ.
    written = op(2, 2 * MiB, 2)
    buffered = distill(ResultDocument.of(make_result(write=written, describe={"engine": "psync", "direct": False})))
    assert ("; the run's I/O path: engine psync, buffered (direct: false); this job uses ioengine=libaio "
            "direct=1") in buffered
    assert job_options(buffered)["direct"] == "1"  # the job itself is unchanged
    libaio = make_result(write=written, describe={"engine": "libaio", "direct": True})
    assert "the run's I/O path" not in distill(ResultDocument.of(libaio))
    assert "the run's I/O path" not in distill(ResultDocument.of(make_result(write=written)))  # a tier not saying


def test_a_trials_summary_is_refused_with_what_to_give_instead() -> None:
    summary = make_result() | {"trials": {"requested": 3, "count": 3, "statistic": "median", "runs": [], "metrics": {}},
                               "metrics": {"headline": {}}}
    with pytest.raises(UserError, match=r"a trials summary .* give one of its trials \(<name>-trialN.json\)"):
        distill(ResultDocument.of(summary))


def test_record_source_uses_the_effective_depth_not_the_configured_one() -> None:
    # a buffered nvme tier configured with queue_depth 4 keeps one command in flight per file
    result = make_result(write=op(1, MiB, 1), describe={"queue_depth": 4, "commands_in_flight": 1})
    assert job_options(distill(ResultDocument.of(result)))["iodepth"] == "1"


def test_record_source_without_idle_streams_has_no_thinktime() -> None:
    job = distill(ResultDocument.of(make_result(users=8, workers=4, write=op(4, 4 * MiB, 4))))
    options = job_options(job)
    assert "thinktime" not in options and "users > 4 workers" in job
    assert options["rw"] == "randwrite" and options["bssplit"] == "1m/100" and options["numjobs"] == "4"


def test_record_source_without_fsync_or_generation() -> None:
    result = make_result(generation=0, write=op(2, 2 * MiB, 2), describe={"fsync": False})
    options = job_options(distill(ResultDocument.of(result)))
    assert "fsync" not in options and "thinktime" not in options


def test_a_result_without_device_io_cannot_be_distilled() -> None:
    with pytest.raises(UserError, match="did no I/O"):
        distill(ResultDocument.of(make_result()))
    memory_only = make_result()
    del memory_only["metrics"]["tiers"]["nvme"]
    with pytest.raises(UserError, match="no persistent tier"):
        distill(ResultDocument.of(memory_only))
    with pytest.raises(UserError, match="no metrics"):
        distill(ResultDocument.of({**make_result(), "metrics": {}}))


# -- from a block trace ------------------------------------------------------------------------------------


def hist(count: int, p50: float | None) -> dict[str, Any]:
    return {"count": count, "p50": p50}


def trace_section(reads: int = 30, writes: int = 70) -> dict[str, Any]:
    return {
        "tool": "bpftrace v0.17.0", "devices": [{"name": "nvme0n1", "dev": "259:0"}], "paths": {"nvme": "/mnt/kv"},
        "totals": {"read": {"ios": reads, "bytes": reads * 131072}, "write": {"ios": writes, "bytes": writes * 4096},
                   "flush_ios": 7, "other_ios": 0},
        "bssplit": {"read": [{"bytes": 131072, "count": reads}] if reads else [],
                    "write": [{"bytes": 4096, "count": writes}] if writes else []},
        "histograms": {"queue_depth_read": hist(reads, 4.0), "queue_depth_write": hist(writes, 9.0),
                       "syscall_fsync_us": hist(7, 900.0), "write_to_fsync_gap_us": hist(7, 41.6)},
    }


def test_trace_source_takes_sizes_mix_depth_and_fsync_cadence_from_the_kernel() -> None:
    job = distill(ResultDocument.of(make_result(write=op(1, MiB, 1), sections={"block_trace": trace_section()})))
    options = job_options(job)
    assert options["bssplit"] == "128k/100,4k/100" and options["rwmixread"] == "30"
    assert options["iodepth"] == "8"  # request-weighted median depth: (30*4 + 70*9) / 100 = 7.5
    assert options["numjobs"] == "1" and options["fsync"] == "10"  # 70 write requests over 7 fsyncs
    assert options["thinktime"] == "42" and options["thinktime_blocks"] == "10"
    assert "; source: block trace (bpftrace v0.17.0) of nvme0n1 (259:0)" in job


def test_source_choice() -> None:
    traced = make_result(write=op(1, MiB, 1), sections={"block_trace": trace_section()})
    assert "; source: kvbench's per-tier counters" in distill(ResultDocument.of(traced), source="record")
    empty_trace = make_result(write=op(1, MiB, 1), sections={"block_trace": trace_section(0, 0)})
    # auto: no block I/O, no trace
    assert "; source: kvbench's per-tier counters" in distill(ResultDocument.of(empty_trace))
    untraced = make_result(write=op(1, MiB, 1), sections={
        "block_trace_status": {"traced": False, "reason": "bpftrace needs root"}})
    with pytest.raises(UserError, match=r"no block trace with block I/O \(bpftrace needs root\)"):
        distill(ResultDocument.of(untraced), source="trace")


# -- the command and fio itself -----------------------------------------------------------------------------


def write_result(tmp_path: Path, result: dict[str, Any]) -> Path:
    path = tmp_path / "result.json"
    path.write_text(json.dumps(result))
    return path


def test_command_writes_the_job_to_stdout_with_overrides(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_result(tmp_path, make_result(write=op(2, int(6.5 * MiB), 8)))
    assert main(["fio", str(path), "--size", "8GiB", "--directory", "/mnt/other", "--runtime", "5m"]) == 0
    options = job_options(capsys.readouterr().out)
    assert options["size"] == "4g" and options["directory"] == "/mnt/other" and options["runtime"] == "300"


def test_command_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "x.json").write_text("{}")
    assert main(["fio", str(tmp_path / "x.json")]) == 2
    assert "not a kvbench result" in capsys.readouterr().err
    path = write_result(tmp_path, make_result(write=op(1, MiB, 1)))
    assert main(["fio", str(path), "--size", "lots"]) == 2
    assert "expected a size" in capsys.readouterr().err
    assert main(["fio", str(path), "--size", "0"]) == 2
    assert "--size must be more than 0 bytes" in capsys.readouterr().err


@needs_fio
@pytest.mark.parametrize("source", ["trace", "record"])
def test_fio_accepts_the_job(tmp_path: Path, source: str) -> None:
    result = make_result(read=op(3, 10 * MiB, 12), write=op(2, int(6.5 * MiB), 8),
                         sections={"block_trace": trace_section()})
    job = tmp_path / "job.fio"
    job.write_text(distill(ResultDocument.of(result), source=source, directory=str(tmp_path)))
    done = subprocess.run(["fio", "--parse-only", str(job)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr + done.stdout


@pytest.mark.slow
@needs_fio
def test_a_real_run_distils_to_a_job_fio_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Fallback source end to end: a kvbench run on a file tier, its job, and a short real fio run of it."""
    pytest.importorskip("kvbench_nvme", reason="needs the kvbench-nvme file tier")
    # A request count, not a duration: a loaded machine must still produce the I/O the job is distilled from.
    spec = {"version": 1, "name": "distil", "seed": 5, "model": {"name": "llama3.2-1b"}, "requests": 3,
            "workload": {"users": 2, "max_inflight": 2, "generation": "fast",
                         "options": {"profile_mix": {"chatbot": 1}}},
            "cache": {"tiers": [{"name": "nvme", "backend": "nvme", "capacity": "256MiB",
                                 "options": {"path": str(tmp_path / "kv"), "transfer_size": "256KiB"}}]},
            "output": {"directory": str(tmp_path / "results")}}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    assert main(["run", str(tmp_path / "spec.yaml"), "--quiet", "--exit-zero"]) == 0  # 3 requests: inconclusive
    (result,) = (tmp_path / "results").glob("distil-*.json")
    capsys.readouterr()
    assert main(["fio", str(result), "--size", "16MiB", "--runtime", "1s", "--directory", str(tmp_path)]) == 0
    job = tmp_path / "job.fio"
    job.write_text(capsys.readouterr().out)
    assert "; source: kvbench's per-tier counters" in job.read_text()
    done = subprocess.run(["fio", "--output-format=json", str(job)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout[done.stdout.index("{"):])
    assert sum(job["write"]["io_bytes"] for job in report["jobs"]) > 0


def test_source_block_trace_and_its_old_spelling(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--source block-trace`` distils the block trace; ``--source trace`` (its old spelling, docs/cli.md)
    gives the same job after one line naming the new spelling."""
    path = write_result(tmp_path, make_result(write=op(1, MiB, 1), sections={"block_trace": trace_section()}))
    assert main(["fio", str(path), "--source", "block-trace"]) == 0
    new = capsys.readouterr()
    assert "; source: block trace" in new.out and new.err == ""
    assert main(["fio", str(path), "--source", "trace"]) == 0
    old = capsys.readouterr()
    assert old.out == new.out
    assert old.err == "kvbench: `fio --source trace` is now `fio --source block-trace`\n"


def test_source_counters_and_its_old_spelling(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--source counters`` distils kvbench's per-tier counters even when a block trace is there;
    ``--source record`` (its old spelling) gives the same job after one line naming the new one."""
    path = write_result(tmp_path, make_result(write=op(1, MiB, 1), sections={"block_trace": trace_section()}))
    assert main(["fio", str(path), "--source", "counters"]) == 0
    new = capsys.readouterr()
    assert "; source: kvbench's per-tier counters" in new.out and new.err == ""
    assert main(["fio", str(path), "--source", "record"]) == 0
    old = capsys.readouterr()
    assert old.out == new.out
    assert old.err == "kvbench: `fio --source record` is now `fio --source counters`\n"
