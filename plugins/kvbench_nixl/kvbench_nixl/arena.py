"""The tier's transfer memory: one region registered with NIXL at ``open`` and reused by every operation.

NIXL moves bytes only between *registered* memory and storage, and registering
costs (pinning, and for GDS a cuFile buffer registration), so an engine
registers its KV pool once.  The tier does the same: ``slots x pieces``
buffers of ``piece_bytes`` each (4 KiB-aligned), registered once, handed to
one operation at a time through a ``Lane`` (an agent, its arena, one slot).
An operation holds one lane, so the memory is bounded by the operations in
flight (``concurrency`` lanes), never by entry sizes; a thread beyond that
waits for a lane (the wait is in the operation's total, never in its device
time).

``DRAM``: the region is an anonymous ``mmap`` (page-aligned); sources fill and
sinks read it directly, so a byte is touched once on the host.
``VRAM``: the region is a CUDA tensor, and each slot has a pinned host twin
that sources fill and sinks read; the host<->device copy is host time, as in
the gds tier.  Only the VRAM arena imports torch.
"""

from __future__ import annotations

import contextlib
import mmap
import queue
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from kvbench_nixl.library import Agent

ALIGN = 4096


def align_up(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


@dataclass
class Slot:
    """One operation's buffers: ``pieces`` registered pieces and the host view sources fill."""

    index: int
    address: int  # registered address of piece 0 (a device pointer for VRAM)
    host: memoryview  # DRAM: the registered bytes themselves; VRAM: the pinned twin
    device: Any = None  # VRAM: this slot's tensor; None for DRAM


class Arena:
    """``slots`` slots of ``pieces x piece_bytes``, registered with the agent's backend once."""

    def __init__(self, agent: Agent, *, memory: str, slots: int, pieces: int, piece_bytes: int,
                 device: str = "cuda") -> None:
        self.agent = agent
        self.memory = memory
        self.piece_bytes = align_up(piece_bytes)
        self.slot_bytes = self.piece_bytes * pieces
        self.nbytes = self.slot_bytes * slots
        self.dev_id = 0
        if memory == "DRAM":
            self._region = mmap.mmap(-1, self.nbytes)
            self._keep: Any = np.frombuffer(self._region, dtype=np.uint8)
            base = self._keep.ctypes.data
            host = memoryview(self._region)
            slot_list = [Slot(i, base + i * self.slot_bytes, host[i * self.slot_bytes:(i + 1) * self.slot_bytes])
                         for i in range(slots)]
        else:
            import torch

            tensor = torch.empty(self.nbytes, dtype=torch.uint8, device=device)
            twin = torch.empty(self.nbytes, dtype=torch.uint8, pin_memory=True)
            self._keep = (tensor, twin)
            self.dev_id = tensor.get_device()
            base, host = tensor.data_ptr(), memoryview(twin.numpy())
            slot_list = [Slot(i, base + i * self.slot_bytes, host[i * self.slot_bytes:(i + 1) * self.slot_bytes],
                              tensor[i * self.slot_bytes:(i + 1) * self.slot_bytes]) for i in range(slots)]
        self.registration = agent.register([(base, self.nbytes, self.dev_id, "")], memory)
        self.slots = slot_list

    def piece(self, slot: Slot, index: int, n: int) -> tuple[int, int, int]:
        """The local NIXL descriptor ``(address, length, dev_id)`` of piece ``index`` of ``slot``."""
        return (slot.address + index * self.piece_bytes, n, self.dev_id)

    def host_piece(self, slot: Slot, index: int, n: int) -> memoryview:
        """Host bytes of piece ``index``: where a source fills and a sink reads."""
        start = index * self.piece_bytes
        return slot.host[start:start + n]

    def to_device(self, slot: Slot, index: int, n: int) -> None:
        """VRAM: copy the piece's host twin into the registered GPU memory (no-op for DRAM)."""
        if slot.device is not None:
            self._copy(slot, index, n, to_device=True)

    def from_device(self, slot: Slot, index: int, n: int) -> None:
        """VRAM: bring the piece back to its host twin, for a sink that inspects bytes."""
        if slot.device is not None:
            self._copy(slot, index, n, to_device=False)

    def _copy(self, slot: Slot, index: int, n: int, *, to_device: bool) -> None:
        import torch

        start = index * self.piece_bytes
        device = slot.device[start:start + n]
        host = torch.frombuffer(slot.host[start:start + n], dtype=torch.uint8)
        if to_device:
            device.copy_(host)
        else:
            host.copy_(device)
        torch.cuda.synchronize(device.device)

    def close(self) -> None:
        """Deregister the region and drop it (no operation may be using a slot)."""
        self.agent.deregister(self.registration)
        self.slots = []
        self._keep = None  # the mmap or tensors go with their last reference


@dataclass
class Lane:
    """What one operation holds: an agent, the arena registered with it, and one slot of that arena."""

    agent: Agent
    arena: Arena
    slot: Slot


class Lanes:
    """``count`` lanes for concurrent operations: one agent each (``shared=False``), or one agent whose
    arena has ``count`` slots (``shared=True``).

    Why an agent per lane by default: an agent's POSIX plugin has one io queue behind one lock, and
    NIXL's STRICT thread-sync mode serialises the agent's calls, so operations of different threads
    on one agent wait for each other (measured: reads of two threads at 0.73 of the nvme tier with
    one shared agent, 1.00 with one agent each; docs/PERFORMANCE.md).  An inference engine likewise
    runs one agent per worker.
    """

    def __init__(self, make_agent: Callable[[int], Agent], *, count: int, shared: bool, memory: str, pieces: int,
                 piece_bytes: int, device: str) -> None:
        self.agents: list[Agent] = []
        self.arenas: list[Arena] = []
        self._free: queue.SimpleQueue[Lane] = queue.SimpleQueue()
        try:
            for index in range(1 if shared else count):
                agent = make_agent(index)
                self.agents.append(agent)
                arena = Arena(agent, memory=memory, slots=count if shared else 1, pieces=pieces,
                              piece_bytes=piece_bytes, device=device)
                self.arenas.append(arena)
                for slot in arena.slots:
                    self._free.put(Lane(agent, arena, slot))
        except BaseException:
            self.close()
            raise

    @property
    def nbytes(self) -> int:
        """Registered payload memory, all lanes together."""
        return sum(arena.nbytes for arena in self.arenas)

    @contextlib.contextmanager
    def lane(self) -> Iterator[Lane]:
        """A free lane for the duration of one operation (waits while all are in use)."""
        lane = self._free.get()
        try:
            yield lane
        finally:
            self._free.put(lane)

    def close(self) -> None:
        for arena in self.arenas:
            arena.close()
        self.arenas, self.agents = [], []
        self._free = queue.SimpleQueue()
