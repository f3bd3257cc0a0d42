"""Heartbeats between MPI ranks, so that a rank killed outright (kill -9, the OOM killer, a node gone) is
noticed and named, and the others stop instead of waiting for it.

Why kvbench does this itself: without ULFM (the fault-tolerant MPI of Open MPI 5 ``--with-ft ulfm``; Debian's
Open MPI 4.1 and mpi4py have none) MPI cannot tell a live program that a peer died: a collective that
includes the dead rank hangs, and by default ``mpirun`` kills the whole job (no result at all).  Started with
``mpirun --enable-recovery`` the job survives the death, and then liveness is ours to watch:

* every rank other than 0 sends rank 0 a heartbeat every ``BEAT_S`` from a thread, for the whole trial (set-up,
  measuring, drain, cleanup and the wait for rank 0's verdict), carrying its latest progress point;
* rank 0's thread declares a rank **lost** once it has been silent for ``LOST_AFTER_S``; it stops its own
  runner and sends every other live rank a stop, which they apply as a signal's stop is applied (drain
  within the drain limit, clean up, report);
* the end-of-trial reports and verdict travel point to point (``send``/``recv``), never as a collective, so
  rank 0 skips a lost rank instead of waiting for it; the merged result names the rank and what it last
  reported (``clients[].last_report``).

All MPI calls here are point to point on their own tags, safe next to the main thread's (mpi4py asks for
``MPI_THREAD_MULTIPLE``).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

BEAT_S = 0.5
#: Ten missed beats: far above a loaded machine's scheduling hiccups, well below any drain limit's patience.
LOST_AFTER_S = 5.0
TAG_BEAT, TAG_STOP, TAG_REPORT, TAG_VERDICT, TAG_BYE = 701, 702, 703, 704, 705
#: After a loss, how long a survivor waits at exit for rank 0 to have written the result.
BYE_WAIT_S = 120.0
POLL_S = 0.01


class RankWatch:
    """One trial's liveness watch on one rank: a thread that beats (ranks > 0) or listens (rank 0)."""

    def __init__(self, comm: Any, stop: Callable[[str], None]) -> None:
        self.comm, self.stop_runner = comm, stop
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.lock = threading.Lock()
        self.latest: dict[str, Any] = {}  # this rank's latest progress point
        self.started = time.monotonic()
        self.seen: dict[int, float] = {r: self.started for r in range(1, self.size)}  # rank 0: last beat
        self.last: dict[int, dict[str, Any]] = {}  # rank 0: each rank's last beat
        self.lost: dict[int, float] = {}  # rank 0: rank -> seconds it had been silent when declared lost
        self.broken = threading.Event()  # a rank was lost (rank 0) or rank 0 said so (the others)
        self.done = threading.Event()
        self.stops: list[Any] = []  # rank 0's stop messages in flight (a request must outlive its send)
        self.thread = threading.Thread(target=self._listen if self.rank == 0 else self._beat,
                                       name="kvbench-rank-watch", daemon=True)

    def __enter__(self) -> RankWatch:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.done.set()
        self.thread.join()

    def saw(self, point: dict[str, Any]) -> None:
        """The runner's latest progress point: the next beat carries it."""
        with self.lock:
            self.latest = dict(point)

    # -- ranks > 0 ---------------------------------------------------------------------------------------
    def _beat(self) -> None:
        identity = {"host": socket.gethostname(), "pid": os.getpid()}
        pending = None
        while not self.done.wait(BEAT_S):
            if pending is None or pending.Test():  # rank 0 gone: beats stop queueing
                with self.lock:
                    point = self.latest
                pending = self.comm.isend({**identity, "point": point, "at": time.time()}, dest=0, tag=TAG_BEAT)
            if self.comm.iprobe(source=0, tag=TAG_STOP):
                self.broken.set()
                self.stop_runner(self.comm.recv(source=0, tag=TAG_STOP))

    # -- rank 0 ------------------------------------------------------------------------------------------
    def _listen(self) -> None:
        from mpi4py import MPI

        status = MPI.Status()
        while not self.done.wait(POLL_S * 10):
            while self.comm.iprobe(source=MPI.ANY_SOURCE, tag=TAG_BEAT, status=status):
                source = status.Get_source()
                beat = self.comm.recv(source=source, tag=TAG_BEAT)
                with self.lock:
                    self.seen[source], self.last[source] = time.monotonic(), beat
            self._declare_lost()

    def _declare_lost(self) -> None:
        now = time.monotonic()
        with self.lock:
            silent = {r: now - seen for r, seen in self.seen.items() if r not in self.lost}
            newly = {r: s for r, s in silent.items() if s > LOST_AFTER_S}
            self.lost.update(newly)
        if not newly:
            return
        reason = "; ".join(f"rank {r} lost: no heartbeat for {s:.1f} s" for r, s in sorted(newly.items()))
        self.broken.set()
        self.stop_runner(reason)
        for r in range(1, self.size):
            if r not in self.lost:
                self.stops.append(self.comm.isend(reason, dest=r, tag=TAG_STOP))

    def forget(self, rank: int) -> None:
        """Rank 0 has ``rank``'s report: its silence from now on (it is exiting) is no loss."""
        with self.lock:
            self.seen.pop(rank, None)

    def last_report(self, rank: int) -> dict[str, Any] | None:
        """What a lost rank last said: its progress point, when, and how long it had then been silent."""
        with self.lock:
            beat, silent = self.last.get(rank), self.lost.get(rank)
        if beat is None:
            return {"point": None, "at": None, "silent_s": round(silent or 0.0, 3)}
        return {"point": beat["point"], "at": beat["at"], "silent_s": round(silent or 0.0, 3)}

    def identity(self, rank: int) -> tuple[str | None, int | None]:
        with self.lock:
            beat = self.last.get(rank) or {}
        return beat.get("host"), beat.get("pid")

    # -- both --------------------------------------------------------------------------------------------
    def wait(self, request: Any) -> bool:
        """Wait for a non-blocking collective; false (left pending) when a rank was lost meanwhile."""
        while not request.Test():
            if self.broken.is_set():
                return False
            time.sleep(POLL_S)
        return True

    def gather_reports(self, mine: dict[str, Any]) -> dict[int, dict[str, Any]]:
        """Rank 0: every rank's end-of-trial report, skipping the ranks lost before or while it waits."""
        from mpi4py import MPI

        reports, status = {0: mine}, MPI.Status()
        while len(reports) + len(self.lost) < self.size:
            if self.comm.iprobe(source=MPI.ANY_SOURCE, tag=TAG_REPORT, status=status):
                source = status.Get_source()
                reports[source] = self.comm.recv(source=source, tag=TAG_REPORT)
                self.forget(source)
            else:
                time.sleep(POLL_S)
        return reports

    def send_report(self, mine: dict[str, Any]) -> None:
        self.comm.send(mine, dest=0, tag=TAG_REPORT)

    def tell_verdict(self, verdict: tuple[str | None, int, list[int]], reported: set[int]) -> None:
        for r in sorted(reported - {0}):
            self.comm.send(verdict, dest=r, tag=TAG_VERDICT)

    def hear_verdict(self) -> tuple[str | None, int, list[int]]:
        verdict: tuple[str | None, int, list[int]] = self.comm.recv(source=0, tag=TAG_VERDICT)
        return verdict


def say_bye(comm: Any, survivors: list[int]) -> None:
    """Rank 0, exiting after a loss with the result written: the survivors may go."""
    for r in survivors:
        comm.send("bye", dest=r, tag=TAG_BYE)


def hear_bye(comm: Any, _survivors: list[int]) -> None:
    """A survivor of a loss, exiting: wait (bounded) for rank 0's word that the result is written, because
    once a rank exits Open MPI's launcher starts to end the job, rank 0 included."""
    deadline = time.monotonic() + BYE_WAIT_S
    while time.monotonic() < deadline and not comm.iprobe(source=0, tag=TAG_BYE):
        time.sleep(POLL_S)
