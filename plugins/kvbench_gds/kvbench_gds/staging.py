"""Each thread's staging memory for the gds tier: a device buffer, a pinned host buffer, a CUDA stream.

Created on a thread's first use and reused for every piece after it, never one
per operation: the benchmark measures cuFile, not the allocator.  A thread's
torch work runs on its own stream and is waited for before kvikio touches the
memory from its own threads; per-thread streams keep threads from waiting on
each other.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any


class Staging:
    """The per-thread buffers of ``transfer_size`` bytes on ``device`` (and pinned on the host)."""

    def __init__(self, torch: Any, device: Any, transfer_size: int) -> None:
        self.torch, self.device, self.transfer_size = torch, device, transfer_size
        self._local = threading.local()

    def device_buffer(self) -> Any:
        """This thread's device staging buffer (allocated on first use, reused afterwards)."""
        buffer = getattr(self._local, "device", None)
        if buffer is None:
            buffer = self.torch.empty(self.transfer_size, dtype=self.torch.uint8, device=self.device)
            self._local.device = buffer
        return buffer

    def host_buffer(self) -> tuple[Any, memoryview]:
        """This thread's pinned host buffer and a memoryview of it (the bridge to sources and sinks)."""
        buffer = getattr(self._local, "host", None)
        if buffer is None:
            pinned = self.device.type == "cuda"
            buffer = self.torch.empty(self.transfer_size, dtype=self.torch.uint8, pin_memory=pinned)
            self._local.host = buffer
            self._local.host_view = memoryview(buffer.numpy())
        return buffer, self._local.host_view

    @contextlib.contextmanager
    def gpu_work(self) -> Iterator[None]:
        """Run torch ops on this thread's own CUDA stream and wait for them."""
        if self.device.type != "cuda":
            yield
            return
        stream = getattr(self._local, "stream", None)
        if stream is None:
            stream = self._local.stream = self.torch.cuda.Stream(self.device)
        with self.torch.cuda.stream(stream):
            yield
        stream.synchronize()

    def release(self) -> None:
        """Drop every thread's buffers (GPU memory): each thread allocates afresh on its next use."""
        self._local = threading.local()
