"""The NVMe / POSIX file tier: one file per entry, raw pread/pwrite, fsync, dropped page cache.

Data path.  An entry is streamed in ``transfer_size`` pieces through
page-aligned buffers that are created once and reused: a write asks
``source.fill(offset, view)`` for a piece and writes it, a read reads into a
buffer and hands the piece to ``sink.consume(offset, view)``.  No entry is
materialised, no buffer is allocated per operation, nothing is serialised.
The ``engine`` option chooses how commands are kept in flight
(``kvbench_nvme.engines``): ``psync`` (default) issues ``pwrite``/``preadv``
from ``queue_depth`` threads per O_DIRECT entry and one per buffered file,
plus a thread that fills the next write piece meanwhile; ``io_uring`` keeps
``queue_depth`` fixed-buffer commands in flight per entry from one thread
through a per-thread ring with registered buffers, buffered or not, as fio's
``iodepth`` means it.  This module opens, syncs and closes the files around
the engine.

Durability and cache.  ``fsync: true`` ends every write with ``fsync`` (the
entry is on the device when ``write`` returns; ``write_pipelined``, which the
cache uses for new entries, returns once the entry's commands are issued and its
end, the last commands, ``fsync`` and ``close``, runs on a completion thread,
``kvbench_core.filetiers.pipeline``, so a stream's next entry keeps the queue
full meanwhile; ``pipeline_writes: false`` makes it ``write``).  ``drop_cache: true`` calls
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
records what each call returned and, on such a tail, the aligned length it
asked for (``requested``, ``align``).

L4 split (the seed's host vs device).  ``host`` = user-space preparation:
``source.fill``, ``sink.consume``, the ``posix_fadvise`` calls (page-cache
drop, sequential hint).
``device`` = time inside syscalls that wait on the filesystem and device:
``pwrite``/``preadv`` (with io_uring: each command from submission until its
completion is reaped), ``fsync``, and also ``open``, ``ftruncate`` and ``close``
(file creation and truncation are filesystem work the entry pays for).
``commands`` = number of data commands (``pwrite``/``preadv`` calls or io_uring entries).  With ``queue_depth > 1``
both are wall-clock, not summed over threads; see ``kvbench_core.filetiers.accounting``.

Safety and cleanup (``kvbench_core.filetiers.directory``, ``kvbench_core.filetiers.entry_files``).  Files are
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
import os
import time
from dataclasses import dataclass
from typing import Any, ClassVar

from kvbench_core.contracts.backend import (
    DISCARD,
    BackendContext,
    ByteSink,
    ByteSource,
    IOTiming,
    PendingWrite,
    check_key,
)
from kvbench_core.contracts.errors import BackendUnavailable, SpecError
from kvbench_core.contracts.units import parse_size, size_schema
from kvbench_core.contracts.validation import with_defaults
from kvbench_core.filetiers.accounting import Phase
from kvbench_core.filetiers.directory import CREATE_OPTION, TierDirectory
from kvbench_core.filetiers.entry_files import EntryFilesBackend
from kvbench_core.filetiers.fsinfo import describe_location
from kvbench_core.filetiers.pipeline import WriteCompleter
from kvbench_nvme.engine_contract import EngineSettings, Unfinished
from kvbench_nvme.engines import ENGINES, make_engine
from kvbench_nvme.uring import ALIGN, UringUnavailable

MAX_TRANSFER = 1 << 30
_PROBE = memoryview(bytes(ALIGN))  # the probe block written and read at open()


class _ProbeSource:
    """The one zero block ``_probe`` writes."""

    size = ALIGN

    def fill(self, offset: int, out: memoryview) -> None:
        out[:] = _PROBE[offset:offset + len(out)]


def transfer_size_of(options: dict[str, Any], where: str) -> int:
    """The tier's ``transfer_size`` in bytes: 1 B to 1 GiB, whole 4 KiB pages with ``direct: true``;
    errors name ``<where>.transfer_size``."""
    value, where = options["transfer_size"], f"{where}.transfer_size"
    size = parse_size(value)
    if not 1 <= size <= MAX_TRANSFER:
        raise SpecError(f"{where}: expected a size between 1 B and 1 GiB, got {value!r}")
    if options["direct"] and size % ALIGN:
        raise SpecError(f"{where}: with direct: true the transfer size must be a multiple of 4 KiB, "
                        f"got {value!r} ({size} B)")
    return size

@dataclass(frozen=True, slots=True)
class _OpenEntry:
    """An entry whose data is written and whose file is still open: what its fsync and close need."""

    path: str
    fd: int
    phase: Phase
    start: float
    size: int
    rest: Unfinished  # the engine's: the entry's last commands


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
            "transfer_size": {**size_schema("bytes per pread/pwrite command, e.g. 1MiB"), "default": "1MiB"},
            "queue_depth": {"type": "integer", "minimum": 1, "maximum": 256, "default": 1,
                            "description": "commands in flight per entry: with engine psync for direct: true "
                                           "only (buffered I/O keeps one per file: readahead and writeback "
                                           "are the device's queue), with engine io_uring always, as fio's "
                                           "iodepth"},
            "pipeline_writes": {"type": "boolean", "default": True,
                                "description": "a stream's next entry starts while the previous one's last "
                                               "commands, fsync and close complete (write_pipelined); each "
                                               "entry is still reported durable only after its fsync"},
            "engine": {"enum": sorted(ENGINES), "default": "psync",
                       "description": "psync: pread/pwrite from queue_depth threads; io_uring: one ring per "
                                      "thread with registered buffers (Linux >= 5.1; 6.1 off x86-64)"},
            "allow_nonempty": {"type": "boolean", "default": False,
                               "description": "use an existing non-empty directory kvbench did not create"},
            "create": CREATE_OPTION,
        },
    }
    def __init__(self, options: dict[str, Any], context: BackendContext) -> None:
        super().__init__(options, context)
        self.fsync: bool = self.options["fsync"]
        self.drop_cache: bool = self.options["drop_cache"]
        self.direct: bool = self.options["direct"]
        self.queue_depth: int = self.options["queue_depth"]
        self.pipeline_writes: bool = self.options["pipeline_writes"]
        self.transfer_size = transfer_size_of(self.options, context.options_where)
        self.label = context.label(self.name)
        self.directory = TierDirectory(self.options["path"], check_key(context.run_id),
                                       allow_nonempty=self.options["allow_nonempty"], label=self.label)
        self._write_flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
        self._read_flags = os.O_RDONLY | os.O_CLOEXEC
        if self.direct:
            direct_flag = getattr(os, "O_DIRECT", 0)  # absent on macOS: open() reports it
            self._write_flags |= direct_flag
            self._read_flags |= direct_flag
        self.engine = make_engine(self.options["engine"], EngineSettings(
            transfer_size=self.transfer_size, queue_depth=self.queue_depth, direct=self.direct,
            concurrency=context.concurrency, thread_name=f"kvbench-{self.name}"))
        self.completer = WriteCompleter(context.concurrency, f"kvbench-{self.name}-fsync")

    @classmethod
    def check_options(cls, options: dict[str, Any], path: str) -> None:
        transfer_size_of(with_defaults(cls.options_schema, options), path)

    # -- lifecycle -------------------------------------------------------------------------------

    def open(self) -> None:
        if self.direct and not hasattr(os, "O_DIRECT"):
            raise BackendUnavailable(f"{self.label}: direct: true needs O_DIRECT, which this OS lacks")
        if not self.direct and not hasattr(os, "posix_fadvise"):
            raise BackendUnavailable(f"{self.label}: buffered reads need posix_fadvise, which this OS lacks")
        self.directory.open()
        try:
            self.engine.open()
        except UringUnavailable as error:
            self.engine.close()
            self.directory.close()
            raise BackendUnavailable(f"{self.label}: engine: io_uring is unavailable here: {error.strerror}; "
                                     f"set engine: psync") from None
        self._probe()

    def _probe(self) -> None:
        """Write, read and delete one aligned block the way entries will be (same flags, same engine),
        so a read-only filesystem or one without O_DIRECT (tmpfs on old kernels, some FUSE) fails here,
        clearly."""
        path = os.path.join(self.directory.path, f".{self.context.run_id}-probe")
        try:
            fd = os.open(path, self._write_flags, 0o644)
            try:
                self.engine.write(fd, "probe", _ProbeSource(), ALIGN, Phase(), None)
            finally:
                os.close(fd)
            fd = os.open(path, self._read_flags)
            try:
                self.engine.read(fd, "probe", DISCARD, ALIGN, Phase(), None)
            finally:
                os.close(fd)
        except OSError as error:
            hint = " (the filesystem does not support O_DIRECT; set direct: false)" \
                if self.direct and error.errno == errno.EINVAL else ""
            self.engine.close()
            self.directory.close()
            raise BackendUnavailable(f"{self.label}: cannot write files in {self.directory.path}: "
                                     f"{error.strerror or error}{hint}") from None
        finally:
            with contextlib.suppress(OSError):
                os.unlink(path)

    def close(self) -> None:
        self.engine.close()  # a ring's unreaped last commands fail their entries: nothing waits for them
        self.completer.close()  # every pending write's file is closed before the files are removed
        self._remove_files()

    # -- data path -------------------------------------------------------------------------------

    def write(self, key: str, source: ByteSource) -> IOTiming:
        entry = self._write_data(key, source)
        entry.rest.settle()
        return self._finish_write(entry)

    def write_pipelined(self, key: str, source: ByteSource) -> PendingWrite:
        """Return when the entry's data commands are done; its fsync and close run on a completion thread
        (``kvbench_core.filetiers.pipeline``) while the caller starts its next entry.  With
        ``pipeline_writes: false``, ``write`` whole (the contract's default)."""
        if not self.pipeline_writes:
            return super().write_pipelined(key, source)
        self.completer.wait(key)  # a rewrite of a key still pending: one operation on a file at a time
        entry = self._write_data(key, source)
        return self.completer.submit(key, functools.partial(self._finish_write, entry), entry.rest.settle)

    def _write_data(self, key: str, source: ByteSource) -> _OpenEntry:
        """Open the entry's file and start its commands (``Engine.start_write``): returns when the engine
        has issued its last ones; the file stays open for ``_finish_write``.  A failed write leaves no
        half-written file behind."""
        size = source.size
        phase = Phase()
        start = time.perf_counter()
        path = self.track_entry_file(key)
        fd = -1
        try:
            fd = phase.timed_syscall(os.open, path, self._write_flags, 0o644)
            rest = self.engine.start_write(fd, key, source, size, phase, self.context.io_log)
        except BaseException as error:
            if fd >= 0:
                os.close(fd)
            self.entry_file_failed(path, error)
            raise
        return _OpenEntry(path, fd, phase, start, size, rest)

    def _finish_write(self, entry: _OpenEntry) -> IOTiming:
        """Wait for the engine's last commands, truncate an O_DIRECT tail, fsync (``fsync: true``) and close
        the file: the entry is durable when this returns, and its timing runs from its first syscall to here."""
        phase, size = entry.phase, entry.size
        try:
            try:
                entry.rest.wait()
                if self.direct and size % ALIGN:
                    phase.timed_syscall(os.ftruncate, entry.fd, size)
                if self.fsync:
                    phase.timed_syscall(os.fsync, entry.fd)
            except BaseException:
                os.close(entry.fd)
                raise
            phase.timed_syscall(os.close, entry.fd)
        except BaseException as error:
            self.entry_file_failed(entry.path, error)
            raise
        return phase.timing(entry.start, time.perf_counter(), size)

    def read(self, key: str, size: int, sink: ByteSink) -> IOTiming:
        self.completer.wait(key)  # never a read of an entry before its fsync
        path = self.path_of(key)
        phase = Phase()
        start = time.perf_counter()
        fd = phase.timed_syscall(os.open, path, self._read_flags)
        try:
            if not self.direct:  # host time, as all that is not waiting on a syscall of the entry's I/O
                if self.drop_cache:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                # An entry is read whole, front to back: say so, so readahead runs ahead as fio's does
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
            self.engine.read(fd, key, sink, size, phase, self.context.io_log)
        finally:
            phase.timed_syscall(os.close, fd)
        return phase.timing(start, time.perf_counter(), size)

    def read_range(self, key: str, offset: int, out: memoryview) -> None:
        """Buffered ``preadv`` straight into the caller's buffer (which need not be aligned):
        a demotion reads what the upper tier just wrote, the page cache may serve it."""
        self.completer.wait(key)
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

    def delete(self, key: str) -> None:
        self.completer.wait(key)  # its file is closed (or already removed, had its fsync failed) first
        super().delete(key)

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
            "driver_layer": f"kernel {fs_type}{driver} via {self.engine.mechanism}",
            "engine": self.engine.name,
            "queue_depth": self.queue_depth,
            "pipeline_writes": self.pipeline_writes,
            "commands_in_flight": self.engine.commands_in_flight,
            "transfer_size": self.transfer_size,
            "fsync": self.fsync,
            "drop_cache": self.drop_cache and not self.direct,
            "direct": self.direct,
            "path": self.directory.path,
            "fs_type": fs_type,
            **location,
            **self.directory.describe(),  # dead runs' files found and removed at open
        }
