"""DRAM (``cpu``) and GPU-memory (``gpu``) tiers.

A memory tier really holds the bytes (that memory *is* the cache content,
bounded by the tier's capacity).  Writes fill it piece by piece from the
source.  Reads copy: a restore from DRAM or HBM ends with the KV in the
engine's own buffer, so each block is copied into a destination (for DRAM a
ring of buffers larger than the last-level cache, as the GPU-side memory the KV
is restored into is; ``kvbench_core.builtins.dram_buffers``) and only that copy
is handed to the sink.  A read that handed out views of the
stored blocks would cost nothing and report bandwidths far above memcpy's.
Host time is the whole operation (there is no device to wait for in DRAM);
for the GPU tier, device time is the copy on the device (and, when the sink
needs the bytes on the host, the device->host copy).
"""

from __future__ import annotations

import threading
import time
from typing import Any, ClassVar

import numpy as np

from kvbench_core.builtins.dram_buffers import BLOCK, BlockArena, RestoreRing
from kvbench_core.contracts.backend import BackendContext, ByteSink, ByteSource, DiscardSink, IOTiming, StorageBackend
from kvbench_core.contracts.errors import BackendUnavailable
from kvbench_core.contracts.pieces import PieceBackend
from kvbench_core.runspec.memlimit import host_memory_limit

PIECE = 16 << 20  # how much a memory tier moves per source/sink call


