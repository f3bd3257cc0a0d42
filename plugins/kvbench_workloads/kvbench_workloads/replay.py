"""Trace replay as a workload source: shared options, users, QoS, cycles and the replay clock.

Every trace request belongs to a conversation (a single request is a
conversation of one turn).  The g-th conversation of the replay, counted in
trace order across cycles, belongs to user ``g % users``; its QoS class is
drawn from ``hash(seed, its key stem)``.  Both are deterministic and
independent of thread timing and of the order in which users poll.

Construction makes one full pass over the trace: it validates every row
before a byte is written, counts what was skipped, and computes the figures
that ``describe()`` puts into the result (the same ones ``kvbench trace
stats`` prints).  Replay then streams the files again, cycle after cycle.
"""

from __future__ import annotations

import abc
import bisect
import hashlib
import itertools
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, ClassVar

from kvbench_core.contracts.errors import InputFileError, SpecError
from kvbench_core.contracts.workload import QoSClass, Request, WorkloadContext, WorkloadSource
from kvbench_workloads.files import sha256_file, trace_files
from kvbench_workloads.kvplan import Conversation, TraceEntry, cycle_stem, key_part
from kvbench_workloads.rows import LoadReport
from kvbench_workloads.stats import TraceStats

#: Seed §3.9: 15% interactive, 35% responsive, 50% batch.
DEFAULT_QOS_MIX = {"interactive": 0.15, "responsive": 0.35, "batch": 0.50}

_COMMON_OPTIONS: dict[str, Any] = {
    "path": {"type": "string", "minLength": 1,
             "description": "trace file, or a directory of them replayed in name order; relative to the spec file"},
    "cycles": {"type": "integer", "minimum": 0, "default": 0,
               "description": "times to replay the whole trace; 0 = until the run's duration or request count ends"},
    "qos": {"oneOf": [{"type": "string", "minLength": 1},
                      {"type": "object", "minProperties": 1,
                       "additionalProperties": {"type": "number", "minimum": 0}}],
            "default": DEFAULT_QOS_MIX,
            "description": "one QoS class for every request, or {class: weight} drawn per conversation"},
    "skip_bad_rows": {"type": "boolean", "default": False,
                      "description": "skip and count malformed rows instead of stopping at the first"},
}

_OPEN_LOOP_OPTIONS: dict[str, Any] = {
    "speedup": {"type": "number", "minimum": 0, "default": 1,
                "description": "1 = the trace's own arrival times, 10 = ten times faster, 0 = all at once"},
}


def options_schema(properties: dict[str, Any], *, open_loop: bool) -> dict[str, Any]:
    """A source's options: the shared ones plus its own; defaults live here and nowhere else."""
    shared = {**_COMMON_OPTIONS, **(_OPEN_LOOP_OPTIONS if open_loop else {})}
    return {"type": "object", "additionalProperties": False, "required": ["path"],
            "properties": {**shared, **properties}}


class QosPicker:
    """Draws a conversation's QoS class from ``hash(seed, key stem)`` over the configured weights."""

    def __init__(self, setting: str | dict[str, float], classes: dict[str, QoSClass], seed: int) -> None:
        weights = {setting: 1.0} if isinstance(setting, str) else setting
        unknown = sorted(set(weights) - set(classes))
        if unknown:
            raise SpecError(f"workload.options.qos: unknown QoS class {', '.join(map(repr, unknown))}; "
                            f"known: {', '.join(classes)}")
        total = sum(weights.values())
        if total <= 0:
            raise SpecError("workload.options.qos: the weights add up to 0; give at least one class a weight")
        self._names = [name for name, weight in weights.items() if weight > 0]
        self._bounds = list(itertools.accumulate(weights[name] / total for name in self._names))
        self._seed = seed

    def pick(self, stem: str) -> str:
        digest = hashlib.blake2b(f"qos:{self._seed}:{stem}".encode(), digest_size=8).digest()
        draw = int.from_bytes(digest) / 2**64
        return self._names[min(bisect.bisect_right(self._bounds, draw), len(self._names) - 1)]


