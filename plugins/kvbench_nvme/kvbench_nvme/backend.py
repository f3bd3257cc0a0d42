"""The NVMe / POSIX file tier: one file per entry, raw pread/pwrite, fsync, dropped page cache.

Data path.  An entry is streamed in ``transfer_size`` pieces through a
per-thread, page-aligned (anonymous ``mmap``) buffer that lives as long as the
thread: a write asks ``source.fill(offset, view)`` for a piece and ``pwrite``s
it, a read ``preadv``s into the buffer and hands the piece to
``sink.consume(offset, view)``.  No entry is materialised, no buffer is
allocated per operation, nothing is serialised.  ``os.pwrite``/``os.preadv``
release the GIL, so ``queue_depth`` threads keep that many commands in flight
per entry.  A write has one more thread, which fills the next piece while the
others write, so filling overlaps the device even at ``queue_depth: 1`` (in
fio the buffer is ready before the next command too); a read does not, since
consuming a piece is cheap next to a hand-over between threads on every
command.  The calling thread is one of these workers; the rest come from a
pool sized ``concurrency × queue_depth``.  ``queue_depth`` governs O_DIRECT
only: buffered I/O keeps one ``pwrite``/``preadv`` in flight per file, because
there the device's queue is the kernel's writeback and readahead, not these
calls (see ``_commands_in_flight``); buffered writes still fill ahead in parallel.

Durability and cache.  ``fsync: true`` ends every write with ``fsync`` (the
entry is on the device when ``write`` returns).  ``drop_cache: true`` calls
``posix_fadvise(DONTNEED)`` on the file before a read so the read hits the
device; the kernel drops only clean pages, so with ``fsync: false`` a freshly
written entry may still be (partly) served from memory.  Buffered reads also
say ``POSIX_FADV_SEQUENTIAL`` (an entry is read whole, front to back), which
doubles the kernel's readahead window, as fio's default ``fadvise_hint`` does.

O_DIRECT.  ``direct: true`` opens with ``O_DIRECT``: transfers bypass the page
cache and must be aligned to ``ALIGN`` (4 KiB: page size, and a multiple of
every common logical block size).  The mmap buffers are page aligned and
``transfer_size`` must be a multiple of 4 KiB; an entry whose size is not is
written with its last piece zero-padded to 4 KiB and then ``ftruncate``d to
its real size, and its last piece is read with the aligned-up length (the
short read at end of file returns just the real bytes).  The device therefore
moves up to 4 KiB - 1 more than the entry per O_DIRECT operation;
``IOTiming.nbytes`` stays the entry size, while the per-command ``io_log``
records the aligned length the device moved (for writes and reads alike).

L4 split (the seed's host vs device).  ``host`` = user-space preparation:
``source.fill``, ``sink.consume``, the ``posix_fadvise`` calls (page-cache
drop, sequential hint).
``device`` = time inside syscalls that wait on the filesystem and device:
``pwrite``/``preadv``, ``fsync``, and also ``open``, ``ftruncate`` and ``close``
(file creation and truncation are filesystem work the entry pays for).
``commands`` = number of ``pwrite``/``preadv`` calls.  With ``queue_depth > 1``
both are wall-clock, not summed over threads; see ``kvbench_nvme.accounting``.

Safety and cleanup (``kvbench_nvme.directory``, ``kvbench_nvme.entry_files``).  Files are
``<path>/<run_id>-<key>.kv``; keys are checked so none can leave the
directory; ``close`` removes every file this backend created (unless
``context.keep``) and the directory if kvbench made it.  A failed write
unlinks its half-written file; I/O errors propagate as ``OSError`` for the
cache to wrap.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import itertools
import mmap
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, ClassVar

from kvbench_core.contracts.backend import BackendContext, ByteSink, ByteSource, IOTiming, check_key
from kvbench_core.contracts.errors import BackendUnavailable, SpecError
from kvbench_core.spec.units import SIZE_PATTERN, parse_size
from kvbench_nvme.accounting import Phase
from kvbench_nvme.directory import TierDirectory
from kvbench_nvme.entry_files import EntryFilesBackend
from kvbench_nvme.fsinfo import describe_location

ALIGN = 4096
FILL_AHEAD = 1  # write workers beyond queue_depth: one fills the next piece while queue_depth pwrites are in flight
MAX_TRANSFER = 1 << 30
_ZEROS = memoryview(bytes(ALIGN))  # padding source for an unaligned O_DIRECT tail; never allocated per op


def _align_up(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


class NVMeBackend(EntryFilesBackend):
    """A directory of files on a local filesystem, driven with raw POSIX I/O."""

    name = "nvme"
    options_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "additionalProperties": False,
        "required": ["path"],
        "properties": {
            "path": {"type": "string", "minLength": 1,
                     "description": "directory for the entry files (created and marked if missing)"},
            "fsync": {"type": "boolean", "default": True,
                      "description": "fsync each entry before write returns"},
            "drop_cache": {"type": "boolean", "default": True,
                           "description": "posix_fadvise(DONTNEED) the file before each read"},
            "direct": {"type": "boolean", "default": False,
                       "description": "O_DIRECT: bypass the page cache (4 KiB-aligned transfers)"},
            "transfer_size": {
                "oneOf": [{"type": "integer", "minimum": 1}, {"type": "string", "pattern": SIZE_PATTERN}],
                "default": "1MiB",
                "description": "bytes per pread/pwrite command, e.g. 1MiB",
            },
            "queue_depth": {"type": "integer", "minimum": 1, "maximum": 256, "default": 1,
                            "description": "pread/pwrite commands in flight per entry with direct: true "
                                           "(buffered I/O keeps one per file: readahead and writeback "
                                           "are the device's queue)"},
            "allow_nonempty": {"type": "boolean", "default": False,
                               "description": "use an existing non-empty directory kvbench did not create"},
        },
    }
    def __init__(self, options: dict[str, Any], context: BackendContext) -> None:
        super().__init__(options, context)
        resolved = self.options_with_defaults()
        self.fsync: bool = resolved["fsync"]
        self.drop_cache: bool = resolved["drop_cache"]
        self.direct: bool = resolved["direct"]
        self.queue_depth: int = resolved["queue_depth"]
        self.transfer_size = self._transfer_size(resolved["transfer_size"])
        self.label = f"tier '{context.tier_name}' ({self.name})"
        self.directory = TierDirectory(resolved["path"], check_key(context.run_id),
                                       allow_nonempty=resolved["allow_nonempty"], label=self.label)
        self._write_flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
        self._read_flags = os.O_RDONLY | os.O_CLOEXEC
        if self.direct:
            direct_flag = getattr(os, "O_DIRECT", 0)  # absent on macOS: open() reports it
            self._write_flags |= direct_flag
            self._read_flags |= direct_flag
        self._buffers = threading.local()
        self._pool: ThreadPoolExecutor | None = None

    def _transfer_size(self, value: int | str) -> int:
        where = f"tiers.{self.context.tier_name}.options.transfer_size"
        size = parse_size(value)
        if not 1 <= size <= MAX_TRANSFER:
            raise SpecError(f"{where}: expected a size between 1 B and 1 GiB, got {value!r}")
        if self.direct and size % ALIGN:
            raise SpecError(f"{where}: with direct: true the transfer size must be a multiple of 4 KiB, "
                            f"got {value!r} ({size} B)")
        return size

    # -- lifecycle -------------------------------------------------------------------------------

    def open(self) -> None:
        if self.direct and not hasattr(os, "O_DIRECT"):
            raise BackendUnavailable(f"{self.label}: direct: true needs O_DIRECT, which this OS lacks")
        if not self.direct and not hasattr(os, "posix_fadvise"):
            raise BackendUnavailable(f"{self.label}: buffered reads need posix_fadvise, which this OS lacks")
        self.directory.open()
        self._probe()
        helpers = max(1, self.context.concurrency) * (self.queue_depth + FILL_AHEAD - 1)
        if helpers:
            self._pool = ThreadPoolExecutor(max_workers=helpers, thread_name_prefix=f"kvbench-{self.name}")

    def _probe(self) -> None:
        """Write, read and delete one aligned block the way entries will be, so a read-only
        filesystem or one without O_DIRECT (tmpfs on old kernels, some FUSE) fails here, clearly."""
        path = os.path.join(self.directory.path, f".{self.context.run_id}-probe")
        view = self._buffer()
        try:
            fd = os.open(path, self._write_flags, 0o644)
            try:
                os.pwrite(fd, view[:ALIGN], 0)
            finally:
                os.close(fd)
            fd = os.open(path, self._read_flags)
            try:
                os.preadv(fd, [view[:ALIGN]], 0)
            finally:
                os.close(fd)
        except OSError as error:
            hint = " (the filesystem does not support O_DIRECT; set direct: false)" \
                if self.direct and error.errno == errno.EINVAL else ""
            self.directory.close()
            raise BackendUnavailable(f"{self.label}: cannot write files in {self.directory.path}: "
                                     f"{error.strerror or error}{hint}") from None
        finally:
            with contextlib.suppress(OSError):
                os.unlink(path)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        self._remove_files()

    # -- buffers ---------------------------------------------------------------------------------

    def _buffer(self) -> memoryview:
        """This thread's reusable, page-aligned transfer buffer (created on the thread's first use)."""
        view = getattr(self._buffers, "view", None)
        if view is None:
            view = memoryview(mmap.mmap(-1, _align_up(self.transfer_size)))
            self._buffers.view = view
        return view

    # -- data path -------------------------------------------------------------------------------

    @property
    def _commands_in_flight(self) -> int:
        """``pwrite``/``preadv`` calls issued at once per entry: ``queue_depth`` with O_DIRECT, else 1.

        Buffered writes to one file are serialised by the kernel on the inode lock (ext4 and xfs alike)
        and the device sees writeback, not these calls; buffered reads are fed by readahead, which
        several threads claiming pieces of one file only disturb (measured: 0.80–0.86 of fio at queue
        depth 4 with four threads, 0.98–1.05 and half the CPU with one; docs/PERFORMANCE.md).  io_uring
        likewise funnels buffered I/O on one file through one worker.
        """
        return self.queue_depth if self.direct else 1

    def write(self, key: str, source: ByteSource) -> IOTiming:
        path = self.path_of(key)
        size = source.size
        phase = Phase(self._commands_in_flight)  # the fills may still run ahead in parallel
        start = time.perf_counter()
        self._created(path)
        fd = phase.timed_syscall(os.open, path, self._write_flags, 0o644)
        try:
            self._run(phase, size, functools.partial(self._write_piece, key, fd, source, phase),
                      workers=self.queue_depth + FILL_AHEAD)
            if self.direct and size % ALIGN:
                phase.timed_syscall(os.ftruncate, fd, size)
            if self.fsync:
                phase.timed_syscall(os.fsync, fd)
        except BaseException:
            os.close(fd)
            self._forget(path)  # never leave a half-written entry behind
            raise
        phase.timed_syscall(os.close, fd)
        return phase.timing(start, time.perf_counter(), size)

    def _write_piece(self, key: str, fd: int, source: ByteSource, phase: Phase, view: memoryview, offset: int,
                     n: int) -> None:
        t0 = time.perf_counter()
        source.fill(offset, view[:n])
        length = n
        if self.direct and n % ALIGN:
            length = _align_up(n)
            view[n:length] = _ZEROS[: length - n]
        phase.host.append((t0, time.perf_counter()))
        log = self.context.io_log
        with phase.in_flight:
            done = 0
            while done < length:
                t1 = time.perf_counter()
                written = os.pwrite(fd, view[done:length], offset + done)
                t2 = time.perf_counter()
                phase.io.append((t1, t2))
                if log is not None:
                    log.record(key, "write", offset + done, written, t1, t2)
                if written <= 0:
                    raise OSError(errno.EIO, f"pwrite wrote nothing at offset {offset + done}")
                done += written

    def read(self, key: str, size: int, sink: ByteSink) -> IOTiming:
        path = self.path_of(key)
        phase = Phase(self._commands_in_flight)
        start = time.perf_counter()
        fd = phase.timed_syscall(os.open, path, self._read_flags)
        try:
            if not self.direct:
                t0 = time.perf_counter()
                if self.drop_cache:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                # An entry is read whole, front to back: say so, so readahead runs ahead as fio's does
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
                phase.host.append((t0, time.perf_counter()))
            self._run(phase, size, functools.partial(self._read_piece, key, fd, sink, size, phase),
                      workers=self._commands_in_flight)
        finally:
            phase.timed_syscall(os.close, fd)
        return phase.timing(start, time.perf_counter(), size)

    def _read_piece(self, key: str, fd: int, sink: ByteSink, size: int, phase: Phase, view: memoryview,
                    offset: int, n: int) -> None:
        length = _align_up(n) if self.direct else n
        log = self.context.io_log
        with phase.in_flight:
            got = 0
            while got < n:
                t1 = time.perf_counter()
                count = os.preadv(fd, [view[got:length]], offset + got)
                t2 = time.perf_counter()
                phase.io.append((t1, t2))
                if log is not None:  # O_DIRECT: the device read whole blocks even where the file ends
                    log.record(key, "read", offset + got, _align_up(count) if self.direct else count, t1, t2)
                if count <= 0:
                    raise OSError(errno.EIO, f"entry file ends at byte {offset + got}, expected {size} bytes")
                got += count
        with phase.consume_lock:
            t0 = time.perf_counter()
            sink.consume(offset, view[:n])
            phase.host.append((t0, time.perf_counter()))

    def _run(self, phase: Phase, size: int, move: Callable[[memoryview, int, int], None], workers: int) -> None:
        """Move the entry piece by piece, ``move(view, offset, n)``, on this thread and on up to
        ``workers - 1`` pool threads, each with its own buffer; they claim pieces
        from one shared counter until the entry is done or one of them failed.  Returns when all
        have stopped; re-raises the first error."""
        pieces = itertools.count()

        def worker() -> None:
            view = self._buffer()
            for index in pieces:
                offset = index * self.transfer_size
                if offset >= size or phase.failed:
                    return
                move(view, offset, min(self.transfer_size, size - offset))

        helpers = min(workers, -(-size // self.transfer_size)) - 1
        futures: list[Future[None]] = []
        if helpers > 0 and self._pool is not None:
            futures = [self._pool.submit(self._guarded, phase, worker) for _ in range(helpers)]
        error: BaseException | None = None
        try:
            self._guarded(phase, worker)
        except BaseException as exc:
            error = exc
        for future in futures:
            exc = future.exception()  # waits: the fd must outlive every helper
            if error is None and exc is not None:
                error = exc
        if error is not None:
            raise error

    @staticmethod
    def _guarded(phase: Phase, worker: Callable[[], None]) -> None:
        try:
            worker()
        except BaseException:
            phase.failed = True
            raise

    def read_range(self, key: str, offset: int, out: memoryview) -> None:
        """Buffered ``preadv`` straight into the caller's buffer (which need not be aligned):
        a demotion reads what the upper tier just wrote, the page cache may serve it."""
        fd = os.open(self.path_of(key), os.O_RDONLY | os.O_CLOEXEC)
        log = self.context.io_log
        try:
            got = 0
            while got < len(out):
                t1 = time.perf_counter()
                count = os.preadv(fd, [out[got:]], offset + got)
                if log is not None:
                    log.record(key, "read", offset + got, count, t1, time.perf_counter())
                if count <= 0:
                    raise OSError(errno.EIO, f"entry {key!r} ends before byte {offset + len(out)}")
                got += count
        finally:
            os.close(fd)

    # -- declaration -----------------------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        if self.direct:
            mechanism = "O_DIRECT" + (" + fsync" if self.fsync else "")
        else:
            mechanism = "POSIX page cache" + (" + fsync" if self.fsync else " (no fsync)")
        location = describe_location(self.directory.path)
        filesystem, device = location["filesystem"], location["block_device"]
        fs_type = filesystem["type"] if isinstance(filesystem, dict) else "unknown filesystem"
        driver = f" on {device['name']} ({device['driver'] or 'unknown driver'})" if isinstance(device, dict) else ""
        return {
            "backend": self.name,
            "medium": "files on a local filesystem",
            "access_mechanism": mechanism,
            "driver_layer": f"kernel {fs_type}{driver} via pread/pwrite syscalls",
            "queue_depth": self.queue_depth,
            "commands_in_flight": self._commands_in_flight,
            "transfer_size": self.transfer_size,
            "fsync": self.fsync,
            "drop_cache": self.drop_cache and not self.direct,
            "direct": self.direct,
            "path": self.directory.path,
            "fs_type": fs_type,
            **location,
            **self.directory.describe(),  # dead runs' files found and removed at open
        }
