"""One operation on one tier of the waterfall, timed and booked in telemetry.

The cache decides *what* moves where; this module is the single place where an
operation on a tier's backend is timed, its device commands are taken from the
tier's recorder, and a failure becomes a ``StorageError`` naming tier, operation
and key.  A failed or cancelled operation is not booked as an operation, so the
operation figures only count work that completed; the commands it did complete
moved bytes on the device and are booked by time with the rest
(``Telemetry.record_unfinished``), a cancelled one counted as such.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from kvbench_core.contracts.backend import DoneWrite, IOTiming, PendingWrite
from kvbench_core.contracts.errors import Cancelled, EntryGone, StorageError
from kvbench_core.engine.cache.cache_types import Entry, Tier, TierSource
from kvbench_core.engine.measure.cancel import CommandRecorder
from kvbench_core.engine.measure.telemetry import Telemetry


class TierOperations:
    """Times and books the operations the cache runs on its tiers (entry lock held, metadata lock not)."""

    def __init__(self, telemetry: Telemetry) -> None:
        self.telemetry = telemetry

    def timed(self, tier: Tier, op: str, key: str, action: Callable[[], IOTiming]) -> IOTiming:
        """Run ``action`` (one ``op`` on ``key``) and book its timing and commands under ``tier``: an operation
        that is over when it returns, started and collected at once."""
        return self.collect(self.start(tier, op, key, lambda: DoneWrite(action())))

    def start(self, tier: Tier, op: str, key: str, action: Callable[[], PendingWrite]) -> StartedOp:
        """Run ``action``, which starts ``op`` on ``key`` (``write_pipelined``: the entry's commands issued, its
        end still running); ``collect`` books it once it is over.  A failure to start is booked as ``timed``
        books one."""
        start = time.perf_counter()
        with self._failures(tier, op, key):
            return StartedOp(tier, op, key, start, action())

    def collect(self, started: StartedOp) -> IOTiming:
        """Wait for ``started`` to end (a pipelined write: durable) and book it, from its start to now, with the
        commands it issued; its latency is the backend's, from its first command to its end.  A failure is
        booked as ``timed`` books one."""
        tier, op, key = started.tier, started.op, started.key
        with self._failures(tier, op, key):
            timing = started.pending.result()
            commands = take_commands(tier, key, op)
            breach = timing.contract_error(op) or unbooked_commands(timing, commands)
            if breach is not None:  # booked as it stands it would lose or invent bytes: refused, as a failure
                raise TimingContractError(f"backend '{tier.backend.name}' ({type(tier.backend).__name__}) "
                                          f"returned an IOTiming that breaks the contract: {breach}")
        end = time.perf_counter()
        self.telemetry.record_op(tier.name, op, timing, started.start, end, commands)
        return timing

    @contextlib.contextmanager
    def _failures(self, tier: Tier, op: str, key: str) -> Iterator[None]:
        """A failed or cancelled ``op``: not an operation, its commands' bytes booked by time; any error but
        the run's own (``StorageError``, ``Cancelled``, ``EntryGone``) is listed and becomes a ``StorageError``."""
        try:
            yield
        except (StorageError, Cancelled, EntryGone) as error:
            self.unfinished(tier, key, op, error)
            raise
        except Exception as error:
            self.unfinished(tier, key, op, error)
            self.telemetry.record_op_error(tier.name, op, key, error)
            raise StorageError(tier.name, op, key, describe_error(error)) from error

    def copy(self, source_tier: Tier, target: Tier, entry: Entry, source: TierSource,
             write: Callable[[], IOTiming]) -> None:
        """A demotion's or promotion's ``write`` of ``entry`` to ``target`` from ``source_tier`` through
        ``source``, with the read it made there; a failed copy books neither (its reads' commands dropped)."""
        try:
            self.timed(target, "write", entry.key, write)
        except (StorageError, Cancelled, EntryGone) as error:
            self.unfinished(source_tier, entry.key, "read", error)
            raise
        self.record_source_read(source_tier, entry, source)

    def unfinished(self, tier: Tier, key: str, op: str, error: BaseException) -> None:
        """``op`` on ``key`` did not complete: the commands it did issue are booked by time, not as an
        operation (a cancelled one is counted as cancelled partial work)."""
        commands = take_commands(tier, key, op)
        if commands or isinstance(error, Cancelled):
            self.telemetry.record_unfinished(tier.name, op, commands, cancelled=isinstance(error, Cancelled))

    def record_source_read(self, upper: Tier, entry: Entry, source: TierSource) -> None:
        """A demotion's (or promotion's) read of the tier it moves from is real traffic there: count what
        ``source`` really read (nothing, when the lower tier found the entry committed before pulling a byte;
        all of it when it read the entry to encode or hash it, whatever it then sent).  Its device bytes are
        what was read: the commands taken, else the encoded bytes a codec stage read (its chunks, without the
        headers it did not read), else what the tier stores.  A codec stage's decode is host (and codec)
        time; a memory tier has no device to wait for, so all its time is host time; the rest of a
        persistent tier's is device time."""
        commands = take_commands(upper, entry.key, "read")  # the range reads' own commands, as the recorder saw
        if not source.bytes_read:
            if commands:
                self.telemetry.record_unfinished(upper.name, "read", commands, cancelled=False)
            return
        end = time.perf_counter()
        seconds = source.read_seconds
        decode = min(source.decode_seconds, seconds)
        host, device = (seconds, 0.0) if upper.backend.volatile else (decode, seconds - decode)
        timing = IOTiming(total=seconds, host=host, device=device, nbytes=source.bytes_read,
                          commands=max(len(commands), 1), codec=decode,
                          physical_bytes=physical_read(upper, entry, source, commands))
        self.telemetry.record_op(upper.name, "read", timing, end - seconds, end, commands)

    def delete_from(self, tier: Tier, entry: Entry) -> None:
        """Delete ``entry``'s bytes from ``tier``; a failure is booked and raised as ``StorageError``."""
        try:
            tier.backend.delete(entry.key)
        except Exception as error:
            self.telemetry.record_op_error(tier.name, "delete", entry.key, error)
            raise StorageError(tier.name, "delete", entry.key, error) from error


