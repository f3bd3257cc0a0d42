"""The GPUDirect Storage tier: one file per entry, written and read from GPU memory with kvikio's CuFile.

Data path.  Every thread owns a device staging buffer of ``transfer_size``
bytes (and, when bytes must cross to the host, a pinned host buffer of the same
size).  A write stages one piece in GPU memory and ``CuFile.pwrite``s it; kvikio
splits each pwrite into ``task_size`` tasks on its ``num_threads`` pool, so
``IOTiming.commands`` counts those cuFile tasks.  How a piece gets into GPU
memory depends on where the entry's bytes come from:

* ``payload_origin: host`` — the source fills the pinned host buffer, one
  host→device copy follows (the path of a CPU-generated payload);
* ``payload_origin: gpu`` — the payload generator's bytes are rendered on the
  GPU (``kvbench_gds.gpu_payload``): no host bytes at all.  Sources that are
  not generator payloads (a demotion through ``read_range`` of a host tier)
  still take the host path, and ``describe()`` counts both;
* ``write_tensor(key, tensor)`` — an entry that already lives in GPU memory
  (``GPUMemoryBackend.tensor(key)``) is written straight from that tensor:
  GPU → NVMe eviction without a host bounce.

A read ``pread``s each piece into the device buffer — the KV cache lands in
GPU memory, where an engine needs it.  Only a sink that inspects the bytes
(verification) costs an extra device→host copy; the default discarding sink
does not.

L4 split.  ``device`` = time blocked in cuFile (pwrite/pread futures), in
``fsync`` and in opening the file; ``host`` = staging (fill + host→device copy,
or GPU rendering), the device→host copy for an inspecting sink, and the page
cache drop.  The parts are disjoint intervals of the calling thread.

Honesty.  kvikio and cuFile both fall back to POSIX I/O silently.  ``open()``
reads back what kvikio decided (``kvbench_gds.probe``) and ``describe()`` says
``gds: true`` only for cuFile DMA on a GDS filesystem; ``require_gds: true``
turns any fallback into a ``BackendUnavailable`` before the run.

Page cache.  cuFile's DMA path is O_DIRECT.  On a fallback path with
``bypass_page_cache: true`` each write ends with ``fsync`` and
``posix_fadvise(DONTNEED)`` and each read starts with the same drop, so reads
reach the device; ``describe()`` states which applies.

Safety and cleanup reuse the file tiers' ``TierDirectory`` and ``EntryFilesBackend``: files
are ``<path>/<run_id>-<key>.kv``, ``close`` removes what this backend created.

The options and their page-size checks are ``kvbench_gds.options``; loading the
driver, kvikio and torch ``kvbench_gds.probe``; the per-thread staging buffers
``kvbench_gds.staging``.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from typing import Any, ClassVar

from kvbench_core.contracts.backend import BackendContext, ByteSink, ByteSource, DiscardSink, IOTiming, check_key
from kvbench_core.contracts.errors import BackendUnavailable
from kvbench_core.contracts.payload import EntryPayload
from kvbench_core.contracts.validation import with_defaults
from kvbench_core.filetiers.directory import TierDirectory
from kvbench_core.filetiers.entry_files import EntryFilesBackend
from kvbench_core.filetiers.fsinfo import describe_location
from kvbench_gds.options import OPTIONS_SCHEMA, PAGE_SIZED, page_multiple
from kvbench_gds.probe import (
    AccessPath,
    DriverAwareRequirements,
    KvikioStatus,
    configure_kvikio,
    decide_access,
    load_gpu_stack,
    round_trip,
)
from kvbench_gds.staging import Staging


class GDSBackend(EntryFilesBackend):
    """KV entries as files, moved between GPU memory and storage by kvikio (cuFile when GDS is there)."""

    name = "gds"
    writes_device_tensors = True
    requires = DriverAwareRequirements()  # evaluated at selection: names the driver when that is the blocker
    options_schema: ClassVar[dict[str, Any]] = OPTIONS_SCHEMA

    def __init__(self, options: dict[str, Any], context: BackendContext) -> None:
        super().__init__(options, context)
        self.label = context.label(self.name)
        self.device_name: str = self.options["device"]
        self.num_threads: int = self.options["num_threads"]
        self.compat_mode: str = self.options["compat_mode"]
        self.require_gds: bool = self.options["require_gds"]
        self.bypass_page_cache: bool = self.options["bypass_page_cache"]
        self.fsync: bool = self.options["fsync"]
        self.payload_origin: str = self.options["payload_origin"]
        self.transfer_size = page_multiple(self.options, "transfer_size", context.options_where)
        self.task_size = page_multiple(self.options, "task_size", context.options_where)
        self.directory = TierDirectory(self.options["path"], check_key(context.run_id),
                                       allow_nonempty=False, label=self.label)
        self.status: KvikioStatus | None = None
        self.access: AccessPath | None = None
        self.staging: Staging | None = None  # made at open(), once torch and the device are known
        self._lock = threading.Lock()
        self._noise: Any = None  # DeviceNoise of the run's pool, made on the first GPU-origin write
        self._writes: Counter[str] = Counter()

    @classmethod
    def check_options(cls, options: dict[str, Any], path: str) -> None:
        full = with_defaults(cls.options_schema, options)
        for option in PAGE_SIZED:
            page_multiple(full, option, path)

    # -- lifecycle -------------------------------------------------------------------------------

    def open(self) -> None:
        """Check driver → kvikio → torch → device (the order that names the real blocker), then
        configure kvikio, decide the access path and prove it with one aligned round trip."""
        stack = load_gpu_stack(self.label, self.device_name)
        self._kvikio, self._torch, self.device = stack.kvikio, stack.torch, stack.device
        self.staging = Staging(stack.torch, stack.device, self.transfer_size)
        self.directory.open()
        try:
            self.status = configure_kvikio(self._kvikio, compat_mode=self.compat_mode, num_threads=self.num_threads,
                                           task_size=self.task_size)
            filesystem = describe_location(self.directory.path)["filesystem"]
            fs_type = filesystem["type"] if isinstance(filesystem, dict) else None
            self.access = decide_access(device_is_cuda=self.device.type == "cuda", status=self.status,
                                        filesystem=fs_type)
            if self.require_gds and not self.access.gds:
                raise BackendUnavailable(f"{self.label}: require_gds is set but I/O would take "
                                         f"{self.access.mechanism}: {self.access.reason}")
            round_trip(stack, self._buffers, os.path.join(self.directory.path, f".{self.context.run_id}-probe"),
                       label=self.label, mechanism=self.access.mechanism)
        except BaseException:
            self.directory.close()
            raise

    def close(self) -> None:
        with self._lock:
            self._noise = None
        if self.staging is not None:
            self.staging.release()  # the staging buffers (GPU memory) of every thread
        self._remove_files()

    # -- data path -------------------------------------------------------------------------------

    @property
    def _buffers(self) -> Staging:
        assert self.staging is not None, "open() the tier first"
        return self.staging

    def _device_noise(self, payload: EntryPayload) -> Any:
        with self._lock:
            if self._noise is None or self._noise.pool is not payload.pool:
                from kvbench_gds.gpu_payload import DeviceNoise

                self._noise = DeviceNoise(payload.pool, self.device, self.transfer_size)
            return self._noise

    def _tasks(self, nbytes: int) -> int:
        return max(1, -(-nbytes // self.task_size))

    def _stage(self, source: ByteSource, offset: int, n: int, on_gpu: bool) -> Any:
        """Put the source's bytes ``[offset, offset + n)`` into the device buffer; return that slice."""
        piece = self._buffers.device_buffer()[:n]
        if on_gpu:
            with self._buffers.gpu_work():
                self._noise.render(source.entry_id, offset, piece)
        else:
            host, view = self._buffers.host_buffer()
            source.fill(offset, view[:n])
            with self._buffers.gpu_work():
                piece.copy_(host[:n], non_blocking=True)
        return piece

    def write(self, key: str, source: ByteSource) -> IOTiming:
        on_gpu = self.payload_origin == "gpu" and isinstance(source, EntryPayload)
        if on_gpu:
            self._device_noise(source)
        with self._lock:
            self._writes["gpu_rendered" if on_gpu else "host_staged"] += 1

        def pieces(handle: Any) -> tuple[float, float, int]:
            host = device = 0.0
            commands = 0
            for offset in range(0, source.size, self.transfer_size):
                n = min(self.transfer_size, source.size - offset)
                t0 = time.perf_counter()
                piece = self._stage(source, offset, n, on_gpu)
                t1 = time.perf_counter()
                self._checked(handle.pwrite(piece, n, offset, self.task_size).get(), n, key, offset)
                host += t1 - t0
                device += time.perf_counter() - t1
                self._log(key, "write", offset, n, t1)
                commands += self._tasks(n)
            return host, device, commands

        return self._write_file(key, source.size, pieces)

    def write_tensor(self, key: str, tensor: Any) -> IOTiming:
        """Write an entry that already lives in GPU memory (a torch tensor or CuPy array) straight
        to storage: the GPU → NVMe eviction path, no host bounce.

        The cache calls it when demoting from the ``gpu`` tier:
        ``gds.write_tensor(key, gpu_tier.tensor(key))`` instead of
        ``write(key, source_reading_gpu_tier)``.  The tensor's bytes are the entry.
        """
        torch_tensor = isinstance(tensor, self._torch.Tensor)
        flat = tensor.reshape(-1).view(self._torch.uint8) if torch_tensor else tensor  # CuPy: as it is
        nbytes = int(flat.nbytes)
        with self._lock:
            self._writes["from_gpu_tensor"] += 1

        def whole(handle: Any) -> tuple[float, float, int]:
            t0 = time.perf_counter()
            self._checked(handle.pwrite(flat, nbytes, 0, self.task_size).get(), nbytes, key, 0)
            self._log(key, "write", 0, nbytes, t0)
            return 0.0, time.perf_counter() - t0, self._tasks(nbytes)

        return self._write_file(key, nbytes, whole)

    def _write_file(self, key: str, size: int, body: Any) -> IOTiming:
        """Open (truncate) the entry's file, run ``body(handle) -> (host, device, commands)``, fsync and
        drop cached pages as configured.  A failed write leaves no half-written file behind."""
        start = time.perf_counter()
        with self.new_entry_file(key) as path, self._kvikio.CuFile(path, "w") as handle:
            opened = time.perf_counter()
            host, device, commands = body(handle)
            t0 = time.perf_counter()
            if self.fsync or self._drop_cache:
                os.fsync(handle.fileno())
            device += time.perf_counter() - t0 + (opened - start)
            if self._drop_cache:
                t0 = time.perf_counter()
                os.posix_fadvise(handle.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
                host += time.perf_counter() - t0
        return IOTiming(time.perf_counter() - start, host, device, size, commands)

    @property
    def _drop_cache(self) -> bool:
        """Dropping pages is needed only where the page cache is in the path (not cuFile DMA)."""
        return self.bypass_page_cache and not (self.access is not None and self.access.gds)

    def read(self, key: str, size: int, sink: ByteSink) -> IOTiming:
        inspect = not isinstance(sink, DiscardSink)  # the discard sink needs no bytes on the host
        start = time.perf_counter()
        host = device = 0.0
        commands = 0
        with self._kvikio.CuFile(self.path_of(key), "r") as handle:
            device += time.perf_counter() - start
            if self._drop_cache:
                t0 = time.perf_counter()
                os.posix_fadvise(handle.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
                host += time.perf_counter() - t0
            buffer = self._buffers.device_buffer()
            for offset in range(0, size, self.transfer_size):
                n = min(self.transfer_size, size - offset)
                t0 = time.perf_counter()
                self._checked(handle.pread(buffer[:n], n, offset, self.task_size).get(), n, key, offset)
                t1 = time.perf_counter()
                device += t1 - t0
                self._log(key, "read", offset, n, t0)
                commands += self._tasks(n)
                if inspect:
                    pinned, view = self._buffers.host_buffer()
                    with self._buffers.gpu_work():
                        pinned[:n].copy_(buffer[:n], non_blocking=True)
                    sink.consume(offset, view[:n])
                    host += time.perf_counter() - t1
        return IOTiming(time.perf_counter() - start, host, device, size, commands)

    def read_range(self, key: str, offset: int, out: memoryview) -> None:
        """Read into the caller's host buffer (the source side of a demotion; kvikio handles host memory)."""
        import numpy as np

        target = np.frombuffer(out, dtype=np.uint8)
        with self._kvikio.CuFile(self.path_of(key), "r") as handle:
            self._checked(handle.pread(target, len(out), offset, self.task_size).get(), len(out), key, offset)

    @staticmethod
    def _checked(moved: int, expected: int, key: str, offset: int) -> None:
        if moved != expected:
            raise OSError(f"kvikio moved {moved} of {expected} bytes of {key!r} at offset {offset}")

    def _log(self, key: str, op: str, offset: int, nbytes: int, started: float) -> None:
        if self.context.io_log is not None:
            self.context.io_log.record(key, op, offset, nbytes, started, time.perf_counter())

    # -- declaration -----------------------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        info: dict[str, Any] = {
            "backend": self.name,
            "medium": "files on a local filesystem, moved to and from GPU memory",
            "device": self.device_name,
            "transfer_size": self.transfer_size,
            "fsync": self.fsync,
            "payload_origin": self.payload_origin,
            "writes": dict(self._writes),
            "path": self.directory.path,
        }
        if self.access is None:  # not opened: say nothing about a path that was never taken
            return {**info, "gds": False, "access_mechanism": "not opened"}
        if self.access.gds:
            page_cache = "bypassed (cuFile DMA, O_DIRECT)"
        elif self.bypass_page_cache:
            page_cache = "dropped (fsync + posix_fadvise DONTNEED after each write and before each read)"
        else:
            page_cache = "used (reads may be served from memory)"
        gpu = self._torch.cuda.get_device_name(self.device) if self.device.type == "cuda" else None
        return {
            **info,
            "gds": self.access.gds,
            "access_mechanism": self.access.mechanism,
            "not_gds_because": self.access.reason or None,
            "page_cache": page_cache,
            "gpu_model": gpu,
            **(self.status.as_dict() if self.status else {}),
            **describe_location(self.directory.path),
        }
