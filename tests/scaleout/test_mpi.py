"""MPI scale-out: ``mpirun -np 2 kvbench run`` makes each rank a client and rank 0 writes one merged result."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest
from conftest import small_spec
from tiny_spec import assert_valid_result, tiny_spec

from kvbench_core.scaleout.mpi import detect_world

MPIRUN = shutil.which("mpirun")
needs_mpi = pytest.mark.skipif(MPIRUN is None or importlib.util.find_spec("mpi4py") is None,
                               reason="needs mpirun (Open MPI) and mpi4py (pip install 'kvbench-core[mpi]')")


def _mpirun(ranks: int, args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1"}
    command = [MPIRUN, "--oversubscribe", "-np", str(ranks), sys.executable, "-m", "kvbench_core.cli", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)


def test_without_an_mpi_launcher_there_is_no_world(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE", "PMIX_RANK"):
        monkeypatch.delenv(name, raising=False)
    assert detect_world() is None
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "1")  # mpirun -np 1: a plain run
    assert detect_world() is None


@pytest.mark.mpi
@pytest.mark.slow
@needs_mpi
def test_two_ranks_write_one_merged_result(tmp_path: Path) -> None:
    spec = tiny_spec(tmp_path, workload={"users": 4, "users_scope": "split", "max_inflight": 2})
    done = _mpirun(2, ["run", str(spec)], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    files = list((tmp_path / "out").glob("*.json"))
    assert len(files) == 1, files  # only rank 0 writes
    result = json.loads(files[0].read_text())
    assert_valid_result(result)
    scale = result["scale_out"]
    assert (scale["mode"], scale["label"], scale["clients"]) == ("mpi", "rank", 2)
    assert scale["users_scope"] == "split" and scale["users_per_client"] == [2, 2]
    assert 0 <= scale["clock_skew_s"] < 1.0
    assert [c["directories"] for c in result["clients"]] == [[str(tmp_path / "cache" / f"rank{r}")] for r in (0, 1)]
    assert [c["status"] for c in result["clients"]] == ["completed", "completed"]
    assert result["metrics"]["headline"]["requests_completed"] == sum(
        c["metrics"]["headline"]["requests_completed"] for c in result["clients"])
    assert done.stdout.count("result: ") == 1  # one summary, from rank 0
    assert not (tmp_path / "cache").exists()


@pytest.mark.mpi
@pytest.mark.slow
@needs_mpi
def test_clients_and_mpirun_together_are_refused(tmp_path: Path) -> None:
    done = _mpirun(2, ["run", str(tiny_spec(tmp_path)), "--clients", "2"], tmp_path)
    assert done.returncode != 0
    assert "cannot be combined with mpirun" in done.stderr


class _OneRankWorld:
    """A communicator of one rank, enough for MpiRanks' collectives (no MPI library is started)."""

    def Get_rank(self) -> int:  # mpi4py's spelling
        return 0

    def Get_size(self) -> int:
        return 1

    def bcast(self, value: object, root: int = 0) -> object:
        return value

    def allreduce(self, value: object, op: object = None) -> object:
        return value

    def Iallreduce(self, send: object, receive: list[int], op: object = None) -> object:
        receive[0] = send[0]  # type: ignore[index]
        return types.SimpleNamespace(Test=lambda: True)

    def iprobe(self, source: int = 0, tag: int = 0, status: object = None) -> bool:
        return False


def test_a_signal_before_a_ranks_runner_exists_still_stops_it(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """As the in-process launcher (tests/engine/test_measurement_window.py): a stop asked for before the trial's
    runner is built is applied to it once it exists, instead of finding no runner and being lost."""
    from kvbench_core.engine.measure.progress import ProgressPrinter
    from kvbench_core.runspec.loader import resolve, validate
    from kvbench_core.runspec.plan import plan_run
    from kvbench_core.scaleout.mpi import MpiRanks

    monkeypatch.setitem(sys.modules, "mpi4py", types.SimpleNamespace(MPI=types.SimpleNamespace(
        MIN="min", MAX="max", ANY_SOURCE=-1, Status=lambda: None)))
    spec = small_spec(output={"directory": str(tmp_path)})
    validate(spec)
    plan = plan_run(resolve(spec, str(tmp_path)))
    ranks = MpiRanks(_OneRankWorld(), plan)
    ranks.stop("signal SIGINT")
    run = ranks.run_trial(spec, plan, run_id="r", trial=1, printer=ProgressPrinter("off"))
    assert (run.result["run"]["status"], run.result["run"]["stop_reason"]) == ("interrupted", "signal SIGINT")
    assert run.result["metrics"]["requests"]["completed"] < spec["requests"]
