"""Local multi-client, the embedded default for scaling out on one machine (seed §2.1, §11.6).

``clients: N`` runs N client processes (multiprocessing, ``spawn``: a fresh
interpreter each, so N processes escape one GIL as N inference engines on a
server would).  This process coordinates and runs no client itself:

* each client runs the plan derived by ``kvbench_core.scaleout.clients`` (own seed,
  own ``<tier path>/client<i>`` subdirectory, its share of users);
* all report "ready" after set-up (preload, preconditioning) and wait for
  one "go", so they start measuring together;
* their progress points arrive here and are printed as one aggregate line;
* a client that dies (killed, crashed) or fails stops all the others; so
  does Ctrl-C or SIGTERM here (a second one kills the clients outright); the
  merged result names the client and how it ended, and what a dead client
  could not clean up is removed for it;
* results come back and are merged (``kvbench_core.results.merge``).

``workers: {processes: N}`` runs the same way, with worker processes instead of clients: each is a share
of the one run (the run's seed, every N-th user, 1/N of each tier; ``clients.client_plan``), so the merge
adds shares of one run instead of N runs (docs/scale-out.md, worker processes).

Each client talks to the coordinator over its own pipe, never through a
shared lock, condition or barrier: a client killed while holding one of
those would freeze everybody else (``multiprocessing.Barrier.abort`` waits
for every sleeper to acknowledge, a dead one never does).  A pipe to a dead
process just reads end-of-file.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import signal
import socket
import threading
import time
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

from kvbench_core.engine.measure.progress import ProgressPrinter, ProgressScope
from kvbench_core.results.document import ResultDocument
from kvbench_core.results.merge import ClientReport, merge_results, plural
from kvbench_core.results.trial import RunnerSlot, TrialRun, run_once, stop_on_signals
from kvbench_core.runspec.plan import RunPlan
from kvbench_core.scaleout.clients import DirectorySnapshot, client_failure, client_plan, local_layout, tier_directories

POLL_S = 0.2
WORST_CLIENT = "worst client"  # whose p95 the aggregate progress line shows (see ``worst_p95``)
JOIN_S = 10.0  # after its result, a client only has to exit; past this it is killed


@dataclass
class ClientJob:
    """What a client process needs (pickled to it by ``spawn``)."""

    index: int
    plan: RunPlan
    as_written: dict[str, Any]
    run_id: str
    trial: int


class LocalClients:
    """Runs each trial as ``plan.clients`` local processes, or as the run's ``workers.processes`` (each a share
    of the one run: ``clients.client_plan``), and merges their results."""

    writer = True

    def __init__(self, plan: RunPlan) -> None:
        self.layout = local_layout(plan)
        self.progress_scope = ProgressScope(f"{self.layout.total} {plural(self.layout.label)} ", p95_of=WORST_CLIENT)
        self._stop_reasons: list[str] = []

    def agree(self, run_id: str) -> str:
        return run_id

    def agree_stop(self, stop: bool) -> bool:
        return stop

    def stop(self, reason: str) -> None:
        """A signal here (noted; the coordinator loop stops every client, a second signal kills them)."""
        self._stop_reasons.append(reason)

    def run_trial(self, as_written: dict[str, Any], plan: RunPlan, *, run_id: str, trial: int,
                  printer: ProgressPrinter) -> TrialRun:
        plans = local_client_plans(plan)
        snapshot = DirectorySnapshot([d for p in plans for d in tier_directories(p)])
        reports = self._reports(plans, run_id)
        self._stop_reasons.clear()
        started = time.time()
        processes, conns = _start(plans, as_written, trial, reports)
        try:
            _Coordinator(processes, conns, reports, printer, self._stop_reasons, self.layout.label).run()
        finally:
            _reap(processes, reports, snapshot)
        printer.finish()
        label, split = self.layout.label, self.layout.splits_the_run
        error = client_failure(reports, label)
        if all(r.result is None for r in reports):
            return TrialRun(None, error=error)
        merged = merge_results(reports, mode="processes" if split else "local", label=label, run_id=run_id,
                               trial=trial, as_written=as_written, spec=plan.spec, started_at=started,
                               users_scope="split" if split else None)
        return TrialRun(merged, error=error)

    def _reports(self, plans: list[RunPlan], run_id: str) -> list[ClientReport]:
        """What the coordinator will know of each client: who it is (its pid once started) and its result."""
        host = socket.gethostname()
        return [ClientReport(index=i, run_id=self.layout.run_id(run_id, i), seed=plans[i].seed,
                             users=plans[i].users_for_client(i), directories=tier_directories(plans[i]), host=host)
                for i in range(self.layout.total)]


def _start(plans: list[RunPlan], as_written: dict[str, Any], trial: int,
           reports: list[ClientReport]) -> tuple[list[Any], list[Connection]]:
    """Start one ``spawn`` process per client, each with the child end of its own pipe (then closed here, so
    end-of-file on ours means the child is gone); the processes and our ends, their pids in ``reports``."""
    context = multiprocessing.get_context("spawn")
    pipes = [context.Pipe() for _ in reports]
    processes = [context.Process(target=client_main, name=f"kvbench-client{i}",
                                 args=(ClientJob(i, plans[i], as_written, reports[i].run_id, trial), pipes[i][1]))
                 for i in range(len(reports))]
    for process, report, (_, child_end) in zip(processes, reports, pipes, strict=True):
        process.start()
        child_end.close()
        report.pid = process.pid
    return processes, [parent for parent, _ in pipes]


def _reap(processes: list[Any], reports: list[ClientReport], snapshot: DirectorySnapshot) -> None:
    """Every client gone (one that outlives ``JOIN_S`` after its result is killed), and what a client that
    sent no result left in its directories removed for it."""
    for process in processes:
        process.join(JOIN_S)
        if process.is_alive():
            process.kill()
            process.join()
    for report in reports:
        if report.result is None:
            for directory in report.directories:
                snapshot.remove_leftovers(directory, report.run_id)
    snapshot.remove_empty()


class _Coordinator:
    """The parent's loop: ready/go, progress, results, deaths noticed, everybody stopped together."""

    def __init__(self, processes: list[Any], conns: list[Connection], reports: list[ClientReport],
                 printer: ProgressPrinter, stop_reasons: list[str], label: str) -> None:
        self.processes, self.conns, self.reports, self.printer = processes, conns, reports, printer
        self.stop_reasons, self.label = stop_reasons, label
        self.pending = set(range(len(processes)))  # neither a result nor an exit seen yet
        self.ready: set[int] = set()
        self.went = False
        self.stopped = False
        self.killed = False
        self.points: dict[int, dict[str, Any]] = {}
        self.fresh: set[int] = set()
        self.last_print = time.monotonic()  # the first line waits for every client, as later ones do

    def run(self) -> None:
        by_handle = {p.sentinel: i for i, p in enumerate(self.processes)}
        by_conn = {id(c): i for i, c in enumerate(self.conns)}
        while self.pending:
            waitables = [self.conns[i] for i in self.pending] + [self.processes[i].sentinel for i in self.pending]
            for item in wait(waitables, timeout=POLL_S):
                if isinstance(item, int):
                    self._exited(by_handle[item])
                elif not self._receive(by_conn[id(item)]):
                    self._exited(by_conn[id(item)])
            if self.stop_reasons and not self.stopped:
                self._stop_all(self.stop_reasons[0])
            if len(self.stop_reasons) > 1 and not self.killed:
                self.killed = True
                for index in self.pending:
                    self.processes[index].kill()

    def _receive(self, index: int) -> bool:
        """Handle one message from client ``index``; false at end-of-file (the client is ending)."""
        try:
            kind, payload = self.conns[index].recv()
        except (EOFError, OSError):
            return False
        report = self.reports[index]
        if kind == "ready":
            self.ready.add(index)
            if len(self.ready) == len(self.processes) and not self.stopped:
                self.went = True
                self._send_all(("go", None))
        elif kind == "released":
            report.released_at = payload
        elif kind == "progress":
            self._progress(index, payload)
        elif kind == "result":
            report.result = ResultDocument.unchecked(payload["result"])  # the client's own, read once
            report.extra["exit_code"] = payload["exit_code"]
            if report.failed:
                self._stop_all(f"{self.label} {index} failed")
        return True

    def _exited(self, index: int) -> None:
        if index not in self.pending:
            return
        conn = self.conns[index]
        while self.reports[index].result is None and _readable(conn) and self._receive(index):
            pass  # its result may still be in the pipe
        self.processes[index].join()
        self.pending.discard(index)
        report = self.reports[index]
        if report.result is None:
            code = self.processes[index].exitcode
            report.ended = (f"was killed by {signal.Signals(-code).name}" if code < 0
                            else f"exited with status {code} without a result")
            self._stop_all(f"{self.label} {index} {report.ended}")

    def _stop_all(self, reason: str) -> None:
        if not self.stopped:
            self.stopped = True
            self._send_all(("stop", f"stopped: {reason}"))

    def _send_all(self, message: tuple[str, Any]) -> None:
        for index in self.pending:
            try:
                self.conns[index].send(message)
            except OSError:  # that client is gone; its exit is handled on its own
                continue

    def _progress(self, index: int, point: dict[str, Any]) -> None:
        """One aggregate line (``merge_points``) once every live client sent a new point."""
        self.points[index] = point
        self.fresh.add(index)
        interval = point.get("interval_s") or 1.0
        if not (self.fresh >= self.pending or time.monotonic() - self.last_print > 2 * interval):
            return
        self.fresh.clear()
        self.last_print = time.monotonic()
        points = list(self.points.values())
        if any(p.get("phase") == "drain" for p in points):
            # the printer keeps the last interval's figures
            self.printer({"phase": "drain", "clients_measuring": None})
            return
        self.printer(merge_points(points, len(self.processes)))


