"""The run's stop: asked for by the scheduler (duration, request limit), a worker's failure, the autoscaler
or a signal's handler, and applied once, whoever asks first.

A signal's handler runs on the main thread between two bytecodes, which may be inside ``request`` itself
(the loop stopping the run, or a failure being recorded).  The lock is re-entrant so that the handler does
not wait for a lock its own thread holds, and a request that re-enters is applied after the one it
interrupted, never half-way through it: otherwise a Ctrl-C landing in a failure's stop left a run
``failed`` whose stop reason was the signal's (review R1 L6).
"""

from __future__ import annotations

import threading

from kvbench_core.contracts.errors import UserError
from kvbench_core.engine.measure.cancel import CancelToken
from kvbench_core.engine.run.run_state import RunState


class Stopping:
    """``request`` a stop; ``event`` is set once one was requested."""

    def __init__(self, state: RunState, cancel: CancelToken) -> None:
        self.state, self.cancel = state, cancel
        self.event = threading.Event()
        self.lock = threading.RLock()
        self._inside = False  # read and written only by the thread holding the lock
        self._deferred: list[tuple[str, str | None, UserError | None]] = []

    def request(self, reason: str, status: str | None = None, error: UserError | None = None) -> None:
        """The first request sets the stop reason, status and error.  An interruption (a signal) also
        cancels the work in flight at its next command boundary, and labels the run ``interrupted`` even
        when it came during the drain of a run that had ended.  A second signal changes nothing: the run
        was interrupted by the first."""
        with self.lock:
            if self._inside:  # a signal's handler, on the thread already in here: after that request
                self._deferred.append((reason, status, error))
                return
            self._inside = True
            try:
                self._apply(reason, status, error)
                while self._deferred:
                    self._apply(*self._deferred.pop(0))
            finally:
                self._inside = False

    def _apply(self, reason: str, status: str | None, error: UserError | None) -> None:
        state = self.state
        if not self.event.is_set():
            state.stop_reason = reason
            if status:
                state.status = status
            if error is not None:
                state.error = error
        elif status == "interrupted" and state.status not in ("failed", "interrupted"):
            state.status = "interrupted"
            state.stop_reason = f"{state.stop_reason}; then {reason} during the drain"
        if status == "interrupted":
            self.cancel.cancel()
        self.event.set()
