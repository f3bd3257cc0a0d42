"""bpftrace's lifecycle (own process group, SIGINT then kill) and the plugin's hooks, with a stand-in bpftrace."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kvbench_blktrace import plugin, tracer
from kvbench_blktrace.devices import TraceDevice
from kvbench_blktrace.parse import parse_maps
from kvbench_blktrace.tracer import BpftraceProcess, Preflight, TracingUnavailable

from kvbench_core.contracts.lifecycle import RunView, TierView


def group_alive(pgid: int, grace_s: float = 5.0) -> bool:
    """Whether any process of the group is still there after ``grace_s`` (killed children need reaping)."""
    deadline = time.monotonic() + grace_s
    while True:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        if time.monotonic() > deadline:
            return True
        time.sleep(0.05)


def test_sigint_makes_it_print_its_maps_and_the_group_is_gone(printing_bpftrace: str) -> None:
    process = BpftraceProcess(printing_bpftrace, "program", attach_timeout_s=30)
    assert process.start() < 30
    pgid = process._process.pid
    assert os.getpgid(pgid) == pgid != os.getpgid(0)  # its own group: kvbench's Ctrl-C does not reach it
    output = process.stop()
    assert parse_maps(output)["flush_ios"] == 421
    assert not group_alive(pgid)


def test_a_tracer_that_ignores_sigint_is_killed(fake_bpftrace: Callable[[str], str]) -> None:
    stuck = "trap '' INT\necho 'kvbench-trace: attached'\nwhile :; do sleep 0.05; done\n"
    process = BpftraceProcess(fake_bpftrace(stuck), "program", attach_timeout_s=30, stop_timeout_s=0.5)
    process.start()
    pgid = process._process.pid
    with pytest.raises(TracingUnavailable, match=r"within 0\.5 s of SIGINT and was killed before printing its maps"):
        process.stop()
    assert not group_alive(pgid)


def test_refused_before_attaching_reports_bpftraces_error(fake_bpftrace: Callable[[str], str]) -> None:
    refused = ("echo \"ERROR: Unknown error -1: couldn't set RLIMIT_MEMLOCK for bpftrace\" >&2\n"
               "echo 'ERROR: Could not attach: Operation not permitted' >&2\nexit 1\n")
    process = BpftraceProcess(fake_bpftrace(refused), "program", attach_timeout_s=30)
    with pytest.raises(TracingUnavailable, match=r"status 1\) before its probes attached: ERROR: Could not attach"):
        process.start()


def test_never_attaching_times_out_and_leaves_nothing_running(fake_bpftrace: Callable[[str], str]) -> None:
    process = BpftraceProcess(fake_bpftrace("while :; do sleep 0.05; done\n"), "program", attach_timeout_s=0.5,
                              stop_timeout_s=5)
    with pytest.raises(TracingUnavailable, match=r"did not attach its probes within 0\.5 s"):
        process.start()


def test_dying_mid_run_is_reported_at_stop(fake_bpftrace: Callable[[str], str]) -> None:
    dies = "echo 'kvbench-trace: attached'\nsleep 0.2\necho 'ERROR: lost events' >&2\nexit 2\n"
    process = BpftraceProcess(fake_bpftrace(dies), "program", attach_timeout_s=30)
    process.start()
    process._process.wait()
    with pytest.raises(TracingUnavailable, match=r"failed during the run \(status 2\): ERROR: lost events"):
        process.stop()


# -- the plugin's hooks ------------------------------------------------------------------------------------


def fake_run(tmp_path: Path, tracing: Any) -> RunView:
    tier = TierView(name="nvme", backend="nvme", capacity_bytes=1 << 30, description={}, directory=str(tmp_path))
    return RunView(run_id="r1", client_index=0, spec={"tracing": tracing}, tiers=(tier,))


@pytest.mark.parametrize(("value", "expected"), [
    (None, None), ("none", None), ({"mode": "none", "required": True}, None),
    ("block", plugin.TracingConfig(required=False, attach_timeout_s=120.0)),
    ({"mode": "block", "required": True, "attach_timeout": "30s"}, plugin.TracingConfig(True, 30.0)),
])
def test_tracing_config(value: Any, expected: plugin.TracingConfig | None) -> None:
    assert plugin.tracing_config({"tracing": value}) == expected


def test_not_permitted_runs_untraced_with_the_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(tracer.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(tracer.shutil, "which", lambda _name: "/usr/bin/bpftrace")
    run = fake_run(tmp_path, "block")
    plugin.kvbench_measurement_started(run)
    assert "warning: running untraced: bpftrace needs root" in capsys.readouterr().err
    sections = plugin.kvbench_measurement_finished(run)
    assert list(sections) == ["block_trace_status"]  # no "block_trace": the result must not say traced
    assert sections["block_trace_status"]["traced"] is False
    assert "needs root" in sections["block_trace_status"]["reason"]


def test_required_tracing_that_is_not_possible_fails_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tracer.shutil, "which", lambda _name: None)
    with pytest.raises(TracingUnavailable, match="required but not possible: bpftrace is not installed"):
        plugin.kvbench_measurement_started(fake_run(tmp_path, {"mode": "block", "required": True}))


def test_hooks_bracket_the_window_and_return_the_section(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         printing_bpftrace: str) -> None:
    monkeypatch.setattr(tracer, "preflight", lambda paths: Preflight(
        printing_bpftrace, [TraceDevice("vda", 254, 0)], True, notes=[f"paths {paths}"]))
    run = fake_run(tmp_path, "block")
    assert plugin.kvbench_measurement_started(run) is None
    section = plugin.kvbench_measurement_finished(run)["block_trace"]
    assert section["tool"] == "bpftrace v0.0-fake" and section["pid"] == os.getpid()
    assert section["devices"] == [{"name": "vda", "dev": "254:0"}]
    assert section["paths"] == {"nvme": os.path.realpath(tmp_path)}
    assert section["totals"]["write"]["ios"] > 0 and section["histograms"]["d2c_write_us"]["count"] > 0
    assert section["notes"][0] == f"paths [{os.path.realpath(tmp_path)!r}]"
    assert plugin._ACTIVE == {}


def test_a_tracer_dying_mid_run_leaves_the_run_untraced_with_the_reason(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_bpftrace: Callable[[str], str],
        capsys: pytest.CaptureFixture[str]) -> None:
    dies = "echo 'kvbench-trace: attached'\necho 'ERROR: map full' >&2\nexit 1\n"
    executable = fake_bpftrace(dies)
    monkeypatch.setattr(tracer, "preflight", lambda paths: Preflight(executable, [], True))
    run = fake_run(tmp_path, "block")
    plugin.kvbench_measurement_started(run)
    plugin._ACTIVE[("r1", 0)].process._process.wait()  # it dies before the window closes
    sections = plugin.kvbench_measurement_finished(run)
    assert list(sections) == ["block_trace_status"]
    assert "failed during the run (status 1): ERROR: map full" in sections["block_trace_status"]["reason"]
    assert "warning: running untraced" in capsys.readouterr().err
