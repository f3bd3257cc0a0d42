"""The end of a file tier's pipelined write (issue 32 §1): its fsync and close on a completion thread.

Why: a stream that writes entries one after the other drains its queue at every
entry boundary if each ``write`` returns only when the file is durable: the
device idles while the fsync and close run and the next entry's first command
waits for them.  ``StorageBackend.write_pipelined`` lets the tier return once an
entry's data commands are done; this module runs the rest (``finish``: fsync,
close, the timing) on one of its threads, so the stream's next entry is already
in flight meanwhile, and hands the result back through a ``PendingFileWrite``.

Why threads and not an ``IORING_OP_FSYNC`` for the io_uring engine: its rings
are ``SINGLE_ISSUER`` (a completion is seen only when the stream's own thread
next enters the ring, so the entry's durable end would be booked late), an
``IOSQE_IO_DRAIN`` fsync would hold the next entry's commands back until it
completes (the very stall this removes), and the kernel runs a file's fsync on an
io-wq worker thread anyway.  One mechanism serves both engines (docs/PERFORMANCE.md).

An entry is reported durable (``result`` returns) only after ``finish`` has
returned, i.e. after its fsync; ``wait(key)`` lets a read, delete or rewrite of
the key wait for its pending write first, so no operation sees the file before
it is durable and the backend never runs two operations on one file at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from kvbench_core.contracts.backend import IOTiming


class PendingFileWrite:
    """One entry whose commands are issued and whose end (last commands, fsync, close) runs on a completion
    thread; ``settle`` is what only the writing thread can do for it (reap its io_uring ring)."""

    __slots__ = ("_future", "settle")

    def __init__(self, future: Future[IOTiming], settle: Callable[[], None]) -> None:
        self._future = future
        self.settle = settle

    def result(self) -> IOTiming:
        """The entry's timing once it is durable (first command to the end of its close); raises its error.
        Taken on the thread that wrote it (the default: a stream's own), it first settles the entry."""
        self.settle()
        return self._future.result()

    def done(self) -> bool:
        """Whether the fsync and close have finished (successfully or not)."""
        return self._future.done()


class WriteCompleter:
    """Runs pipelined writes' ``finish`` steps and knows which keys are pending.

    A stream keeps one write pending while it starts the next, so it has two ends running at most (the
    pending one's and, once its commands are issued, the next one's): two threads per stream of the
    tier's ``concurrency`` never queue one entry's fsync behind another's.  The pool starts on the first
    pipelined write: a run that never pipelines starts no thread."""

    def __init__(self, streams: int, thread_name: str) -> None:
        self._threads = 2 * max(1, streams)
        self._thread_name = thread_name
        self._pool: ThreadPoolExecutor | None = None
        self._pending: dict[str, Future[IOTiming]] = {}
        self._lock = threading.Lock()

    def submit(self, key: str, finish: Callable[[], IOTiming], settle: Callable[[], None]) -> PendingFileWrite:
        """Run ``finish`` (``key``'s last commands, fsync, close and timing) on a completion thread."""
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._threads, thread_name_prefix=self._thread_name)
            pending = PendingFileWrite(self._pool.submit(finish), settle)
            self._pending[key] = pending
        pending._future.add_done_callback(lambda _: self._settled(key, pending))
        return pending

    def _settled(self, key: str, pending: PendingFileWrite) -> None:
        with self._lock:
            if self._pending.get(key) is pending:
                del self._pending[key]

    def wait(self, key: str) -> None:
        """Return once ``key`` has no write pending; its error, if any, is its own ``result``'s to report."""
        with self._lock:
            pending = self._pending.get(key)
        if pending is not None:
            pending.settle()
            pending._future.exception()  # waits; does not raise it

    def close(self) -> None:
        """Wait for every pending write to finish (their files must be closed before they are removed)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
