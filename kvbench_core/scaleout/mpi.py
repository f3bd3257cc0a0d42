"""Scale-out across nodes on an existing engine: MPI via mpi4py (the ``mpi`` extra).

``mpirun -np N kvbench run spec.yaml`` starts N copies of kvbench; each
notices it is an MPI rank and becomes one client:

* its plan comes from ``kvbench_core.scaleout.clients.client_plan`` (own seed, own
  ``<tier path>/rank<r>`` subdirectory, per-rank or split users);
* after set-up every rank enters one ``allreduce`` (the start barrier; it
  also carries "I am ready", so a rank that failed during set-up stops the
  others instead of leaving them waiting) and reads ``time.time()`` as it
  leaves; the spread of those readings is reported as the clock skew;
* at the end every rank sends rank 0 its result, point to point; rank 0 merges them
  (``kvbench_core.results.merge``), writes the one result and tells every rank the
  verdict; the other ranks write and print nothing;
* decisions between trials are collective, so ranks never diverge.

A rank failing with a kvbench error still reports and is named in the merged
result.  A rank killed outright is noticed by its missing heartbeats
(``kvbench_core.scaleout.rank_watch``): the others stop and rank 0 names it, with
what it last reported — when the launcher lets the job live on (Open MPI:
``mpirun --enable-recovery``; by default it kills every rank).  The start barrier is
a non-blocking allreduce watched the same way, so a death during set-up does not
leave the others waiting.  mpi4py is imported only when the environment says this
process is one of several MPI ranks.
"""

from __future__ import annotations

import atexit
import os
import socket
import time
from array import array
from functools import partial
from typing import Any

from kvbench_core.contracts.errors import MissingDependency, SpecError
from kvbench_core.engine.measure.progress import ProgressPrinter, ProgressScope
from kvbench_core.results.document import ResultDocument
from kvbench_core.results.merge import ClientReport, merge_results
from kvbench_core.results.trial import RunnerSlot, TrialRun, run_once
from kvbench_core.runspec.plan import RunPlan
from kvbench_core.scaleout.clients import (
    ClientFailed,
    ClientLayout,
    DirectorySnapshot,
    client_failure,
    client_plan,
    tier_directories,
)
from kvbench_core.scaleout.rank_watch import RankWatch, hear_bye, say_bye

#: World-size variables set by common MPI launchers (Open MPI, MPICH/Intel MPI hydra, MVAPICH).
SIZE_VARIABLES = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE")
#: Set by PMIx launchers (e.g. srun --mpi=pmix) that do not export a size.
RANK_ONLY_VARIABLES = ("PMIX_RANK",)
STOPPED = "stopped: another rank failed before measuring"


#: How this process leaves MPI at exit: ``MPI_Finalize`` waits for every rank, so after a loss it is skipped
#: (Open MPI's finalize would wait for the dead rank forever); the survivors wait for rank 0's word instead.
_AT_EXIT: dict[str, Any] = {"after_loss": None}


def _leave_mpi() -> None:
    from mpi4py import MPI

    after_loss = _AT_EXIT["after_loss"]
    if after_loss is not None:
        after_loss()
    elif not MPI.Is_finalized():
        MPI.Finalize()


def detect_world() -> Any | None:
    """``MPI.COMM_WORLD`` when this process is one of several MPI ranks, else None (mpi4py not imported)."""
    sizes = [int(os.environ[v]) for v in SIZE_VARIABLES if os.environ.get(v, "").isdigit()]
    if not (any(size > 1 for size in sizes) or (not sizes and any(v in os.environ for v in RANK_ONLY_VARIABLES))):
        return None
    try:
        import mpi4py

        mpi4py.rc.finalize = False  # _leave_mpi decides, at exit
        from mpi4py import MPI
    except ImportError:
        raise MissingDependency("this process was started by an MPI launcher (several ranks) but mpi4py is not "
                                "installed; install it with: pip install 'kvbench-core[mpi]'") from None
    if not _AT_EXIT.get("registered"):
        _AT_EXIT["registered"] = True
        atexit.register(_leave_mpi)
    comm = MPI.COMM_WORLD
    return comm if comm.Get_size() > 1 else None


