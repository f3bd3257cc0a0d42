"""Stopping storage work at a command boundary, and the per-command recorder every tier is given.

When the drain limit after ``duration`` runs out, what is still in flight is cancelled: the next time an
operation reaches a command boundary (a device command completed, the next piece is about to be filled
or consumed), ``Cancelled`` is raised there.  A command is never cut in half; an operation stops between
two of them, and the cache releases what it had reserved.

The recorder is each tier's ``BackendContext.io_log``: a tier that calls ``record`` once per device
command gets per-command latency histograms and bandwidth booked per command, and is cancellable after
every command.  It forwards to the run's JSONL I/O log when the spec asks for one.

A worker that has not reached a boundary ``CANCEL_GRACE_S`` after the cancel is abandoned (the drain
cannot wait for a stuck server), and it may go on issuing and booking commands while the result is read.
``seal_abandoned`` stops every recorder counting, then the telemetry booking, at that moment (issue #28):
the figures the reader sees are those of the give-up, and the bytes the abandoned operations' commands
had moved, which no operation booked, are reported apart (``metrics.drain.abandoned_bytes``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from kvbench_core.contracts.backend import ByteSink, ByteSource, DiscardSink
from kvbench_core.contracts.errors import Cancelled
from kvbench_core.engine.measure.records import PHASES


class CancelToken:
    """Set once, when the drain limit runs out; checked at every command boundary."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def check(self) -> None:
        if self._event.is_set():
            raise Cancelled("the drain limit ran out")


class CancellableSource:
    """A ``ByteSource`` that stops the write before its next piece once the token is cancelled."""

    __slots__ = ("inner", "size", "token")

    def __init__(self, inner: ByteSource, token: CancelToken) -> None:
        self.inner, self.token, self.size = inner, token, inner.size

    def fill(self, offset: int, out: memoryview) -> None:
        self.token.check()
        self.inner.fill(offset, out)

    def __getattr__(self, name: str) -> Any:  # e.g. TierSource.read_seconds
        return getattr(self.inner, name)


class CancellableSink:
    """A ``ByteSink`` that stops the read before it takes the next piece once the token is cancelled."""

    __slots__ = ("inner", "token")

    def __init__(self, inner: ByteSink, token: CancelToken) -> None:
        self.inner, self.token = inner, token

    def consume(self, offset: int, data: memoryview) -> None:
        self.token.check()
        self.inner.consume(offset, data)


class CancellableDiscard(DiscardSink):
    """The discarding sink, cancellable: still a ``DiscardSink``, so a tier may skip staging for it."""

    __slots__ = ("token",)

    def __init__(self, token: CancelToken) -> None:
        self.token = token

    def consume(self, offset: int, data: memoryview) -> None:
        self.token.check()


def cancellable_sink(sink: ByteSink, token: CancelToken | None) -> ByteSink:
    if token is None:
        return sink
    return CancellableDiscard(token) if isinstance(sink, DiscardSink) else CancellableSink(sink, token)


def cancellable_source(source: ByteSource, token: CancelToken | None) -> ByteSource:
    return source if token is None else CancellableSource(source, token)


class CommandRecorder:
    """One tier's ``io_log``: collects each operation's device commands for the cache to book with the
    operation (``take``), forwards them to the JSONL I/O log if any, and is a cancellation point.

    The cache never runs two operations on one key of one tier at once, so commands are kept per key:
    the key of the entry whose operation issued them (``owner_of`` maps a backend's object key to it, where
    one entry is several objects, as a codec stage's segments are), so every command is taken with its
    operation and nothing stays pending.  Outside the measured window no operation will book them: they are
    booked at once, by time (``Telemetry.record_command_outside``).  ``recorded`` counts every byte reported,
    per op, before any booking: what the telemetry's phases must add up to."""

    __slots__ = ("_lock", "_pending", "io_log", "owner_of", "recorded", "sealed", "telemetry", "tier", "token")

    def __init__(self, tier: str, telemetry: Any, *, io_log: Any = None, token: CancelToken | None = None) -> None:
        self.tier, self.telemetry, self.io_log, self.token = tier, telemetry, io_log, token
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, str], list[tuple[int, float, float]]] = {}
        self.owner_of: Callable[[str], str] | None = None
        self.recorded: dict[str, int] = {"read": 0, "write": 0}
        self.sealed = False  # ``seal``: an abandoned worker's later commands are counted nowhere

    def record(self, key: str, op: str, offset: int, nbytes: int, start_s: float, end_s: float,
               requested: int | None = None, align: int | None = None) -> None:
        """One command: ``nbytes`` as the syscall returned; ``requested``/``align`` where the tier asked for an
        aligned length (an O_DIRECT tail), forwarded to the I/O log (docs/kvio.md, "the I/O log")."""
        owner = key if self.owner_of is None else self.owner_of(key)
        held = self.telemetry.measuring  # read once: the command is held for its operation, or booked now
        with self._lock:
            counted = not self.sealed
            if counted:
                self.recorded[op] = self.recorded.get(op, 0) + nbytes
                if held:
                    self._pending.setdefault((owner, op), []).append((nbytes, start_s, end_s))
        if counted and not held:
            self.telemetry.record_command_outside(self.tier, op, nbytes, start_s, end_s)
        if self.io_log is not None:
            self.io_log.record(key, op, offset, nbytes, start_s, end_s, requested, align, owner=owner,
                               tier=self.tier)
        if self.token is not None:
            self.token.check()

    def take(self, key: str, op: str) -> list[tuple[int, float, float]]:
        """The commands ``op`` on ``key`` issued since the last take (the operation just ended)."""
        with self._lock:
            return self._pending.pop((key, op), [])

    def seal(self) -> None:
        """From now on ``recorded`` stays as it is and nothing is booked (``seal_abandoned``)."""
        with self._lock:
            self.sealed = True


def seal_abandoned(telemetry: Any, recorders: list[CommandRecorder]) -> dict[str, dict[str, int]]:
    """Freeze what the result reads once the run has given up on a worker: every recorder's count first,
    then the telemetry's bookings, so no byte is booked that was not counted.  Returns, per tier and op
    (only those with any), the bytes its commands moved (counted) that no phase holds: the commands of the
    operations still in flight, which would have been booked when they ended.  With what the phases hold
    they add up to every byte counted (``bytes_by_time`` in results/invariants.py)."""
    for recorder in recorders:
        recorder.seal()
    telemetry.seal()
    unbooked = {}
    for recorder in recorders:
        tier = recorder.tier
        ops = {op: recorder.recorded.get(op, 0) + telemetry.uncommanded_bytes[tier][op]
               - sum(telemetry.device[phase][tier][op].bytes for phase in PHASES) for op in ("read", "write")}
        if any(ops.values()):
            unbooked[tier] = ops
    return unbooked


def abandoned_warning(unbooked: dict[str, dict[str, int]], grace_s: float) -> str:
    """The result's warning for a drain that gave up on workers: what of their work no figure holds."""
    moved = sum(sum(ops.values()) for ops in unbooked.values())
    where = ", ".join(f"{tier} {op} {n} bytes" for tier, ops in unbooked.items() for op, n in ops.items() if n)
    return (f"workers still inside a tier operation {grace_s:g} s after the drain's cancel were abandoned: the "
            f"figures are those of that moment; {moved} bytes their commands had moved are in no phase "
            f"({where or 'none'}; metrics.drain.abandoned_bytes), and what they moved later is counted nowhere")
