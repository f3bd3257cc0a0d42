"""Booking a request that ended, in the window it belongs to (``Telemetry.bucket``).

Request figures (latency, tokens, hit rates, each tier operation of the request) are booked per request in
the window the request started and ended in (docs/metrics.md, "booking rules"); the scheduler thread alone
books here, when a worker's ``finished`` event comes due.  A cancelled request (the drain limit) is only
counted; a failed one is counted where it ended; a served one is recorded with its latencies, and one served
inside the window also in the workload statistics the declaration describes and in the autoscaler's step.
"""

from __future__ import annotations

from kvbench_core.engine.run.load_requests import LoadRequests
from kvbench_core.engine.run.run_state import RunState
from kvbench_core.engine.run.workers import Finished


def book_finished(state: RunState, done: Finished, load: LoadRequests | None, *, past_limit: bool) -> bool:
    """Book ``done``; True when it finished inside the window (the request limit counts it).  ``past_limit``:
    the window's request limit is already reached, so what finishes now is past it (the drain's)."""
    telemetry = state.telemetry
    if load is not None:
        load.finished(done)
    if done.kind == "cancelled":
        telemetry.record_request_cancelled(done.enqueued)
        return False
    write = done.request.write
    if write is not None and write.tokens:  # a tier no entry fits: Runner.run warns about it
        size = write.tokens * state.bytes_per_token
        state.smallest_entry_bytes = min(size, state.smallest_entry_bytes or size)
    where = telemetry.bucket(done.enqueued, done.finished)
    if where == "window" and past_limit:
        where = "drain"  # finished in the same pass as the one that hit the limit: past it
    if done.outcome is not None:
        telemetry.book(done.outcome.tally, where)
    if done.kind == "failed":
        telemetry.record_request_failed(where=where)
    elif done.kind == "write_failed":
        telemetry.record_request_write_failed(where=where)
    else:
        _served(state, done, load, where)
    return where == "window"


def _served(state: RunState, done: Finished, load: LoadRequests | None, where: str | None) -> None:
    """A request whose storage work completed: its latencies, and its lengths if it was the window's."""
    request, outcome = done.request, done.outcome
    assert outcome is not None
    state.telemetry.record_request(request.qos, done.finished - done.began, done.served - done.began,
                                   done.started - done.began, outcome.storage_s, request.context_tokens,
                                   request.generate_tokens, outcome.decode_tokens_read, where=where)
    if where != "window":
        return
    if load is not None:
        load.add(done)
    samples = state.workload_samples
    samples["context"].append(request.context_tokens)
    samples["generate"].append(request.generate_tokens)
    samples["prefix"].extend(read.tokens for read in request.reads if read.kind == "prefix")
