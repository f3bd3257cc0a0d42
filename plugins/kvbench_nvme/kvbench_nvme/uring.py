"""A minimal io_uring binding over the raw kernel interface: one ring with registered, page-aligned buffers.

Why our own: the ``liburing`` wheel on PyPI submits only ``bytearray``
buffers, which are not page aligned, so it cannot do O_DIRECT; Debian 12's
``liburing2`` (2.3) keeps ``io_uring_get_sqe``/``io_uring_prep_*`` as inline
functions a ctypes caller cannot reach.  The kernel interface itself is three
syscalls (``io_uring_setup``/``_enter``/``_register``, 425–427 on every
architecture with the generic syscall table) and three ``mmap``'d regions
(submission ring, completion ring, submission entries), which is all this
module touches.  No C compiler and no system package are needed.

Memory ordering.  The rings are shared with the kernel, and Python cannot issue
the acquire/release barriers liburing uses.  So the ring is set up with
``IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN`` (Linux ≥ 6.1): the
kernel then reads submissions only inside this thread's ``io_uring_enter`` and
posts completions only from it (deferred task work runs when we ask for
events), so every access to the rings is ordered by the syscall boundary on
any architecture.  On older kernels the plain setup is used on x86-64 only,
whose total store order makes the plain loads and stores liburing's barriers
reduce to; elsewhere such a kernel is refused, naming why.  A consequence of
``SINGLE_ISSUER``: a ring belongs to the thread that created it (the engine
keeps one per thread).

Buffers are ``kvbench_nvme.buffers.Region``s: page aligned, huge-page backed
from 1 MiB so a command is one segment per 2 MiB at the device.

The GIL is released inside every syscall (ctypes' ``CDLL`` does that), so a
thread waiting for completions does not block the others.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import mmap
import os
import platform
import resource
import struct
from collections.abc import Iterator

from kvbench_nvme.buffers import Region

ALIGN = 4096

SYS_IO_URING_SETUP, SYS_IO_URING_ENTER, SYS_IO_URING_REGISTER = 425, 426, 427
OP_READ_FIXED, OP_WRITE_FIXED = 4, 5
ENTER_GETEVENTS = 1 << 0
SETUP_SINGLE_ISSUER, SETUP_DEFER_TASKRUN = 1 << 12, 1 << 13
FEAT_SINGLE_MMAP = 1 << 0
REGISTER_BUFFERS = 0
OFF_SQ_RING, OFF_CQ_RING, OFF_SQES = 0, 0x8000000, 0x10000000

SQE = struct.Struct("<BBHiQQIIQHHiQQ")  # struct io_uring_sqe, 64 bytes
CQE = struct.Struct("<QiI")  # struct io_uring_cqe: user_data, res, flags
assert SQE.size == 64 and CQE.size == 16

#: Architectures whose hardware memory model makes plain loads/stores enough without DEFER_TASKRUN.
TOTAL_STORE_ORDER = {"x86_64", "amd64", "i386", "i686"}


class _SqOffsets(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint32) for name in
                ("head", "tail", "ring_mask", "ring_entries", "flags", "dropped", "array", "resv1")] + [
        ("user_addr", ctypes.c_uint64)]


class _CqOffsets(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint32) for name in
                ("head", "tail", "ring_mask", "ring_entries", "overflow", "cqes", "flags", "resv1")] + [
        ("user_addr", ctypes.c_uint64)]


class _Params(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint32) for name in
                ("sq_entries", "cq_entries", "flags", "sq_thread_cpu", "sq_thread_idle", "features", "wq_fd")] + [
        ("resv", ctypes.c_uint32 * 3), ("sq_off", _SqOffsets), ("cq_off", _CqOffsets)]


class _Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


assert ctypes.sizeof(_Params) == 120

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class UringUnavailable(OSError):
    """io_uring cannot be used here; the message names the cause (old kernel, seccomp, sysctl, memlock)."""


def _syscall(number: int, *args: int) -> int:
    """``syscall(number, *args)``, retried on EINTR; raises ``OSError`` with the errno on failure."""
    while True:
        result = _libc.syscall(ctypes.c_long(number), *(ctypes.c_long(arg) for arg in args))
        if result >= 0:
            return int(result)
        code = ctypes.get_errno()
        if code != errno.EINTR:
            raise OSError(code, os.strerror(code))


def _setup_hint(code: int) -> str:
    """Why ``io_uring_setup`` fails with ``code``, in the terms a user can act on."""
    if code == errno.ENOSYS:
        return "the kernel has no io_uring (older than 5.1) or a seccomp filter hides it (Docker's default " \
               "profile does)"
    if code == errno.EPERM:
        disabled = _read_sysctl("/proc/sys/kernel/io_uring_disabled")
        sysctl = f"kernel.io_uring_disabled is {disabled}" if disabled not in (None, "0") else None
        return sysctl or "a seccomp or LSM policy forbids io_uring for this process"
    if code == errno.ENOMEM:
        return "not enough locked memory for the rings (raise RLIMIT_MEMLOCK, ulimit -l)"
    return "the kernel refused the ring"


def _read_sysctl(path: str) -> str | None:
    try:
        with open(path) as handle:
            return handle.read().strip()
    except OSError:
        return None


def check_locked_memory(nbytes: int) -> None:
    """Refuse, naming the limit, when ``nbytes`` of registered buffers cannot be locked: the kernel charges
    them to ``RLIMIT_MEMLOCK`` unless the process may lock memory at will (root, CAP_IPC_LOCK)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    if soft == resource.RLIM_INFINITY or os.geteuid() == 0 or nbytes <= soft:
        return
    raise UringUnavailable(errno.ENOMEM, f"the rings' registered buffers need {nbytes} B of locked memory and "
                                         f"RLIMIT_MEMLOCK is {soft} B (raise ulimit -l, or lower queue_depth, "
                                         "transfer_size or the run's concurrency)")