class TraceSource(WorkloadSource):
    """What every trace source shares: files, options, conversations, requests and ``describe()``."""

    suffixes: ClassVar[tuple[str, ...]] = ()
    #: Said when a trace leaves nothing to replay, to point at the option that usually explains it.
    empty_hint: ClassVar[str] = ""

    def __init__(self, options: dict[str, Any], context: WorkloadContext) -> None:
        super().__init__(options, context)
        if context.mode == "decode-only":
            raise SpecError("workload.mode: decode-only needs every entry stored before the window, but a trace "
                            "source stores its entries as it replays; use mixed or prefill-only")
        self.files = trace_files(self.options["path"], context.spec_dir, self.suffixes)
        self._hashes = [sha256_file(path) for path in self.files]
        self._qos = QosPicker(self.options["qos"], context.qos_classes, context.seed)
        # The contract does not promise one polling thread, and a generator cannot be advanced by two at once.
        self._lock = threading.Lock()
        self._summary: dict[str, Any] = {}

    def _conversation(self, stem: str, user: int, named: bool) -> Conversation:
        """A conversation keyed by ``stem``; ``named``: the trace names it (else it is a single request)."""
        return Conversation(stem, user, self._qos.pick(stem), stem if named else None)

    @staticmethod
    def _request(conversation: Conversation, entry: TraceEntry, seq: int, **timing: float) -> Request:
        plan = conversation.plan(entry)
        return Request(
            user_id=conversation.user,
            seq=seq,
            qos=conversation.qos,
            context_tokens=entry.input_tokens,
            generate_tokens=entry.output_tokens,
            reads=plan.reads,
            write=plan.write,
            decode_keys=plan.decode_keys,
            conversation=conversation.name,
            tags={"trace": entry.origin},
            **timing,
        )

    def _summarize(self, requests: Iterable[tuple[Request, float | None]], report: LoadReport) -> None:
        """Figures of one cycle for ``describe()``; a trace that leaves nothing to replay is an error."""
        stats = TraceStats()
        for request, trace_s in requests:
            stats.add(request, trace_s)
        if not stats.requests:
            skipped = ", ".join(f"{reason} {count}" for reason, count in sorted(report.skipped.items())) or "none"
            raise InputFileError(f"{', '.join(map(str, self.files))}: no requests to replay "
                                 f"(skipped: {skipped}){self.empty_hint}")
        self._summary = stats.summary(report)

    def describe(self) -> dict[str, Any]:
        return {
            "source": self.name,
            "files": [{"path": str(path), "sha256": digest} for path, digest in zip(self.files, self._hashes,
                                                                                  strict=True)],
            "options": self.options,
            "stats": self._summary,
        }


class TraceClock:
    """Places trace timestamps on one replay timeline, in seconds from the first request.

    Files, and cycles, play back to back: each starts one mean inter-arrival
    gap (of the file before it) after that file's last request, so a directory
    of consecutive trace files or a looped trace keeps its rate across the
    seam whether or not the next file's clock restarts.  Within a file the
    timeline never runs backwards: a row stamped before its predecessor is
    issued together with it.
    """

    def __init__(self) -> None:
        self._end = 0.0  # timeline time of the last request placed
        self._gap = 0.0
        self._first: float | None = None  # the current file's first timestamp
        self._origin = 0.0  # where that timestamp sits on the timeline
        self._count = 0  # requests placed from the current file
        self._placed = False

    def start_file(self) -> None:
        if self._count >= 2:
            self._gap = (self._end - self._origin) / (self._count - 1)
        self._first, self._count = None, 0

    def place(self, timestamp: float) -> float:
        if self._first is None:
            self._first = timestamp
            self._origin = self._end + self._gap if self._placed else 0.0
            self._placed = True
        self._end = max(self._origin + timestamp - self._first, self._end)
        self._count += 1
        return self._end


class OpenLoopTraceSource(TraceSource):
    """A timestamped request trace replayed by the clock: ``arrival_s`` = trace time / speedup."""

    open_loop = True

    def __init__(self, options: dict[str, Any], context: WorkloadContext) -> None:
        super().__init__(options, context)
        report = LoadReport(self.options["skip_bad_rows"])
        self._summarize(self._replay(1, report), report)
        self._stream = self._replay(self.options["cycles"], LoadReport(self.options["skip_bad_rows"]))

    @abc.abstractmethod
    def parse_file(self, path: Path, report: LoadReport) -> Iterator[TraceEntry]:
        """The file's requests in file order; skipped and bad rows go to ``report``."""

    def next_request(self, user_id: int) -> Request | None:
        """The next arrival, whichever user polls; the request names its own user."""
        with self._lock:
            item = next(self._stream, None)
        return item[0] if item else None

    def _replay(self, cycles: int, report: LoadReport) -> Iterator[tuple[Request, float]]:
        """Requests with their trace time, cycle after cycle (``cycles`` 0 = forever)."""
        clock = TraceClock()
        speedup = self.options["speedup"]
        seqs = [itertools.count() for _ in range(self.context.users)]
        ordinal = 0  # conversations begun so far, across cycles
        for cycle in itertools.count():
            if cycles and cycle >= cycles:
                return
            sessions: dict[str, Conversation] = {}
            for path in self.files:
                clock.start_file()
                for entry in self.parse_file(path, report):
                    conversation = sessions.get(entry.conversation) if entry.conversation else None
                    if conversation is None:
                        # '~' never survives key_part, so a single request's stem cannot meet a trace id.
                        name = key_part(entry.conversation) if entry.conversation else f"{self.name}~{ordinal}"
                        conversation = self._conversation(cycle_stem(name, cycle), ordinal % self.context.users,
                                                          named=bool(entry.conversation))
                        ordinal += 1
                        if entry.conversation:
                            sessions[entry.conversation] = conversation
                    trace_s = clock.place(entry.timestamp_s)
                    arrival_s = trace_s / speedup if speedup else 0.0
                    seq = next(seqs[conversation.user])
                    yield self._request(conversation, entry, seq, arrival_s=arrival_s), trace_s
