"""Reference-counted entries in a shared Redis namespace (seed §11.5, "system prompt sharing").

Several client processes, each with its own cache index, hold the same entry
in one server namespace.  One client's eviction, demotion or cleanup must not
pull an entry from under another that still indexes it; two clients that store
the same entry at once must not interleave their parts; and a client storing a
key with another size (the synthetic source cuts a system prompt to a short
context) must not overwrite what the others read.  So a shared entry is named
by key *and* size, and has, under one cluster hash tag (one slot):

- ``<key>:s<size>:p<i>``, its parts;
- ``<key>:s<size>:parts``, its part count, written when the entry is complete:
  an entry without it does not exist for anyone;
- ``<key>:s<size>:holders``, a set of holder tokens, one per backend instance
  that holds the entry (stored it, or found it by a lookup);
- ``<key>:sizes``, the sizes complete under the key, for lookups.

A store first asks whether the entry is complete already; if so it only adds
its token (it holds that entry) and sends nothing, as a shared prefix cache
checks before it stores.  Otherwise it writes its parts under
``<key>:s<size>:w<token>:p<i>`` and commits them with one script that renames
them into place, unless another client committed the same entry while the parts
were on the way (then its own parts are dropped and it holds that one).
A release removes the caller's token; the release that leaves no token deletes
the entry: the last holder deletes.  Each step is one Lua script, atomic on the
server, so none races another.

With a ``ttl``, the commit that makes an entry gives its parts, marker and
holders one absolute deadline (``PEXPIREAT``, in the same script), so the bytes
never expire before the marker that says they are there; no later store or hold
moves it.  Every script treats an entry as complete only when the marker and
every part it counts exist (a part may also go to ``maxmemory`` eviction).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

#: The scripts' shared part: whether an entry is complete, and one expiry for all of its keys.  An entry is
#: complete when its marker (``:parts``) exists and so does every part it counts: a part evicted under
#: ``maxmemory`` or expired apart from the marker makes the entry incomplete, never "complete without bytes"
#: (a store that held such an entry sent nothing, and the read that followed failed).
_ENTRY = """
local function complete(entry)
  local count = tonumber(redis.call('GET', entry .. ':parts'))
  if not count then return false end
  for i = 0, count - 1 do
    if redis.call('EXISTS', entry .. ':p' .. i) == 0 then return false end
  end
  return true
end
"""

#: KEYS sizes; ARGV token, base: hold the largest complete entry under the key; its size, or nil.
CLAIM = _ENTRY + """
local best, name = nil, nil
for _, size in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  if (not best or tonumber(size) > best) and complete(ARGV[2] .. ':s' .. size) then
    best, name = tonumber(size), size
  end
end
if not best then return false end
redis.call('SADD', ARGV[2] .. ':s' .. name .. ':holders', ARGV[1])
return best
"""

#: KEYS sizes; ARGV token, base, size: 1 when the entry is complete already (now held by this token too: the
#: store sends nothing), 0 when it is not (the store sends its parts and commits them).  Holding does not
#: change the entry's expiry.
HOLD_IF_COMPLETE = _ENTRY + """
local entry = ARGV[2] .. ':s' .. ARGV[3]
if not complete(entry) then return 0 end
redis.call('SADD', entry .. ':holders', ARGV[1])
return 1
"""

#: COMMIT's reply when a temp part expired before the commit (the store took longer than the ttl).
EXPIRED_BEFORE_COMMIT = -1

#: KEYS sizes; ARGV token, base, size, parts, ttl ms (0: none).  1 when this writer's temp parts became the
#: entry, 0 when the same entry was complete already (its temp parts dropped, the entry held, its expiry
#: untouched: its bytes are the winner's), -1 (``EXPIRED_BEFORE_COMMIT``) when a temp part had expired (all
#: dropped, nothing held).  An incomplete entry (a part evicted) is replaced whole.  The committed entry's
#: parts, marker and holders get one absolute deadline in this script, so they expire at the same instant;
#: ``:sizes`` lives at least as long as every entry it lists.
COMMIT = _ENTRY + """
local entry = ARGV[2] .. ':s' .. ARGV[3]
local count = tonumber(ARGV[4])
local temp = entry .. ':w' .. ARGV[1] .. ':p'
local ttl = tonumber(ARGV[5])
local function drop_temp()
  for i = 0, count - 1 do redis.call('UNLINK', temp .. i) end
end
if complete(entry) then
  drop_temp()
  redis.call('SADD', entry .. ':holders', ARGV[1])
  return 0
end
for i = 0, count - 1 do
  if redis.call('EXISTS', temp .. i) == 0 then drop_temp() return -1 end
