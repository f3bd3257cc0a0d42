"""``template-memory``: KV entries held as ``bytearray``s in a dict — the smallest correct tier.

It is written on ``PieceBackend``, which derives ``write``/``read``/``read_range``,
the piece loop and the host/device timing from two commands: ``store_piece`` and
``load_piece``.  What a tier must still get right itself: be safe under
concurrent calls for different keys, publish an entry only when it is whole
(``end_write``), and forget everything this run stored in ``close()`` unless
``context.keep``.  Time inside the piece commands is device time: for a real tier
that is the syscall or the round trip; here it is a memcpy.
"""

from __future__ import annotations

import threading
from typing import Any, ClassVar

from kvbench_core.contracts.backend import BackendContext
from kvbench_core.contracts.pieces import PieceBackend
from kvbench_core.contracts.units import parse_size, size_schema


class TemplateMemoryBackend(PieceBackend):
    """A dict of bytearrays; ``capacity_bytes`` reports the optional ``limit`` option."""

    name = "template-memory"
    volatile = True  # contents die with the process
    options_schema: ClassVar[dict[str, Any]] = {"type": "object", "additionalProperties": False, "properties": {
        "transfer_size": {**size_schema("bytes per piece command, e.g. 1MiB"), "default": "1MiB"},
        "limit": size_schema("capacity reported for 'capacity: auto' (unknown if absent)")}}

    def __init__(self, options: dict[str, Any], context: BackendContext) -> None:
        super().__init__(options, context)
        self.transfer_size = parse_size(self.options["transfer_size"])  # the schema default fills it
        self.limit = parse_size(self.options["limit"]) if "limit" in self.options else None
        self._entries: dict[str, bytearray] = {}
        self._writing: dict[str, bytearray] = {}  # entries whose pieces are still arriving
        self._lock = threading.Lock()  # guards both dicts; one key is never used by two threads at once

    def begin_write(self, key: str, size: int) -> None:
        with self._lock:
            self._writing[key] = bytearray(size)

    def store_piece(self, key: str, offset: int, data: memoryview, size: int) -> None:
        self._writing[key][offset:offset + len(data)] = data

    def end_write(self, key: str, size: int) -> None:
        with self._lock:
            self._entries[key] = self._writing.pop(key)  # replaces an older entry of the same key whole

    def load_piece(self, key: str, offset: int, out: memoryview) -> None:
        out[:] = memoryview(self._entries[key])[offset:offset + len(out)]

    def delete(self, key: str) -> None:
        with self._lock:
            self._entries.pop(key, None)  # a missing key is not an error

    def capacity_bytes(self) -> int | None:
        return self.limit

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name, "medium": "process memory (Python bytearrays)",
                "access_mechanism": "memcpy", "transfer_size": self.transfer_size}

    def close(self) -> None:
        with self._lock:
            self._entries.clear()  # a memory tier cannot keep anything past the process, keep or not
