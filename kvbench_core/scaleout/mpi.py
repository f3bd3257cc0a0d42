"""Scale-out across nodes on an existing engine: MPI via mpi4py (the ``mpi`` extra).

``mpirun -np N kvbench run spec.yaml`` starts N copies of kvbench; each
notices it is an MPI rank and becomes one client:

* its plan comes from ``kvbench_core.scaleout.clients.client_plan`` (own seed, own
  ``<tier path>/rank<r>`` subdirectory, per-rank or split users);
* after set-up every rank enters one ``allreduce`` (the start barrier; it
  also carries "I am ready", so a rank that failed during set-up stops the
  others instead of leaving them waiting) and reads ``time.time()`` as it
  leaves; the spread of those readings is reported as the clock skew;
* at the end rank 0 gathers every rank's result, merges them
  (``kvbench_core.results.merge``) and writes the one result; the other ranks write
  and print nothing;
* decisions between trials are collective, so ranks never diverge.

A rank killed outright is handled by the MPI launcher (Open MPI aborts the
job); a rank failing with a kvbench error still reaches the gather and is
named in the merged result.  mpi4py is imported only when the environment
says this process is one of several MPI ranks.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any

from kvbench_core.contracts.errors import MissingDependency, SpecError
from kvbench_core.engine.progress import ProgressPrinter, ProgressScope
from kvbench_core.results.merge import ClientReport, merge_results
from kvbench_core.results.trial import RunnerSlot, TrialRun, run_once
from kvbench_core.scaleout.clients import ClientFailed, ClientLayout, DirectorySnapshot, client_plan, tier_directories
from kvbench_core.spec.plan import RunPlan

#: World-size variables set by common MPI launchers (Open MPI, MPICH/Intel MPI hydra, MVAPICH).
SIZE_VARIABLES = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE")
#: Set by PMIx launchers (e.g. srun --mpi=pmix) that do not export a size.
RANK_ONLY_VARIABLES = ("PMIX_RANK",)
STOPPED = "stopped: another rank failed before measuring"


def detect_world() -> Any | None:
    """``MPI.COMM_WORLD`` when this process is one of several MPI ranks, else None (mpi4py not imported)."""
    sizes = [int(os.environ[v]) for v in SIZE_VARIABLES if os.environ.get(v, "").isdigit()]
    if not (any(size > 1 for size in sizes) or (not sizes and any(v in os.environ for v in RANK_ONLY_VARIABLES))):
        return None
    try:
        from mpi4py import MPI
    except ImportError:
        raise MissingDependency("this process was started by an MPI launcher (several ranks) but mpi4py is not "
                                "installed; install it with: pip install 'kvbench-core[mpi]'") from None
    comm = MPI.COMM_WORLD
    return comm if comm.Get_size() > 1 else None


class MpiRanks:
    """Each MPI rank runs one client; rank 0 merges and writes."""

    def __init__(self, comm: Any, plan: RunPlan) -> None:
        if plan.clients > 1:
            raise SpecError(f"clients: {plan.clients} cannot be combined with mpirun: each MPI rank is one "
                            "client; drop clients (or set 1) and choose the count with mpirun -np N")
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

        def start_together() -> None:
            ready = not self.slot.stopped
            all_ready = self.comm.allreduce(int(ready), op=self.op_min)
            released.append(time.time())
            if not all_ready:
                self.slot.stop(STOPPED)

        started = time.time()
        result, state = run_once(mine, as_written, self.slot, run_id=self.layout.run_id(run_id, self.rank),
                                 trial=trial, client_index=self.rank, barrier=start_together, on_progress=printer)
        printer.finish()
        if not released:  # failed during set-up: still take part in the start barrier, saying "not ready"
            self.comm.allreduce(0, op=self.op_min)
        mine_report = {"result": result, "released_at": released[0] if released else None,
                       "host": socket.gethostname(), "pid": os.getpid(),
                       "exit_code": state.error.exit_code if state.error else 0}
        gathered = self.comm.gather(mine_report, root=0)
        merged, error_line, exit_code = None, None, 0
        if self.rank == 0:
            plans = [client_plan(plan, self.layout, r) for r in range(self.size)]
            reports = [ClientReport(index=r, run_id=self.layout.run_id(run_id, r), seed=plans[r].seed,
                                    users=plans[r].users_for_client(r), directories=tier_directories(plans[r]),
                                    host=g["host"], pid=g["pid"], result=g["result"], released_at=g["released_at"],
                                    extra={"exit_code": g["exit_code"]})
                       for r, g in enumerate(gathered)]
            merged = merge_results(reports, mode="mpi", label="rank", run_id=run_id, trial=trial,
                                   as_written=as_written, spec=plan.spec, started_at=started)
            failed = [r for r in reports if r.failed]
            if failed:
                error_line = "; ".join(r.describe_failure("rank") for r in failed)
                exit_code = next((r.extra["exit_code"] for r in failed if r.extra["exit_code"]), ClientFailed.exit_code)
        error_line, exit_code = self.comm.bcast((error_line, exit_code), root=0)  # every rank decides alike
        self.snapshot.remove_empty()
        error = None
        if error_line is not None:
            error = ClientFailed(error_line)
            error.exit_code = exit_code
        return TrialRun(merged, error=error, crash=state.crash)