class MpiRanks:
    """Each MPI rank runs one client; rank 0 merges and writes."""

    def __init__(self, comm: Any, plan: RunPlan) -> None:
        if plan.clients > 1:
            raise SpecError(f"clients: {plan.clients} cannot be combined with mpirun: each MPI rank is one "
                            "client; drop clients (or set 1) and choose the count with mpirun -np N")
        if plan.processes > 1:
            raise SpecError(f"workers.processes: {plan.processes} cannot be combined with mpirun: each MPI rank is "
                            "one process; drop workers.processes (or set 1) and choose the count with mpirun -np N")
        from mpi4py import MPI

        self.comm, self.op_min, self.op_max = comm, MPI.MIN, MPI.MAX
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.writer = self.rank == 0
        self.progress_scope = ProgressScope(f"rank 0/{self.size} ")  # only rank 0 prints, its own figures
        self.layout = ClientLayout("rank", self.size)
        self.slot = RunnerSlot()  # a signal may come before the trial's runner exists
        # Taken before the first collective, so no rank has created a directory yet.
        self.snapshot = DirectorySnapshot([d for r in range(self.size)
                                           for d in tier_directories(client_plan(plan, self.layout, r))])

    def agree(self, run_id: str) -> str:
        return self.comm.bcast(run_id if self.rank == 0 else None, root=0)

    def agree_stop(self, stop: bool) -> bool:
        return bool(self.comm.allreduce(int(stop), op=self.op_max))

    def stop(self, reason: str) -> None:
        self.slot.stop(reason)

    def run_trial(self, as_written: dict[str, Any], plan: RunPlan, *, run_id: str, trial: int,
                  printer: ProgressPrinter) -> TrialRun:
        mine = client_plan(plan, self.layout, self.rank)
        released: list[float] = []
        started = time.time()
        with RankWatch(self.comm, self.slot.stop) as watch:

            def start_together() -> None:
                ready = array("i", [int(not self.slot.stopped)])
                everyone = array("i", [0])
                if not watch.wait(self.comm.Iallreduce(ready, everyone, op=self.op_min)):
                    return  # a rank was lost during set-up: the stop is already on its way
                released.append(time.time())
                if not everyone[0]:
                    self.slot.stop(STOPPED)

            def progress(point: dict[str, Any]) -> None:
                watch.saw(point)
                printer(point)

            result, state = run_once(mine, as_written, self.slot, run_id=self.layout.run_id(run_id, self.rank),
                                     trial=trial, client_index=self.rank, barrier=start_together,
                                     on_progress=progress)
            printer.finish()
            if not released and not watch.broken.is_set():  # failed during set-up: still say "not ready"
                watch.wait(self.comm.Iallreduce(array("i", [0]), array("i", [0]), op=self.op_min))
            mine_report = {"result": result, "released_at": released[0] if released else None,
                           "host": socket.gethostname(), "pid": os.getpid(),
                           "exit_code": state.error.exit_code if state.error else 0}
            if self.rank == 0:
                merged, verdict = self._merge(watch, mine_report, as_written, plan, run_id, trial, started)
            else:
                watch.send_report(mine_report)
                merged, verdict = None, watch.hear_verdict()  # every rank decides alike
        self.snapshot.remove_empty()
        error_line, exit_code, survivors = verdict
        if len(survivors) + 1 < self.size:  # a rank was lost: no MPI_Finalize (see _leave_mpi)
            _AT_EXIT["after_loss"] = partial(say_bye if self.rank == 0 else hear_bye, self.comm, survivors)
        error = None
        if error_line is not None:
            error = ClientFailed(error_line)
            error.exit_code = exit_code
        return TrialRun(merged, error=error, crash=state.crash)

    def _merge(self, watch: RankWatch, mine: dict[str, Any], as_written: dict[str, Any], plan: RunPlan,
               run_id: str, trial: int, started: float) -> tuple[dict[str, Any], tuple[str | None, int, list[int]]]:
        """Rank 0: the ranks' reports (a lost rank's place says so, with its last heartbeat), merged; and the
        verdict every reporting rank is told."""
        gathered = watch.gather_reports(mine)
        plans = [client_plan(plan, self.layout, r) for r in range(self.size)]
        reports = [self._report(r, plans[r], run_id, gathered.get(r), watch) for r in range(self.size)]
        merged = merge_results(reports, mode="mpi", label="rank", run_id=run_id, trial=trial,
                               as_written=as_written, spec=plan.spec, started_at=started)
        failure = client_failure(reports, "rank")
        survivors = sorted(set(gathered) - {0})
        verdict = (None, 0, survivors) if failure is None else (failure.args[0], failure.exit_code, survivors)
        watch.tell_verdict(verdict, set(gathered))
        return merged, verdict

    def _report(self, rank: int, plan: RunPlan, run_id: str, got: dict[str, Any] | None,
                watch: RankWatch) -> ClientReport:
        common = {"index": rank, "run_id": self.layout.run_id(run_id, rank), "seed": plan.seed,
                  "users": plan.users_for_client(rank), "directories": tier_directories(plan)}
        if got is None:  # lost: killed outright, or its node went away
            host, pid = watch.identity(rank)
            last = watch.last_report(rank)
            return ClientReport(**common, host=host, pid=pid, ended=f"was lost: no heartbeat for {last['silent_s']} s "
                                "(killed, or its node went away)", extra={"exit_code": None, "last_report": last})
        return ClientReport(**common, host=got["host"], pid=got["pid"], result=ResultDocument.unchecked(got["result"]),
                            released_at=got["released_at"], extra={"exit_code": got["exit_code"]})
