"""``kvbench export --to perfetto``: a run's I/O log as a Chrome trace-event timeline the Perfetto UI opens.

One process per tier with one thread track per thread that issued its commands (``kvbench-worker-N``,
or a tier's own pool; a thread that ran several commands at once gets a lane per parallel command, since
a track holds only nested slices), one slice per device command (name = op, args = key, bytes, offset, trace id), and
a ``requests`` process with one track per worker on which each request is a slice spanning its commands
(the I/O log knows when a request's first command started and its last ended, not when the request was
issued; the span is labelled so).  A flow arrow goes from each request to every command it issued.  Two
instant events mark where the measured window opens and closes.  Timestamps are microseconds from the
first command.  The log is read twice, a line at a time (extents, then events), so memory is bounded by
the number of requests and tracks, not of commands (docs/export-perfetto.md).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from kvbench_core.contracts.errors import InputFileError

REQUESTS_PID = 0
UNNAMED_TIER = "commands"  # a log without tiers (a replay's)


@dataclass
class _Span:
    start: float
    end: float
    thread: str


@dataclass
class _Layout:
    """What the first pass learns: the clock's origin, each tier's pid and threads' tids, request spans."""

    origin: float | None = None
    tiers: dict[str, int] = field(default_factory=dict)
    requests: dict[str, _Span] = field(default_factory=dict)
    workers: dict[str, int] = field(default_factory=dict)
    #: (tier, thread, lane) -> tid, and each (tier, thread)'s lanes' latest end, filled by the second pass.
    threads: dict[tuple[str, str, int], int] = field(default_factory=dict)
    lanes: dict[tuple[str, str], list[float]] = field(default_factory=dict)

    def place(self, tier: str, thread: str, start: float, end: float) -> int:
        """The track of a command: its thread's first lane whose slices all ended by ``start`` (a trace
        event track holds only nested slices, and one thread may run several commands at once: io_uring,
        queue depth), a new lane when none has."""
        ends = self.lanes.setdefault((tier, thread), [])
        lane = next((i for i, last in enumerate(ends) if last <= start), len(ends))
        if lane == len(ends):
            ends.append(end)
        else:
            ends[lane] = end
        return self.threads.setdefault((tier, thread, lane), len(self.threads) + 1)


def _commands(path: Path) -> Iterator[dict[str, Any]]:
    try:
        with open(path, encoding="utf-8") as lines:
            for number, line in enumerate(lines, 1):
                try:
                    record = json.loads(line)
                    float(record["start_s"]), float(record["end_s"]), record["op"]
                except (ValueError, KeyError, TypeError):
                    raise InputFileError(f"{path}:{number}: not an I/O log record (docs/kvio.md, "
                                         "'The I/O log, exactly')") from None
                yield record
    except OSError as error:
        raise InputFileError(f"{path}: cannot read the I/O log: {error.strerror}") from None


def _layout(path: Path) -> _Layout:
    layout = _Layout()
    for record in _commands(path):
        start, end = record["start_s"], record["end_s"]
        layout.origin = start if layout.origin is None else min(layout.origin, start)
        layout.tiers.setdefault(record.get("tier") or UNNAMED_TIER, len(layout.tiers) + 1)
        request = record.get("request")
        if request:
            span = layout.requests.get(request)
            if span is None:
                layout.requests[request] = _Span(start, end, record.get("thread") or "main")
            else:
                span.start, span.end = min(span.start, start), max(span.end, end)
    for span in layout.requests.values():
        layout.workers.setdefault(span.thread, len(layout.workers) + 1)
    return layout


def _us(seconds: float, origin: float) -> float:
    return round((seconds - origin) * 1e6, 3)


