"""``template-memory``: KV entries held as ``bytearray``s in a dict — the smallest correct tier.

It is written on kvbench's backend kit, ``PieceBackend``: the tier implements its piece commands
(``store_piece``, ``load_piece``), the write handle's life (``begin_write`` returns what the pieces go to,
``end_write`` publishes the entry whole) and ``delete``; the kit derives ``write``/``read``/``read_range``,
the piece loop, the host/device timing, a per-command latency record and the run's cancellation point, and
calls ``abort_write`` when a write fails half-way (here the default: an unpublished buffer is just dropped).
Time inside the piece commands is device time: for a real tier that is the syscall or the round trip; here
it is a memcpy.  Thread safety: kvbench never uses one key from two threads at once, and a dict's single
assignment, ``pop`` and ``clear`` are atomic, so the dict needs no lock.
"""

from __future__ import annotations

from typing import Any, ClassVar

from kvbench_core.contracts import TRANSFER_SIZE_OPTION, BackendContext, PieceBackend, parse_size, size_schema


class TemplateMemoryBackend(PieceBackend):
    """A dict of bytearrays; ``capacity_bytes`` reports the optional ``limit`` option."""

    name = "template-memory"
    volatile = True  # contents die with the process
    options_schema: ClassVar[dict[str, Any]] = {"type": "object", "additionalProperties": False, "properties": {
        "transfer_size": TRANSFER_SIZE_OPTION,
        "limit": size_schema("capacity reported for 'capacity: auto' (unknown if absent)")}}

    def __init__(self, options: dict[str, Any], context: BackendContext) -> None:
        super().__init__(options, context)  # the kit reads transfer_size from the options
        self._entries: dict[str, bytearray] = {}

    def begin_write(self, key: str, size: int) -> tuple[str, bytearray]:
        return key, bytearray(size)  # the handle: the entry being filled, published whole by end_write

    def store_piece(self, handle: tuple[str, bytearray], offset: int, data: memoryview) -> None:
        handle[1][offset:offset + len(data)] = data

    def end_write(self, handle: tuple[str, bytearray]) -> None:
        self._entries[handle[0]] = handle[1]  # replaces an older entry of the same key whole

    def load_piece(self, key: str, offset: int, out: memoryview) -> None:
        out[:] = memoryview(self._entries[key])[offset:offset + len(out)]

    def delete(self, key: str) -> None:
        self._entries.pop(key, None)  # a missing key is not an error

    def capacity_bytes(self) -> int | None:
        return parse_size(self.options["limit"]) if "limit" in self.options else None

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name, "medium": "process memory (Python bytearrays)", "access_mechanism": "memcpy",
                "transfer_size": self.transfer_size}

    def close(self) -> None:
        self._entries.clear()  # a memory tier cannot keep anything past the process, keep or not