def unavailable_reason() -> str | None:
    """Why io_uring cannot be used by this process (a ring with one registered buffer fails), or None."""
    try:
        Ring(entries=2, buffer_count=1, buffer_size=ALIGN).close()
    except OSError as error:
        return str(error)
    return None


class Ring:
    """One io_uring instance with ``buffer_count`` registered buffers of ``buffer_size`` bytes each.

    The buffers are one anonymous ``mmap`` (page aligned, so O_DIRECT can use
    them), registered once with ``IORING_REGISTER_BUFFERS`` so the kernel pins
    and maps them once instead of per command.  ``prepare`` queues a fixed-buffer
    read or write, ``enter`` submits what is queued and (optionally) waits,
    ``completions`` yields ``(user_data, result)`` of finished commands.
    """

    def __init__(self, entries: int, buffer_count: int, buffer_size: int) -> None:
        self.fd = -1
        self._maps: list[mmap.mmap] = []
        self._buffer_region: Region | None = None
        try:
            self._setup(entries)
            self._register_buffers(buffer_count, buffer_size)
        except BaseException:
            self.close()
            raise

    # -- setup -----------------------------------------------------------------------------------

    def _setup(self, entries: int) -> None:
        params = _Params()
        params.flags = SETUP_SINGLE_ISSUER | SETUP_DEFER_TASKRUN
        try:
            self.fd = _syscall(SYS_IO_URING_SETUP, entries, ctypes.addressof(params))
        except OSError as error:
            if error.errno != errno.EINVAL:
                raise UringUnavailable(error.errno, f"io_uring_setup failed: {error.strerror} "
                                                    f"({_setup_hint(error.errno)})") from None
            if platform.machine() not in TOTAL_STORE_ORDER:
                raise UringUnavailable(errno.EINVAL, "io_uring_setup refused IORING_SETUP_DEFER_TASKRUN: this "
                                                     "binding needs Linux >= 6.1 on " + platform.machine()) from None
            params = _Params()  # older kernel on x86-64: plain loads/stores are ordered enough (module doc)
            try:
                self.fd = _syscall(SYS_IO_URING_SETUP, entries, ctypes.addressof(params))
            except OSError as plain:
                raise UringUnavailable(plain.errno, f"io_uring_setup failed: {plain.strerror} "
                                                    f"({_setup_hint(plain.errno)})") from None
        self.flags = params.flags
        sq, cq = params.sq_off, params.cq_off
        sq_size = sq.array + params.sq_entries * 4
        cq_size = cq.cqes + params.cq_entries * CQE.size
        if params.features & FEAT_SINGLE_MMAP:
            sq_size = cq_size = max(sq_size, cq_size)
        sq_ring = self._map(sq_size, OFF_SQ_RING)
        cq_ring = sq_ring if params.features & FEAT_SINGLE_MMAP else self._map(cq_size, OFF_CQ_RING)
        self._sqes = self._map(params.sq_entries * SQE.size, OFF_SQES)
        self._sq_words = memoryview(sq_ring).cast("I")
        self._cq_words = memoryview(cq_ring).cast("I")
        self._cq_ring = cq_ring
        self._sq_tail_at, self._sq_head_at = sq.tail // 4, sq.head // 4
        self._cq_head_at, self._cq_tail_at = cq.head // 4, cq.tail // 4
        self._cqes_at = cq.cqes
        self.entries = params.sq_entries
        self._sq_mask = self._sq_words[sq.ring_mask // 4]
        self._cq_mask = self._cq_words[cq.ring_mask // 4]
        for index in range(self.entries):  # the index array maps slot i to entry i, once and for all
            self._sq_words[sq.array // 4 + index] = index
        self._sq_tail = self._sq_words[self._sq_tail_at]
        self._queued = 0

    def _map(self, size: int, offset: int) -> mmap.mmap:
        region = mmap.mmap(self.fd, size, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0),
                           prot=mmap.PROT_READ | mmap.PROT_WRITE, offset=offset)
        self._maps.append(region)
        return region

    def _register_buffers(self, count: int, size: int) -> None:
        stride = -(-size // ALIGN) * ALIGN
        region = Region(stride * count)  # huge-page backed from 1 MiB: one segment per 2 MiB (buffers.py)
        self._buffer_region = region
        base = region.address
        vectors = (_Iovec * count)(*(_Iovec(base + index * stride, size) for index in range(count)))
        try:
            _syscall(SYS_IO_URING_REGISTER, self.fd, REGISTER_BUFFERS, ctypes.addressof(vectors), count)
        except OSError as error:
            hint = " (registered buffers are locked memory: raise RLIMIT_MEMLOCK, ulimit -l)" \
                if error.errno == errno.ENOMEM else ""
            raise UringUnavailable(error.errno, f"io_uring buffer registration failed: {error.strerror}{hint}") \
                from None
        self.buffers = [region.view[index * stride:index * stride + size] for index in range(count)]
        self._addresses = [base + index * stride for index in range(count)]

    # -- submission and completion ---------------------------------------------------------------

    def prepare(self, write: bool, fd: int, buffer: int, buffer_offset: int, length: int, file_offset: int,
                user_data: int) -> None:
        """Queue one fixed-buffer write (or read) of ``length`` bytes at ``buffer_offset`` in buffer
        ``buffer``, at ``file_offset`` of ``fd``; submitted by the next ``enter``."""
        if self._queued >= self.entries:
            raise RuntimeError(f"io_uring submission queue full ({self.entries} entries)")
        slot = self._sq_tail & self._sq_mask
        SQE.pack_into(self._sqes, slot * SQE.size, OP_WRITE_FIXED if write else OP_READ_FIXED, 0, 0, fd,
                      file_offset, self._addresses[buffer] + buffer_offset, length, 0, user_data, buffer, 0, 0, 0, 0)
        self._sq_tail = (self._sq_tail + 1) & 0xFFFFFFFF
        self._queued += 1

    @property
    def queued(self) -> int:
        """Commands prepared and not yet submitted."""
        return self._queued

    def enter(self, wait_for: int = 0) -> None:
        """Submit every queued command and, with ``wait_for``, wait until that many have completed
        (or any are ready, with 0: deferred completions are only posted when we ask for events)."""
        self._sq_words[self._sq_tail_at] = self._sq_tail  # publish the queued entries
        queued, self._queued = self._queued, 0
        submitted = _syscall(SYS_IO_URING_ENTER, self.fd, queued, wait_for, ENTER_GETEVENTS, 0, 0)
        if submitted != queued:  # only on a broken ring (e.g. an entry the kernel could not even read)
            raise OSError(errno.EIO, f"io_uring submitted {submitted} of {queued} commands")

    def completions(self) -> Iterator[tuple[int, int]]:
        """``(user_data, result)`` of each completed command, oldest first; ``result`` is bytes moved
        or ``-errno``.  Each is consumed (its slot handed back to the kernel) once yielded."""
        head = self._cq_words[self._cq_head_at]
        while head != self._cq_words[self._cq_tail_at]:
            at = self._cqes_at + (head & self._cq_mask) * CQE.size
            user_data, result, _flags = CQE.unpack_from(self._cq_ring, at)
            head = (head + 1) & 0xFFFFFFFF
            self._cq_words[self._cq_head_at] = head
            yield user_data, result

    def close(self) -> None:
        """Unmap and close everything; the kernel finishes (or cancels) what is still in flight and keeps
        the registered pages pinned until then, so this is safe even after a failure."""
        for view in ("_sq_words", "_cq_words"):
            if hasattr(self, view):
                getattr(self, view).release()
        for region in self._maps:
            with contextlib.suppress(BufferError):  # a view still held elsewhere: unmapped when collected
                region.close()
        self._maps = []
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        if self._buffer_region is not None:
            for buffer in getattr(self, "buffers", []):
                buffer.release()
            self.buffers = []
            self._buffer_region.close()
            self._buffer_region = None