def local_client_plans(plan: RunPlan) -> list[RunPlan]:
    """The plan each local client (or worker process) runs (``clients.client_plan``)."""
    layout = local_layout(plan)
    return [client_plan(plan, layout, i) for i in range(layout.total)]


def merge_points(points: list[dict[str, Any]], clients: int) -> dict[str, Any]:
    """The aggregate of every client's latest point: counts and rates summed over all of them, whichever
    phase each is in (while the clients cross from warm-up to measuring, summing only those measuring
    showed half the users); ``clients_measuring`` says how many measure when not all do, and how many
    have reported at all before every client has (the first warm-up line summed one client's).  Percentiles
    cannot be merged from points, so the line shows the worst client's p95 (``worst_p95``)."""
    measuring = [p for p in points if p.get("phase") == "measure"]
    counted = len(measuring) if measuring else len(points)
    return {
        "phase": "measure" if measuring else "warmup",
        "clients_measuring": f"{counted}/{clients}" if counted < clients else None,
        "elapsed_s": max(p.get("elapsed_s", 0.0) for p in measuring or points),
        "t_s": max(p.get("t_s", 0.0) for p in points),
        "duration_s": points[0].get("duration_s"), "warmup_s": points[0].get("warmup_s"),
        **{key: sum(p.get(key, 0) for p in points)
           for key in ("users", "requests", "read_bytes_per_s", "write_bytes_per_s", "queue")},
        **worst_p95(points),
        "occupancy": points[0].get("occupancy") or {},  # the tiers' order, for the display
        "p95_of": WORST_CLIENT,
    }


