"""Reference-counted entries in a shared Redis namespace (seed §11.5, "system prompt sharing").

Several client processes, each with its own cache index, hold the same entry
in one server namespace.  One client's eviction, demotion or cleanup must not
pull an entry from under another that still indexes it, and two clients that
store the same entry at once must not interleave their parts.  So every shared
entry has, next to its parts (all under one cluster hash tag, so one slot):

- ``<entry>:meta``, a hash ``{size, parts}`` written when the entry is
  complete; an entry without it does not exist for anyone;
- ``<entry>:holders``, a set of holder tokens, one per backend instance that
  holds the entry (wrote it, found it already stored, or looked it up).

A store writes its parts under ``<entry>:w<token>:p<i>`` and commits them with
one script that renames them into place, unless another holder committed the
same entry first (then its own copy is dropped).  A release removes the
caller's token and deletes parts, meta and holders when no token is left: the
last holder deletes.  Every step is one Lua script, so it is atomic on the
server and races nothing.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

#: KEYS meta, holders; ARGV token: hold a complete entry; its size, or nil when absent.
CLAIM = """
local size = redis.call('HGET', KEYS[1], 'size')
if not size then return false end
redis.call('SADD', KEYS[2], ARGV[1])
return tonumber(size)
"""

#: KEYS meta, holders; ARGV token, size, parts, temp-part prefix, part prefix, ttl ms (0: none).
#: 1 when this writer's parts became the entry, 0 when an equal entry was already there (its parts dropped).
COMMIT = """
local count = tonumber(ARGV[3])
if redis.call('HGET', KEYS[1], 'size') == ARGV[2] then
  for i = 0, count - 1 do redis.call('UNLINK', ARGV[4] .. i) end
  redis.call('SADD', KEYS[2], ARGV[1])
  return 0
end
local old = tonumber(redis.call('HGET', KEYS[1], 'parts') or '0')
for i = 0, count - 1 do redis.call('RENAME', ARGV[4] .. i, ARGV[5] .. i) end
for i = count, old - 1 do redis.call('UNLINK', ARGV[5] .. i) end
redis.call('HSET', KEYS[1], 'size', ARGV[2], 'parts', count)
redis.call('SADD', KEYS[2], ARGV[1])
if tonumber(ARGV[6]) > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[6])
  redis.call('PEXPIRE', KEYS[2], ARGV[6])
end
return 1
"""

#: KEYS meta, holders; ARGV token, part prefix: drop this hold; 1 when it was the last and the entry is gone.
RELEASE = """
redis.call('SREM', KEYS[2], ARGV[1])
if redis.call('SCARD', KEYS[2]) > 0 then return 0 end
local parts = tonumber(redis.call('HGET', KEYS[1], 'parts') or '0')
for i = 0, parts - 1 do redis.call('UNLINK', ARGV[2] .. i) end
redis.call('UNLINK', KEYS[1], KEYS[2])
return 1
"""


@dataclass(frozen=True)
class SharedEntryKeys:
    """The server keys of one shared entry, all under the hash tag ``{key}``."""

    base: str  # "<shared prefix>{<key>}"
    token: str

    @property
    def meta(self) -> str:
        return f"{self.base}:meta"

    @property
    def holders(self) -> str:
        return f"{self.base}:holders"

    @property
    def part_prefix(self) -> str:
        return f"{self.base}:p"

    @property
    def temp_prefix(self) -> str:
        return f"{self.base}:w{self.token}:p"


@dataclass
class SharedHolds:
    """This backend instance's side of the reference count: what it holds and what it left half written.

    The counts say, per process, what the shared namespace did to its stores
    (reported as the tier's ``counters``): ``stored`` entries it committed,
    ``duplicate`` stores whose parts were sent (and are booked) but dropped at
    commit because another client had committed the same entry first,
    ``lookups_held`` local misses that found (and now hold)
    another client's entry, ``released`` holds dropped (evictions, demotions,
    close) and ``deleted_last`` releases that removed the entry because no
    holder was left.
    """

    token: str
    held: set[str] = field(default_factory=set)
    pending: dict[str, int] = field(default_factory=dict)  # key -> temp parts possibly on the server
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(
        ("stored", "duplicate", "lookups_held", "released", "deleted_last"), 0))
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self, name: str) -> None:
        with self.lock:
            self.counts[name] += 1

    def hold(self, key: str) -> None:
        with self.lock:
            self.held.add(key)

    def drop(self, key: str) -> None:
        with self.lock:
            self.held.discard(key)

    def take_all(self) -> tuple[list[str], dict[str, int]]:
        """Every hold and every half-written store, forgotten here (close releases them on the server)."""
        with self.lock:
            held, pending = sorted(self.held), dict(self.pending)
            self.held.clear()
            self.pending.clear()
            return held, pending

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return dict(self.counts)
