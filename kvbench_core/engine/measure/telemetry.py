"""Telemetry for the four latency layers (L1 end-to-end per QoS class, L2 storage per request, L3 per-tier
operation, L4 host vs device), per-tier counters and the time series, in mergeable ``LatencyHistogram``s.

Two booking rules (docs/metrics.md, "booking rules"): request figures (latency, tokens, hits, each tier
operation's count, bytes and latency) are booked per request, in the window the request started and
ended in; device figures (the bytes and commands each device moved, the bandwidth, the time series'
bytes) are booked by time, when each command completes, in the phase it completed in (``PHASES``:
before the window, the window, the drain), as fio and the block layer count.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections import defaultdict
from typing import Any

from kvbench_core.contracts.backend import IOTiming
from kvbench_core.engine.measure.histogram import LatencyHistogram
from kvbench_core.engine.measure.instants import Instants
from kvbench_core.engine.measure.intervals import add_to_point, interval_point, new_interval
from kvbench_core.engine.measure.opstats import OpStats
from kvbench_core.engine.measure.records import (
    PHASES,
    SERIES_COUNTS,
    Command,
    DeviceStats,
    DrainStats,
    OpRecord,
    RequestTally,
    device_ops,
    series_rates,
    tier_ops,
)

__all__ = ["SERIES_COUNTS", "OpStats", "RequestTally", "Telemetry", "series_rates"]


class Telemetry(Instants):
    """Thread-safe collector of the measured window and of the drain after it.

    Request figures are recorded from ``start_measuring`` (warm-up is excluded).  ``close_window`` marks
    the end of the measured ``duration``: what completes after it is the drain's, kept apart in ``drain``.
    The rule for a request and its tier operations: it belongs to the window it started in if it also
    ended there; started in the window and ended after it closed, it is the drain's; started before the
    window opened, it is warm-up's and not counted at all.  Device commands follow the other rule
    (``phase``): each is booked in ``device[phase]`` by when it completed, whatever its request did.
    """

    def __init__(self, qos_classes: list[str], clock: Any = time.perf_counter) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self._local = threading.local()
        self.qos_classes = qos_classes
        self.measuring = False
        self.opened = False  # the window has opened (once): commands completing before it are warm-up's
        #: Device bytes and commands by phase (``PHASES``), by tier, by op: not reset when the window opens.
        self.device: dict[str, dict[str, dict[str, DeviceStats]]] = {p: defaultdict(device_ops) for p in PHASES}
        #: Device bytes of operations a tier reported without commands, booked at their end, per tier and op:
        #: with ``CommandRecorder.recorded`` (every command reported, before any booking) what the phases
        #: must add up to.
        self.uncommanded_bytes: dict[str, dict[str, int]] = defaultdict(lambda: {"read": 0, "write": 0})
        self.commanded: set[str] = set()  # tiers that report commands: their operations' bytes are those
        self.sealed = False  # ``seal``: the run gave up on a worker, nothing more is booked
        self.reset()

    def reset(self) -> None:
        with self._lock:
            self.tiers: dict[str, dict[str, OpStats]] = defaultdict(tier_ops)
            self.demotions: dict[str, int] = defaultdict(int)  # "src->dst" -> bytes
            self.demotion_count: dict[str, int] = defaultdict(int)
            self.promotions = 0
            self.evictions_deleted = 0
            self.e2e = {q: LatencyHistogram() for q in self.qos_classes}
            self.service = {q: LatencyHistogram() for q in self.qos_classes}
            self.e2e_all = LatencyHistogram()
            self.queue_wait = LatencyHistogram()
            self.storage = LatencyHistogram()
            self.requests = 0
            self.requests_failed = 0
            self.requests_write_failed = 0  # storage worked, but no tier had room for the request's KV
            self.context_tokens = 0
            self.generated_tokens = 0
            self.decode_tokens_read = 0
            self.counters: dict[str, int] = defaultdict(int)
            self.read_hits: dict[str, int] = defaultdict(int)  # tier name -> reads served
            self.read_misses = 0
            self.verify_seconds = 0.0
            self.verified_bytes = 0
            self.integrity_errors: list[dict[str, Any]] = []
            self.errors: list[dict[str, Any]] = []
            # One clock reading opens the window and its first interval: read twice, the time between (the
            # resets above and below, milliseconds on a loaded machine) was in the window but in no interval,
            # and the window_series check failed at random on short windows.
            self.window_start = self._clock()
            self.window_close: float | None = None  # the end of the measured duration; the drain follows
            self.window_due: float | None = None  # the window's planned end (open + duration), if it has one
            self.window_end: float | None = None
            self.drain = DrainStats(device=self.device["drain"])
            self.series: list[dict[str, Any]] = []
            self._interval_ends: list[float] = []  # each point's end, for booking into a closed point
            self._interval = self._new_interval(self.window_start)

    def _new_interval(self, start: float) -> dict[str, Any]:
        return new_interval(start, self.qos_classes)

    def start_measuring(self, duration_s: float | None = None) -> None:
        """Open the window; with a ``duration_s`` it ends at open + duration whenever the loop closes it.

        The scheduler's loop notices the end only at its next turn, which under load (or behind a slow
        housekeeping step) came up to seconds late, and the window grew with it (issue #29: 0.5025 s on a
        20 s window under load 18).  So from its planned end on, every completion is the drain's, by time,
        before the loop has closed anything, and ``close_window`` closes it there."""
        self.reset()
        self.measuring = self.opened = True
        if duration_s is not None:
            self.window_due = self.window_start + duration_s

    def _close_at(self, now: float) -> float:
        """The window's close for a stop at ``now``: now, or its planned end if that came first."""
        return now if self.window_due is None else min(now, self.window_due)

    def _closes(self) -> float | None:
        """Where the window ends for booking: where it closed, else its planned end (None: not known yet)."""
        return self.window_due if self.window_close is None else self.window_close

    def close_window(self) -> None:
        """The measured duration is over: from now on completions are the drain's."""
        with self._lock:
            if self.window_close is None:
                self.window_close = self._close_at(self._clock())

    def stop_measuring(self) -> None:
        with self._lock:
            now = self._clock()
            if self.window_close is None:
                self.window_close = self._close_at(now)
            self.drain.seconds = max(0.0, now - self.window_close)
            self.measuring = False
            self.window_end = now

    def seal(self) -> None:
        """The run gave up on a worker (``cancel.seal_abandoned``): no byte or figure is booked from now on."""
        with self._lock:
            self.sealed = True

    def phase(self, end: float) -> str:
        """The phase a device command that completed at ``end`` is booked in: ``"warmup"`` before the window
        opened (set-up, preload, warm-up), ``"window"`` until it closed, ``"drain"`` after."""
        if not self.opened or end < self.window_start:
            return "warmup"
        closes = self._closes()
        return "window" if closes is None or end <= closes else "drain"

    def bucket(self, start: float, end: float) -> str | None:
        """``"window"``, ``"drain"`` or None (warm-up, or not measuring) for something from start to end."""
        if not self.measuring or start < self.window_start:
            return None
        closes = self._closes()
        return "window" if closes is None or end <= closes else "drain"

    # -- requests ---------------------------------------------------------------------------------
    def begin_request(self) -> RequestTally:
        """From here to ``end_request`` this thread's records are held in the tally (see RequestTally)."""
        tally = RequestTally()
        self._local.tally = tally
        return tally

    def end_request(self) -> RequestTally | None:
        tally = getattr(self._local, "tally", None)
        self._local.tally = None
        return tally

    def _tally(self) -> RequestTally | None:
        return getattr(self._local, "tally", None)

    def book(self, tally: RequestTally | None, where: str | None) -> None:
        """Book a finished request's tally in ``where`` (``bucket``'s answer); None drops it (warm-up)."""
        if tally is None or where is None:
            return
        with self._lock:
            if self.sealed:
                return
            if where == "drain":
                for record in tally.ops:
                    stats = self.drain.tiers[record.tier][record.op]
                    stats.add(record.timing, record.start, record.end)
                    for nbytes, start, end in record.commands:
                        stats.add_command(nbytes, start, end)
                return
            for name, n in tally.counts.items():
                self.counters[name] += n
            self.verified_bytes += tally.verified_bytes
            self.verify_seconds += tally.verify_seconds
            for path, nbytes in tally.demotions:
                self.demotions[path] += nbytes
                self.demotion_count[path] += 1
            self.evictions_deleted += tally.evictions_deleted
            self.promotions += tally.promotions
            for tier in tally.outcomes:
                if tier is None:
                    self.read_misses += 1
                else:
                    self.read_hits[tier] += 1
            for record in tally.ops:
                self._book_op(record)

    def record_request(self, qos: str, e2e_s: float, service_s: float, queue_s: float, storage_s: float,
                       context_tokens: int, generated_tokens: int, decode_tokens_read: int,
                       *, where: str | None = "window") -> None:
        """``e2e_s`` runs to the response's end, simulated generation included; ``service_s`` stops when
        the request's storage work is done (queue wait + cache reads and writes): what the QoS SLAs judge.
        ``where`` is the request's window (``bucket``); the drain's requests are counted apart."""
        if not self.measuring or where is None:
            return
        with self._lock:
            if where == "drain":
                self.drain.requests += 1
                self.drain.context_tokens += context_tokens
                self.drain.generated_tokens += generated_tokens
                self.drain.end_to_end.add(e2e_s)
                return
            self.e2e[qos].add(e2e_s)
            self.service[qos].add(service_s)
            self.e2e_all.add(e2e_s)
            self.queue_wait.add(queue_s)
            self.storage.add(storage_s)
            self.requests += 1
            self.context_tokens += context_tokens
            self.generated_tokens += generated_tokens
            self.decode_tokens_read += decode_tokens_read
            self._interval["requests"] += 1
            self._interval["generated_tokens"] += generated_tokens
            self._interval["context_tokens"] += context_tokens
            self._interval["e2e"][qos].add(e2e_s)
            self._interval["service"][qos].add(service_s)
            self._interval["storage"].add(storage_s)

    def record_request_failed(self, *, where: str | None = "window") -> None:
        """A request whose storage raised (``on_error: count``)."""
        with self._lock:
            if where == "drain":
                self.drain.requests_failed += 1
            elif where is not None:
                self.requests_failed += 1

    def record_request_write_failed(self, *, where: str | None = "window") -> None:
        """A request whose KV no tier could store: not completed, its tokens in no throughput."""
        with self._lock:
            if where == "drain":
                self.drain.requests_write_failed += 1
            elif where is not None:
                self.requests_write_failed += 1

    def record_request_cancelled(self, enqueued: float) -> None:
        """In flight when the drain limit ran out: stopped at a command boundary.  Counted when it was
        enqueued in the window, as a request that finished would have been (one begun in warm-up is not)."""
        with self._lock:
            if self.measuring and enqueued >= self.window_start:
                self.drain.requests_cancelled += 1

    # -- operations and commands ---------------------------------------------------------------------
    def record_op(self, tier: str, op: str, timing: IOTiming, start: float, end: float,
                  commands: list[Command] | None = None) -> None:
        """One per-entry operation and the device commands it issued (``commands``: none for a tier that
        reports none).  Inside a request it waits in the request's tally; outside (preload, cold
        demotion) it belongs to the window it started in."""
        record = OpRecord(tier, op, timing, start, end, commands or [])
        with self._lock:
            self._book_device(record)
        tally = self._tally()
        if tally is not None:
            tally.ops.append(record)
            return
        self.book(RequestTally(ops=[record]), self.bucket(start, end))

    def record_command_outside(self, tier: str, op: str, nbytes: int, start: float, end: float) -> None:
        """A command a tier completed while nothing is measured (set-up, warm-up, after the window's end):
        booked at once by time (no operation will take it), and before the window in the live line."""
        with self._lock:
            if not self.opened:
                self._interval["tiers"][tier][op][0] += nbytes
            self.commanded.add(tier)
            self._book_command(tier, op, nbytes, 1, start, end)

    def record_unfinished(self, tier: str, op: str, commands: list[Command], *, cancelled: bool) -> None:
        """The commands of an operation that did not complete (cancelled at the drain limit, failed, its
        entry gone): the device moved their bytes, booked by time; a cancelled one is counted, with them."""
        with self._lock:
            for nbytes, start, end in commands:
                self._book_command(tier, op, nbytes, 1, start, end)
            if cancelled and not self.sealed:
                stats = self.device[self.phase(commands[-1][2] if commands else self._clock())][tier][op]
                stats.cancelled_ops += 1
                stats.cancelled_bytes += sum(nbytes for nbytes, _, _ in commands)

    def _book_device(self, record: OpRecord) -> None:
        """An operation's device work by time (lock held): each command in the phase it completed in (and in
        the series), or for a tier that reports none the operation's device bytes at its end (a codec's
        output); its latency in the interval it completed in, beside its bytes (warm-up's: the live line)."""
        timing = record.timing
        for nbytes, start, end in record.commands:
            self.commanded.add(record.tier)
            self._book_command(record.tier, record.op, nbytes, 1, start, end)
        # none taken from a tier that reports commands: they were booked as they came (outside the window)
        if not record.commands and timing.transferred and record.tier not in self.commanded and not self.sealed:
            physical = timing.nbytes if timing.physical_bytes is None else timing.physical_bytes
            self.uncommanded_bytes[record.tier][record.op] += physical
            self._book_command(record.tier, record.op, physical, timing.commands, record.start, record.end)
        if timing.transferred and (not self.opened or (self.phase(record.end) == "window"
                                                       and record.end >= self._interval["start"])):
            self._interval["tiers"][record.tier][record.op][1].add(timing.total)

    def _book_command(self, tier: str, op: str, nbytes: int, commands: int, start: float, end: float) -> None:
        """``commands`` that moved ``nbytes``, completed at ``end``: in their phase and the series (lock held)."""
        if self.sealed:
            return
        phase = self.phase(end)
        if phase == "window":
            self.device[phase][tier][op].add(nbytes, commands, max(start, self.window_start), end)
            self._book_bytes(tier, op, nbytes, end)
        else:
            self.device[phase][tier][op].add(nbytes, commands, start, end)

    def _book_op(self, record: OpRecord) -> None:
        """A window's operation (lock held): its stats and its commands' latency and bytes (per request; its
        device bytes were booked by time as it completed, ``_book_device``)."""
        stats = self.tiers[record.tier][record.op]
        stats.add(record.timing, record.start, record.end)
        for nbytes, start, end in record.commands:
            stats.add_command(nbytes, start, end)

    def _book_bytes(self, tier: str, op: str, nbytes: int, at: float) -> None:
        """``nbytes`` into the series point covering instant ``at`` (lock held): the open interval, or an
        earlier point already closed (an operation's commands are taken when it ends, seconds later)."""
        if at >= self._interval["start"] or not self.series:
            self._interval[f"{op}_bytes"] += nbytes
            self._interval["tiers"][tier][op][0] += nbytes
        else:
            add_to_point(self.series[min(bisect.bisect_left(self._interval_ends, at), len(self.series) - 1)],
                         tier, op, nbytes)

    def record_op_error(self, tier: str, op: str, key: str, error: BaseException) -> None:
        with self._lock:
            if op in ("read", "write"):  # a failed delete (eviction, cleanup) is listed below, not in op stats
                self.tiers[tier][op].errors += 1
            if len(self.errors) < 100:
                self.errors.append({"tier": tier, "op": op, "key": key, "error": str(error)[:500]})

    def record_error(self, kind: str, key: str, message: str) -> None:
        """An error that is not a tier's (a KV write no tier had room for), listed beside the tiers'."""
        with self._lock:
            if len(self.errors) < 100:
                self.errors.append({"tier": None, "op": kind, "key": key, "error": message})

    def record_integrity_error(self, tier: str, key: str, offset: int | None) -> None:
        with self._lock:
            if len(self.integrity_errors) < 100:
                self.integrity_errors.append({"tier": tier, "key": key, "first_bad_offset": offset})
            if len(self.errors) < 100:  # listed with the run's other errors: the result must not say "errors: []"
                self.errors.append({"tier": tier, "op": "verify", "key": key,
                                    "error": f"read back bytes different from what was written (first bad "
                                             f"offset {offset})"})
            self.counters["integrity_errors"] += 1

    # -- intervals ---------------------------------------------------------------------------------
    def close_interval(self, users: int, extra: dict[str, Any] | None = None,
                       *, end: float | None = None) -> dict[str, Any]:
        """Finish the current interval (at ``end``, default now), append it to the series and return it
        (``intervals.interval_point``); the next one starts where it ended.  Past the window's planned end
        the interval is not closed, only shown as it stands at that end: it is the window's last, closed by
        the drain once every request that finished inside the window is booked."""
        with self._lock:
            now = self._clock() if end is None else end
            if self.measuring and self.window_due is not None and now > self.window_due:
                return interval_point(self._interval, self.window_due, self.window_start, users, extra)
            interval, self._interval = self._interval, self._new_interval(now)
            point = interval_point(interval, now, self.window_start, users, extra)
            if self.measuring:
                self.series.append(point)
                self._interval_ends.append(now)
            return point
