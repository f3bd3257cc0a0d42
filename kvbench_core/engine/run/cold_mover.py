"""The cold mover: entries idle past the lower tier's ``cold_after`` move down on a thread of its own.

The scheduler's loop only wakes it, at each interval's tick (``wake``).  It ran the demotions itself before
(issue #29), with a time budget checked between demotions, so one demotion that took seconds (a multi-GiB
entry uploaded to S3) held the loop and the window's close with it: a 20 s window over S3 measured 25.5 s.

Why a thread and not a bound on one demotion's time: a demotion cut short at a bound would be a cancelled
copy, its bytes moved for nothing and the entry still where it was, so a tier whose entries take longer than
the bound would never receive one; on a thread each demotion runs to its end, as a worker's operation does,
and its bytes are booked by time like every other operation's (``Telemetry.record_op``, docs/metrics.md,
"booking rules"): the commands that completed in the window are the window's, those after it the drain's.
The loop stops the mover when the window closes (``stop``: no demotion starts after it); the one in flight
finishes in the drain, or is cancelled at the drain limit at a command boundary like a worker's operation,
and the drain waits for it (``running``, ``join``) before the cache is cleared.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from kvbench_core.contracts.errors import Cancelled, StorageError
from kvbench_core.engine.cache.waterfall import MultiTierCache


class ColdMover:
    """One thread that runs ``cache.demote_cold`` each time it is woken, until it is stopped."""

    __slots__ = ("_stopped", "_thread", "_woken", "cache", "on_crash", "on_storage_error")

    def __init__(self, cache: MultiTierCache, *, on_storage_error: Callable[[StorageError], None],
                 on_crash: Callable[[BaseException], None]) -> None:
        self.cache = cache
        self.on_storage_error = on_storage_error  # its storage errors count like a request's (on_error)
        self.on_crash = on_crash
        self._woken = threading.Event()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._move, name="kvbench-cold-mover", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        """Look for cold entries now (an interval's tick); a wake while it moves is one more pass after it."""
        self._woken.set()

    def stop(self) -> None:
        """No demotion starts from now on; the one in flight runs to its end (or to the drain's cancel)."""
        self._stopped.set()
        self._woken.set()

    @property
    def running(self) -> bool:
        """Its thread is alive: after ``stop``, a demotion is still in flight."""
        return self._thread.is_alive()

    def join(self, timeout_s: float) -> bool:
        """Wait at most ``timeout_s`` for the thread to end; True when it did (or never started)."""
        if self._thread.ident is not None:
            self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def _move(self) -> None:
        while True:
            self._woken.wait()
            self._woken.clear()
            if self._stopped.is_set():
                return
            try:
                self.cache.demote_cold(stop=self._stopped.is_set)
            except Cancelled:  # the drain limit ran out mid-demotion: it stopped at a command boundary
                return
            except StorageError as error:
                self.on_storage_error(error)
            except Exception as error:  # a kvbench bug: the run stops, the partial result is kept
                self.on_crash(error)
                return