class CPUMemoryBackend(PieceBackend):
    """DRAM tier on the backend kit: an entry is a list of recycled 4 MiB blocks held by the process.

    A block is one command.  The source fills the blocks in place (``fills_in_place``: the fill is the
    write's memcpy, no second copy through a piece buffer) and the commands are booked as host time
    (``piece_time``: no device to wait for).  The kit's read hands one reused piece buffer to the sink; a
    restore here copies into the next slot of a ring larger than the last-level cache instead, so ``read``
    is the tier's own, through the kit's ``load_piece`` command and its log record; the kit's ``read_range``
    cuts at piece (block) boundaries, a command per block touched."""

    name = "cpu"
    volatile = True
    transfer_size = BLOCK
    piece_time = "host"
    fills_in_place = True
    options_schema: ClassVar[dict[str, Any]] = {
        "type": "object", "additionalProperties": False,
        "properties": {
            "prefault": {"type": "boolean", "default": True,
                         "description": "touch the tier's whole capacity at set-up, as an engine allocates its "
                                        "KV pool once; false: blocks are faulted in by the writes that first "
                                        "use them (write latency then includes page faults)"},
        },
    }

    def __init__(self, options: dict[str, Any], context: BackendContext) -> None:
        super().__init__(options, context)
        self._entries: dict[str, list[np.ndarray]] = {}
        self._lock = threading.Lock()
        self._arena = BlockArena()
        self._restore = RestoreRing.larger_than_cache()  # the destinations reads copy into
        self._prefaulted = {"bytes": 0, "seconds": 0.0}

    def open(self) -> None:
        self._restore.fill()

    def reserve(self, capacity: int) -> None:
        """Called by the run's set-up with the tier's capacity: pre-fault the arena (``prefault``)."""
        if not self.options.get("prefault"):  # a subclass with its own options schema has no prefault option
            return
        start = time.perf_counter()
        self._arena.reserve(capacity // BLOCK)
        self._prefaulted = {"bytes": capacity // BLOCK * BLOCK, "seconds": round(time.perf_counter() - start, 3)}

    def begin_write(self, key: str, size: int) -> tuple[str, list[np.ndarray]]:
        # Whole blocks come recycled from the arena; a tail gets an exact-size array, so a small entry
        # costs its size, not a 4 MiB block.
        full, tail = divmod(size, BLOCK)
        return key, self._arena.take(full) + ([np.empty(tail, dtype=np.uint8)] if tail else [])

    def piece_view(self, handle: tuple[str, list[np.ndarray]], offset: int, size: int) -> memoryview:
        return memoryview(handle[1][offset // BLOCK])[:size]

    def store_piece(self, handle: tuple[str, list[np.ndarray]], offset: int, data: memoryview) -> None:
        """Nothing left to do: the source filled the block itself (``piece_view``)."""

    def end_write(self, handle: tuple[str, list[np.ndarray]]) -> None:
        key, blocks = handle
        with self._lock:
            old = self._entries.pop(key, None)
            self._entries[key] = blocks
        if old:
            self._arena.give(old)

    def abort_write(self, handle: tuple[str, list[np.ndarray]]) -> None:
        self._arena.give(handle[1])  # the half-filled blocks go back to the arena, never published

    def load_piece(self, key: str, offset: int, out: memoryview) -> None:
        index, within = divmod(offset, BLOCK)  # no piece spans two blocks: the kit cuts at piece boundaries
        np.copyto(np.frombuffer(out, dtype=np.uint8), self._entry(key)[index][within:within + len(out)])

    def read(self, key: str, size: int, sink: ByteSink) -> IOTiming:
        start = time.perf_counter()
        self._entry(key)  # a missing entry raises before any slot is taken
        ring = self._restore
        commands = 0
        for offset in range(0, size, BLOCK):
            destination = ring.take()
            try:
                piece = memoryview(destination)[:min(BLOCK, size - offset)]
                self._command(key, "read", offset, piece, self.load_piece, key, offset, piece)  # the restore
                sink.consume(offset, piece)
            finally:
                ring.give(destination)
            commands += 1
        return self._timing(start, 0.0, size, commands)

    def delete(self, key: str) -> None:
        with self._lock:
            blocks = self._entries.pop(key, None)
        if blocks:
            self._arena.give(blocks)

    def capacity_bytes(self) -> int | None:
        """``auto``: half of what the host can give (MemAvailable, capped by the cgroup's limit), leaving
        the rest to the run's own buffers and everything else on the machine."""
        limit = host_memory_limit()
        return None if limit is None else limit.nbytes // 2

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name, "medium": "DRAM",
                "access_mechanism": "process memory (memcpy into recycled 4 MiB blocks; reads memcpy "
                                    "into a ring of restore buffers larger than the last-level cache)",
                "restore_ring_bytes": self._restore.nbytes, "prefaulted_bytes": self._prefaulted["bytes"],
                "prefault_s": self._prefaulted["seconds"]}

    def close(self) -> None:
        with self._lock:
            self._entries.clear()
        self._arena.clear()
        self._restore.clear()

    def _entry(self, key: str) -> list[np.ndarray]:
        try:
            return self._entries[key]
        except KeyError:
            raise KeyError(f"no entry {key!r} in tier {self.context.tier_name!r}") from None


class GPUMemoryBackend(StorageBackend):
    """GPU-memory tier on torch tensors.  ``device`` defaults to ``cuda``; ``cpu`` exercises the
    logic without a GPU (tests), and is reported as such so it is never mistaken for HBM."""

    name = "gpu"
    volatile = True
    holds_device_tensors = True
    transfer_size = PIECE
    requires: ClassVar[dict[str, str]] = {"torch": "pip install 'kvbench-core[gpu]' (torch)"}
    options_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "device": {"type": "string", "pattern": "^(cuda(:[0-9]+)?|cpu)$", "default": "cuda",
                       "description": "torch device holding the entries; 'cpu' is for testing only"},
        },
    }

    def __init__(self, options: dict[str, Any], context: BackendContext) -> None:
        super().__init__(options, context)
        self.device_name = self.options["device"]
        self._entries: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._staging = threading.local()

    def open(self) -> None:
        import torch

        self._torch = torch
        if self.device_name.startswith("cuda") and not torch.cuda.is_available():
            raise BackendUnavailable(
                f"{self.context.label('gpu')}: CUDA is not available "
                f"(torch {torch.__version__}, built for CUDA {torch.version.cuda or 'none'}); "
                "install a CUDA build of torch on a machine with an NVIDIA driver, or set the tier's "
                "capacity to 0"
            )
        self.device = torch.device(self.device_name)

    def _pinned(self) -> Any:
        buffer = getattr(self._staging, "buffer", None)
        if buffer is None:
            pin = self.device.type == "cuda"
            buffer = self._torch.empty(PIECE, dtype=self._torch.uint8, pin_memory=pin)
            self._staging.buffer = buffer
        return buffer

    def write(self, key: str, source: ByteSource) -> IOTiming:
        torch = self._torch
        start = time.perf_counter()
        tensor = torch.empty(source.size, dtype=torch.uint8, device=self.device)
        staging = self._pinned()
        staging_view = memoryview(staging.numpy())
        log = self.context.io_log
        host = device = 0.0
        for offset in range(0, source.size, PIECE):
            n = min(PIECE, source.size - offset)
            t0 = time.perf_counter()
            source.fill(offset, staging_view[:n])
            t1 = time.perf_counter()
            tensor[offset:offset + n].copy_(staging[:n])
            self._sync()
            if log is not None:
                log.record(key, "write", offset, n, t1, time.perf_counter())
            host += t1 - t0
            device += time.perf_counter() - t1
        with self._lock:
            self._entries[key] = tensor
        return IOTiming(time.perf_counter() - start, host, device, source.size, -(-source.size // PIECE))

    def _restore_buffer(self) -> Any:
        """This thread's device buffer reads copy into (the KV restored where the engine needs it)."""
        buffer = getattr(self._staging, "restore", None)
        if buffer is None:
            buffer = self._torch.empty(PIECE, dtype=self._torch.uint8, device=self.device)
            self._staging.restore = buffer
        return buffer

    def read(self, key: str, size: int, sink: ByteSink) -> IOTiming:
        start = time.perf_counter()
        tensor = self._entry(key)
        restore = self._restore_buffer()
        # The bytes cross to the host only when the sink looks at them (verification): a restore stays on
        # the device, and a discarding sink must not turn a GPU read into a PCIe benchmark.
        to_host = not isinstance(sink, DiscardSink)
        staging = self._pinned() if to_host else None
        log = self.context.io_log
        host = device = 0.0
        for offset in range(0, size, PIECE):
            n = min(PIECE, size - offset)
            t0 = time.perf_counter()
            restore[:n].copy_(tensor[offset:offset + n])
            if staging is not None:
                staging[:n].copy_(restore[:n])
            self._sync()
            t1 = time.perf_counter()
            if log is not None:
                log.record(key, "read", offset, n, t0, t1)
            if staging is not None:
                sink.consume(offset, memoryview(staging.numpy())[:n])
            device += t1 - t0
            host += time.perf_counter() - t1
        return IOTiming(time.perf_counter() - start, host, device, size, -(-size // PIECE))

    def read_range(self, key: str, offset: int, out: memoryview) -> None:
        tensor = self._entry(key)
        n = len(out)
        host = self._torch.frombuffer(out, dtype=self._torch.uint8)
        t0 = time.perf_counter()
        host.copy_(tensor[offset:offset + n])
        self._sync()
        if self.context.io_log is not None:
            self.context.io_log.record(key, "read", offset, n, t0, time.perf_counter())

    def tensor(self, key: str) -> Any:
        """The entry's device tensor, for GPU-native demotion (e.g. straight into the gds tier)."""
        return self._entry(key)

    def delete(self, key: str) -> None:
        with self._lock:
            self._entries.pop(key, None)

    def capacity_bytes(self) -> int | None:
        if self.device.type != "cuda":
            return None
        free, _total = self._torch.cuda.mem_get_info(self.device)
        return int(free * 0.9)

    def describe(self) -> dict[str, Any]:
        info: dict[str, Any] = {"backend": self.name, "device": str(self.device_name)}
        if self.device_name.startswith("cuda") and hasattr(self, "device"):
            info["medium"] = "GPU HBM"
            info["gpu_model"] = self._torch.cuda.get_device_name(self.device)
        else:
            info["medium"] = "host memory via torch (test device, not HBM)"
        return info

    def close(self) -> None:
        with self._lock:
            self._entries.clear()

    def _sync(self) -> None:
        if self.device.type == "cuda":
            self._torch.cuda.synchronize(self.device)

    def _entry(self, key: str) -> Any:
        try:
            return self._entries[key]
        except KeyError:
            raise KeyError(f"no entry {key!r} in tier {self.context.tier_name!r}") from None
