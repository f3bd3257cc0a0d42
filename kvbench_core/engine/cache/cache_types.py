"""The waterfall cache's data: its eviction policy, a tier in waterfall order, an entry, and the byte
source a demotion or promotion reads an entry through."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from kvbench_core.contracts.backend import StorageBackend


@dataclass
class EvictionPolicy:
    target_usage_ratio: float = 0.8
    large_entry_limit_ratio: float = 0.95
    max_recursion_depth: int = 10
    max_evictions: int = 5000
    #: When the tier below cannot make room for a victim: ``refuse`` the cascade (the seed's
    #: ``_ensure_space_in_tier`` returns False, so the new entry is not stored there) or ``drop`` the victim.
    no_room_below: str = "refuse"


@dataclass
class Tier:
    """One enabled tier in waterfall order (index 0 is the fastest)."""

    name: str
    backend: StorageBackend
    capacity: float  # bytes; math.inf when unbounded
    cold_after: float | None = None  # entries idle this long in the tier above move down here
    description: dict[str, Any] = field(default_factory=dict)  # backend.describe() taken when the tier opened
    usage: int = 0  # reserved + stored bytes
    evicted_bytes: int = 0  # demoted or deleted to make room, or demoted cold, since the run began (steady)
    largest_entry: int = 0  # the largest entry ever reserved here: the eviction sawtooth's depth (steady)
    lru: OrderedDict[str, Entry] = field(default_factory=OrderedDict, repr=False)  # stored here, oldest first

    @property
    def target(self) -> float:
        return self.capacity


@dataclass
class Entry:
    key: str
    size: int
    tier: Tier | None = field(default=None, repr=False)
    last_access: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: Stored by another process in a shared tier: readable here, but not ours to evict, count or delete.
    foreign: bool = False


class TierSource:
    """``ByteSource`` that pulls an entry's bytes from an upper tier (the demotion read side), counting
    the time and the bytes it read there: the upper tier's read is booked from these, not assumed.

    A codec stage above adds what only it knows (``fill`` times its decode too): the encoded bytes it read
    from its device (``encoded_read``, headers and tables only where it read them) and the seconds it spent
    decoding (``decode_seconds``, host time inside ``read_seconds``), through ``read_range_costs``."""

    __slots__ = ("backend", "bytes_read", "decode_seconds", "encoded_read", "key", "read_seconds",
                 "size")

    def __init__(self, backend: StorageBackend, key: str, size: int) -> None:
        self.backend, self.key, self.size = backend, key, size
        self.read_seconds = 0.0
        self.bytes_read = 0
        self.encoded_read = 0
        self.decode_seconds = 0.0

    def fill(self, offset: int, out: memoryview) -> None:
        start = time.perf_counter()
        encoded, decode_s = self.backend.read_range_costs(self.key, offset, out)  # 0, 0.0 but for a codec stage
        self.encoded_read += encoded
        self.decode_seconds += decode_s
        self.read_seconds += time.perf_counter() - start
        self.bytes_read += len(out)
