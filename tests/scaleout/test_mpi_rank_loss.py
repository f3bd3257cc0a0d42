"""A rank killed outright (kill -9 one rank of a real ``mpirun -np 3``): the others stop within the drain limit
and rank 0's merged result names the lost rank and what it last reported; the exit status is non-zero."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
from test_mpi import MPIRUN, needs_mpi
from tiny_spec import assert_valid_result, tiny_spec

from kvbench_core.scaleout import rank_watch
from kvbench_core.scaleout.rank_watch import LOST_AFTER_S

DRAIN_S = 2.0
GRACE_S = 30


def _rank_pid(marker: str, rank: int) -> int | None:
    """The pid of MPI rank ``rank`` started by this test (its environment carries ``marker``)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            variables = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"KVBENCH_TEST_MARK={marker}".encode() in variables and f"OMPI_COMM_WORLD_RANK={rank}".encode() in variables:
            return int(entry.name)
    return None


@pytest.mark.mpi
@pytest.mark.slow
@needs_mpi
def test_a_rank_killed_mid_run_is_named_and_the_others_stop_within_the_drain_limit(tmp_path: Path) -> None:
    spec = tiny_spec(tmp_path, duration="120s", drain_timeout=f"{DRAIN_S}s")
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "KVBENCH_TEST_MARK": str(tmp_path)}
    # Open MPI's own reaction to a dead rank waits GRACE_S, then sends SIGTERM, then GRACE_S more and SIGKILL
    # (docs/scale-out.md): kvbench must have written the merged result before the first signal.
    command = [MPIRUN, "--oversubscribe", "--mca", "odls_base_sigkill_timeout", str(GRACE_S), "-np", "3",
               sys.executable, "-m", "kvbench_core.cli", "run", str(spec)]
    mpirun = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                              cwd=tmp_path)
    try:
        deadline = time.monotonic() + 120
        victim = None
        while victim is None or not (tmp_path / "cache" / "rank1").exists():  # rank 1 is set up
            assert time.monotonic() < deadline and mpirun.poll() is None, ("rank 1 never started", mpirun.poll())
            victim = _rank_pid(str(tmp_path), 1)
            time.sleep(0.2)
        time.sleep(4.0)  # well into its run
        os.kill(victim, signal.SIGKILL)
        killed = time.monotonic()
        while not list((tmp_path / "out").glob("*.json")) and time.monotonic() - killed < 2 * GRACE_S:
            time.sleep(0.1)
        took = time.monotonic() - killed  # to the merged result: kvbench's part
        stdout, stderr = mpirun.communicate(timeout=2 * GRACE_S + 60)  # then Open MPI's: two graces at most
    finally:
        if mpirun.poll() is None:
            mpirun.kill()
            mpirun.communicate()
    assert mpirun.returncode != 0, stdout + stderr
    # Noticed after LOST_AFTER_S of silence, then a drain within DRAIN_S, cleanup, the merge and MPI's exit.
    assert took < LOST_AFTER_S + DRAIN_S + 20 < GRACE_S, (took, stdout, stderr)  # by kvbench, not by mpirun
    files = list((tmp_path / "out").glob("*.json"))
    assert len(files) == 1, (files, stdout, stderr)
    result = json.loads(files[0].read_text())
    assert_valid_result(result)
    assert result["run"]["status"] == "failed"
    assert f"rank 1 (pid {victim}" in result["run"]["error"] and "was lost" in result["run"]["error"]
    assert "rank 1" in stderr and "was lost" in stderr
    lost, survivors = result["clients"][1], [result["clients"][0], result["clients"][2]]
    assert (lost["status"], lost["pid"]) == ("failed", victim)
    assert lost["last_report"]["silent_s"] >= LOST_AFTER_S
    last = lost["last_report"]["point"]
    assert last["phase"] in ("warmup", "measure") and last["elapsed_s"] > 0
    assert lost["last_report"]["at"] <= time.time()
    for rank in survivors:
        assert rank["status"] == "interrupted" and "rank 1 lost" in rank["stop_reason"]
        assert rank["phases_s"]["drain"] <= DRAIN_S + 1.0  # the drain limit, plus the cancel grace
        assert rank["metrics"]["headline"]["requests_completed"] > 0
    assert result["metrics"]["window"]["measured_s"] < 60  # stopped, not run to its 120 s


class _FakeComm:
    """Point-to-point calls of one rank in a world of two, recorded; no MPI library is started."""

    def __init__(self, rank: int, stop_from_rank0: str | None = None) -> None:
        self.rank, self.sent, self.stop = rank, [], stop_from_rank0

    def Get_rank(self) -> int:  # mpi4py's spelling
        return self.rank

    def Get_size(self) -> int:
        return 2

    def isend(self, value: object, dest: int, tag: int) -> object:
        self.sent.append((dest, tag, value))
        return types.SimpleNamespace(Test=lambda: True)

    def iprobe(self, source: int = 0, tag: int = 0, status: object = None) -> bool:
        return tag == rank_watch.TAG_STOP and self.stop is not None

    def recv(self, source: int = 0, tag: int = 0) -> object:
        stop, self.stop = self.stop, None
        return stop


@pytest.fixture
def fast_watch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rank_watch, "LOST_AFTER_S", 0.3)
    monkeypatch.setattr(rank_watch, "BEAT_S", 0.05)
    monkeypatch.setitem(sys.modules, "mpi4py", types.SimpleNamespace(MPI=types.SimpleNamespace(
        ANY_SOURCE=-1, Status=lambda: None)))


def test_rank_0_declares_a_silent_rank_lost_once_and_says_what_it_knew(fast_watch: None) -> None:
    stops: list[str] = []
    with rank_watch.RankWatch(_FakeComm(0), stops.append) as watch:
        deadline = time.monotonic() + 10
        while not watch.broken.is_set() and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.2)  # more silence declares nothing twice
    assert stops == [stops[0]] and stops[0].startswith("rank 1 lost: no heartbeat for ")
    last = watch.last_report(1)
    assert last["point"] is None and last["silent_s"] >= 0.3  # it never beat: nothing to tell but silence


def test_a_rank_beats_its_latest_point_and_applies_rank_0s_stop(fast_watch: None) -> None:
    stops: list[str] = []
    comm = _FakeComm(1, stop_from_rank0="rank 2 lost: no heartbeat for 5.0 s")
    with rank_watch.RankWatch(comm, stops.append) as watch:
        watch.saw({"phase": "measure", "elapsed_s": 1.5})
        deadline = time.monotonic() + 10
        while not (stops and any(beat["point"] for _, _, beat in comm.sent)) and time.monotonic() < deadline:
            time.sleep(0.02)
    assert stops == ["rank 2 lost: no heartbeat for 5.0 s"] and watch.broken.is_set()
    dest, tag, beat = comm.sent[-1]
    assert (dest, tag, beat["pid"], beat["point"]) == (0, rank_watch.TAG_BEAT, os.getpid(),
                                                        {"phase": "measure", "elapsed_s": 1.5})
