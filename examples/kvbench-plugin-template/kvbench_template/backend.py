"""``template-memory``: KV entries held as ``bytearray``s in a dict — the smallest correct tier.

What every tier must get right, shown on the simplest medium:

* stream through the source/sink in pieces of at most ``transfer_size``
  (never ask for, or hand over, a whole entry at once);
* return an ``IOTiming`` whose ``host`` (preparing bytes) and ``device``
  (waiting on the storage) are disjoint parts of ``total``;
* be safe under concurrent calls for different keys;
* forget everything this run stored in ``close()`` unless ``context.keep``.

There is no device to wait on here, so ``device`` is 0 and all time is host
time.  A real tier measures the blocking call (syscall, round trip) as device
time and everything around it as host time.
"""

from __future__ import annotations

import threading
import time
from typing import Any, ClassVar

from kvbench_core.contracts.backend import BackendContext, ByteSink, ByteSource, IOTiming, StorageBackend
from kvbench_core.spec.units import SIZE_PATTERN, parse_size


class TemplateMemoryBackend(StorageBackend):
    """A dict of bytearrays; ``capacity_bytes`` reports the optional ``limit`` option."""

    name = "template-memory"
    volatile = True  # contents die with the process
    options_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "transfer_size": {
                "oneOf": [{"type": "integer", "minimum": 1}, {"type": "string", "pattern": SIZE_PATTERN}],
                "default": "1MiB",
                "description": "bytes per source/sink piece, e.g. 1MiB",
            },
            "limit": {
                "oneOf": [{"type": "integer", "minimum": 1}, {"type": "string", "pattern": SIZE_PATTERN}],
                "description": "capacity reported for 'capacity: auto' (unknown if absent)",
            },
        },
    }

    def __init__(self, options: dict[str, Any], context: BackendContext) -> None:
        super().__init__(options, context)
        self.transfer_size = parse_size(options.get("transfer_size", "1MiB"))
        self.limit = parse_size(options["limit"]) if "limit" in options else None
        self._entries: dict[str, bytearray] = {}
        self._lock = threading.Lock()  # guards the dict; one key is never used by two threads at once

    def write(self, key: str, source: ByteSource) -> IOTiming:
        start = time.perf_counter()
        entry = bytearray(source.size)
        view = memoryview(entry)
        pieces = 0
        for offset in range(0, source.size, self.transfer_size):
            source.fill(offset, view[offset:offset + self.transfer_size])
            pieces += 1
        with self._lock:
            self._entries[key] = entry  # replaces an older entry of the same key whole
        elapsed = time.perf_counter() - start
        return IOTiming(total=elapsed, host=elapsed, device=0.0, nbytes=source.size, commands=max(pieces, 1))

    def read(self, key: str, size: int, sink: ByteSink) -> IOTiming:
        start = time.perf_counter()
        view = memoryview(self._entry(key))
        pieces = 0
        for offset in range(0, size, self.transfer_size):
            sink.consume(offset, view[offset:min(offset + self.transfer_size, size)])
            pieces += 1
        elapsed = time.perf_counter() - start
        return IOTiming(total=elapsed, host=elapsed, device=0.0, nbytes=size, commands=max(pieces, 1))

    def read_range(self, key: str, offset: int, out: memoryview) -> None:
        out[:] = memoryview(self._entry(key))[offset:offset + len(out)]

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

    def _entry(self, key: str) -> bytearray:
        try:
            return self._entries[key]
        except KeyError:
            raise KeyError(f"no entry {key!r} in tier {self.context.tier_name!r}") from None