def worst_p95(points: list[dict[str, Any]]) -> dict[str, Any]:
    """Per tier the summed rates and the worst p95s, the worst e2e p95 per class and storage p95.

    A p95 of all clients' operations lies between the lowest and the highest client p95 (at the highest,
    every client has 95 % of its operations at or below it, so the union has too): the worst client's p95
    is an honest upper bound, which the line labels so."""
    tiers = {tier: _tier_point([((p.get("tiers") or {}).get(tier) or {}) for p in points])
             for tier in dict.fromkeys(t for p in points for t in p.get("tiers") or {})}
    classes = dict.fromkeys(q for p in points for q in p.get("e2e_p95_ms") or {})
    return {"tiers": tiers,
            "e2e_p95_ms": {q: _worst((p.get("e2e_p95_ms") or {}).get(q) for p in points) for q in classes},
            "storage_p95_ms": _worst(p.get("storage_p95_ms") for p in points)}


def _worst(values: Any) -> float | None:
    return max((v for v in values if v is not None), default=None)


def _tier_point(figures: list[dict[str, Any]]) -> dict[str, Any]:
    """One tier over the clients' points: its rates summed, its p95s the worst."""
    return {**{rate: sum(f.get(rate) or 0.0 for f in figures) for rate in ("read_bytes_per_s", "write_bytes_per_s")},
            **{p95: _worst(f.get(p95) for f in figures) for p95 in ("read_p95_ms", "write_p95_ms")}}


def _readable(conn: Connection) -> bool:
    try:
        return conn.poll(0.05)
    except (EOFError, OSError):
        return False


def client_main(job: ClientJob, conn: Connection) -> None:
    """A client process: run the trial, talk to the coordinator over ``conn``."""
    slot = RunnerSlot()  # a stop may arrive before the runner exists
    received: list[int] = []
    go = threading.Event()
    send_lock = threading.Lock()

    def send(kind: str, payload: Any) -> None:
        with send_lock, contextlib.suppress(OSError):  # coordinator gone: listen() stops the run
            conn.send((kind, payload))

    def listen() -> None:
        """Messages from the coordinator: "go", or "stop" with the reason; end-of-file: it is gone."""
        while True:
            try:
                kind, payload = conn.recv()
            except (EOFError, OSError):
                kind, payload = "stop", "stopped: the coordinator is gone"
            if kind != "stop":
                go.set()
                continue
            slot.stop(payload)  # before go, so the barrier sees it
            go.set()
            return

    def start_together() -> None:
        send("ready", None)
        go.wait()
        if not slot.reasons:  # a stop before go is already applied: the runner was published before it ran
            send("released", time.time())

    threading.Thread(target=listen, name="kvbench-coordinator", daemon=True).start()
    with stop_on_signals(slot.stop, received):
        result, state = run_once(job.plan, job.as_written, slot, run_id=job.run_id, trial=job.trial,
                                 client_index=job.index, barrier=start_together,
                                 on_progress=lambda point: send("progress", point))
    send("result", {"result": result, "exit_code": state.error.exit_code if state.error else 0})
    if state.crash is not None:
        traceback.print_exception(state.crash)
    conn.close()