end
local stale = tonumber(redis.call('GET', entry .. ':parts') or '0')
for i = count, stale - 1 do redis.call('UNLINK', entry .. ':p' .. i) end
local sizes_ttl = redis.call('PTTL', KEYS[1])  -- -2: none yet, -1: never expires
local names = {entry .. ':parts', entry .. ':holders'}
for i = 0, count - 1 do
  redis.call('RENAME', temp .. i, entry .. ':p' .. i)
  names[#names + 1] = entry .. ':p' .. i
end
redis.call('SET', entry .. ':parts', count)
redis.call('SADD', entry .. ':holders', ARGV[1])
redis.call('SADD', KEYS[1], ARGV[3])
if ttl > 0 then
  local now = redis.call('TIME')
  local deadline = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) + ttl
  for _, name in ipairs(names) do redis.call('PEXPIREAT', name, deadline) end
  if sizes_ttl == -2 or (sizes_ttl >= 0 and sizes_ttl < ttl) then redis.call('PEXPIREAT', KEYS[1], deadline) end
else
  for _, name in ipairs(names) do redis.call('PERSIST', name) end
  redis.call('PERSIST', KEYS[1])
end
return 1
"""

#: KEYS sizes; ARGV token, base, size: drop this hold; 1 when it was the last and the entry is gone.
RELEASE = """
local entry = ARGV[2] .. ':s' .. ARGV[3]
redis.call('SREM', entry .. ':holders', ARGV[1])
if redis.call('SCARD', entry .. ':holders') > 0 then return 0 end
local parts = tonumber(redis.call('GET', entry .. ':parts') or '0')
for i = 0, parts - 1 do redis.call('UNLINK', entry .. ':p' .. i) end
redis.call('UNLINK', entry .. ':parts')
redis.call('SREM', KEYS[1], ARGV[3])
return 1
"""


@dataclass(frozen=True)
class SharedEntryKeys:
    """The server names of one shared entry (``key`` of ``size`` bytes), all under the hash tag ``{key}``."""

    base: str  # "<shared prefix>{<key>}"
    size: int
    token: str

    @property
    def sizes(self) -> str:
        return f"{self.base}:sizes"

    @property
    def part_prefix(self) -> str:
        return f"{self.base}:s{self.size}:p"

    @property
    def temp_prefix(self) -> str:
        return f"{self.base}:s{self.size}:w{self.token}:p"


@dataclass
class SharedHolds:
    """This backend instance's side of the reference count: what it holds and what it left half written.

    The counts say, per process, what the shared namespace did to its stores
    and holds (reported as the tier's ``counters``): ``stored``, stores that
    became the entry; ``deduplicated``, stores that found the entry complete
    already and sent nothing (the tier's ``dedup_stores`` counts those of the measured window only:
    these counts cover the whole process, set-up, warm-up and drain included); ``duplicate``, stores
    whose parts were sent (and are booked: the bytes did travel) but dropped at
    commit because another client committed the same entry meanwhile; ``lookups_held``, local misses that
    found another client's entry and now hold it; ``released``, holds dropped
    (the cache's evictions and demotions, and close), which are
    ``kept_for_others`` (another client still held the entry, so it stayed)
    plus ``deleted_last`` (no holder was left, so the release deleted it).
    """

    token: str
    held: dict[str, list[int]] = field(default_factory=dict)  # key -> sizes held, the latest last
    pending: dict[tuple[str, int], int] = field(default_factory=dict)  # (key, size) -> temp parts half written
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(
        ("stored", "deduplicated", "duplicate", "lookups_held", "released", "kept_for_others", "deleted_last"), 0))
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self, name: str) -> None:
        with self.lock:
            self.counts[name] += 1

    def hold(self, key: str, size: int) -> None:
        with self.lock:
            sizes = self.held.setdefault(key, [])
            if size in sizes:
                sizes.remove(size)
            sizes.append(size)

    def latest(self, key: str) -> int | None:
        """The size of the entry this process last stored or found under ``key`` (what its cache reads)."""
        with self.lock:
            sizes = self.held.get(key)
            return sizes[-1] if sizes else None

    def drop_latest(self, key: str) -> int | None:
        """Forget the latest hold on ``key`` (the cache deletes the entry it indexes); its size."""
        with self.lock:
            sizes = self.held.get(key)
            if not sizes:
                return None
            size = sizes.pop()
            if not sizes:
                del self.held[key]
            return size

    def take_all(self) -> tuple[list[tuple[str, int]], dict[tuple[str, int], int]]:
        """Every hold and every half-written store, forgotten here (close releases them on the server)."""
        with self.lock:
            held = [(key, size) for key, sizes in sorted(self.held.items()) for size in sizes]
            pending = dict(self.pending)
            self.held.clear()
            self.pending.clear()
            return held, pending

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return dict(self.counts)