def _metadata(layout: _Layout) -> Iterator[dict[str, Any]]:
    yield {"ph": "M", "name": "process_name", "pid": REQUESTS_PID, "tid": 0, "args": {"name": "requests"}}
    for thread, tid in layout.workers.items():
        yield {"ph": "M", "name": "thread_name", "pid": REQUESTS_PID, "tid": tid, "args": {"name": thread}}
    for tier, pid in layout.tiers.items():
        yield {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": f"tier {tier}"}}


def _thread_names(layout: _Layout) -> Iterator[dict[str, Any]]:
    """Each command track's name, known once every command is placed: the thread, and a lane's number
    after the first (``kvbench-worker-0 (parallel 2)``)."""
    for (tier, thread, lane), tid in layout.threads.items():
        name = thread if lane == 0 else f"{thread} (parallel {lane + 1})"
        yield {"ph": "M", "name": "thread_name", "pid": layout.tiers[tier], "tid": tid, "args": {"name": name}}


def _request_slices(layout: _Layout, origin: float) -> Iterator[dict[str, Any]]:
    for request, span in layout.requests.items():
        yield {"ph": "X", "name": f"request {request}", "cat": "request", "pid": REQUESTS_PID,
               "tid": layout.workers[span.thread], "ts": _us(span.start, origin),
               "dur": _us(span.end, span.start), "args": {"span": "first command's start to last command's end"}}


def _command_events(path: Path, layout: _Layout, origin: float) -> Iterator[dict[str, Any]]:
    for flow, record in enumerate(_commands(path), 1):
        tier = record.get("tier") or UNNAMED_TIER
        pid = layout.tiers[tier]
        tid = layout.place(tier, record.get("thread") or "main", record["start_s"], record["end_s"])
        ts = _us(record["start_s"], origin)
        args = {name: record.get(name) for name in ("key", "bytes", "offset", "trace_id", "request")
                if record.get(name) is not None}
        yield {"ph": "X", "name": record["op"], "cat": "command", "pid": pid, "tid": tid, "ts": ts,
               "dur": _us(record["end_s"], record["start_s"]), "args": args}
        span = layout.requests.get(record.get("request") or "")
        if span is not None:  # v1 flow: from the request's slice to this command's
            yield {"ph": "s", "name": "issued", "cat": "flow", "id": flow, "pid": REQUESTS_PID,
                   "tid": layout.workers[span.thread], "ts": _us(span.start, origin)}
            yield {"ph": "f", "bp": "e", "name": "issued", "cat": "flow", "id": flow, "pid": pid, "tid": tid,
                   "ts": ts}


def _window_marks(window: Mapping[str, Any], origin: float) -> Iterator[dict[str, Any]]:
    start, length = window.get("monotonic_start"), window.get("measured_s")
    if start is None or length is None:
        return
    for name, at in (("measured window opens", start), ("measured window closes", start + length)):
        yield {"ph": "i", "s": "g", "name": name, "pid": REQUESTS_PID, "tid": 0, "ts": _us(at, origin)}


def write_trace(log: Path, target: Path, window: Mapping[str, Any] | None = None) -> int:
    """Write ``log`` (an I/O log) as a trace-event JSON file at ``target`` (created, never replaced);
    ``window`` is the result's ``metrics.window``.  Returns the number of command slices."""
    layout = _layout(log)
    if layout.origin is None:
        raise InputFileError(f"{log}: the I/O log holds no commands: nothing to draw")
    origin = layout.origin
    count = 0
    with open(target, "x", encoding="utf-8") as out:
        out.write('{"displayTimeUnit": "ms", "traceEvents": [\n')
        events = [*_metadata(layout), *_window_marks(window or {}, origin), *_request_slices(layout, origin)]
        _dump(out, events, first=True)
        for event in _command_events(log, layout, origin):
            count += event["ph"] == "X"
            _dump(out, [event])
        _dump(out, list(_thread_names(layout)))
        out.write("\n]}\n")
    return count


def _dump(out: IO[str], events: list[dict[str, Any]], first: bool = False) -> None:
    for index, event in enumerate(events):
        if not (first and index == 0):
            out.write(",\n")
        out.write(json.dumps(event, separators=(",", ":")))