@dataclass(frozen=True, slots=True)
class StartedOp:
    """An operation ``TierOperations.start`` began: ``pending`` gives its timing once it is over."""

    tier: Tier
    op: str
    key: str
    start: float
    pending: PendingWrite


class TimingContractError(Exception):
    """A backend's ``IOTiming`` breaks ``IOTiming.contract_error``'s rules (a plugin bug, not the device's)."""


def unbooked_commands(timing: IOTiming, commands: list[tuple[int, float, float]]) -> str | None:
    """Why an operation's timing and the commands its backend recorded disagree, or None: a timing that
    moved nothing while the recorder holds commands for it would book device bytes no operation moved."""
    if timing.nbytes or not commands:
        return None
    return (f"it moved nothing (nbytes 0) but the tier recorded {len(commands)} device commands "
            f"({sum(nbytes for nbytes, _, _ in commands)} bytes) for it")


def physical_read(upper: Tier, entry: Entry, source: TierSource,
                  commands: list[tuple[int, float, float]]) -> int | None:
    """The device bytes a copy's read of ``upper`` moved: its commands' bytes, else the encoded bytes a
    codec stage counted on ``source``, else (a whole entry, a tier reporting neither) what ``upper`` stores."""
    if commands:
        return sum(nbytes for nbytes, _, _ in commands)
    if source.encoded_read:
        return source.encoded_read
    return upper.backend.stored_bytes(entry.key) if source.bytes_read >= entry.size else None


def take_commands(tier: Tier, key: str, op: str) -> list[tuple[int, float, float]]:
    """The device commands ``op`` on ``key`` issued on ``tier``, from its recorder (none without one)."""
    recorder = tier.backend.context.io_log
    return recorder.take(key, op) if isinstance(recorder, CommandRecorder) else []


def describe_error(error: BaseException) -> str:
    """One line for a backend's failure: an OSError's strerror, file and errno, else its type and text."""
    if isinstance(error, OSError) and error.strerror:
        where = f" ({error.filename})" if error.filename else ""
        return f"{error.strerror}{where} [errno {error.errno}]"
    return f"{type(error).__name__}: {error}"
