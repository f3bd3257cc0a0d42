"""How a trace request maps onto KV-cache entries: turn chains and prefix blocks.

Turns.  Turn n of a conversation stores only the tokens it adds, under
``{stem}_turn_{n}``.  The next turn reads the longest run of those entries,
oldest first, that fits in its context - all of them while the conversation
grows, fewer when the user edited or regenerated an earlier message (BurstGPT
sessions do shrink) - and stores the rest.  So the bytes read are the history
an engine would reuse, the bytes written are what it had to compute, and for a
two-turn conversation it is exactly one read of turn 0.

Prefix blocks.  A trace that names its reuse (Mooncake's ``hash_ids``) gets
one entry per block, read when stored (a real prefix hit) and written on a
miss (``Read.on_miss``); only tokens beyond the hashed blocks are the
request's own write.  The same hash means the same block in every cycle.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kvbench_core.contracts.workload import Read, Write

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def key_part(text: str) -> str:
    """``text`` made safe for file and object names, injectively (``a.b`` -> ``a%2Eb``).

    '.' and '~' never survive, so the cycle suffix and the duplicate marker
    cannot collide with a trace's own ids.
    """
    return _UNSAFE.sub(lambda match: "".join(f"%{byte:02X}" for byte in match.group().encode()), text)


def cycle_stem(stem: str, cycle: int) -> str:
    """A conversation replayed in a later cycle is a new conversation: its keys must not hit the old ones."""
    return stem if cycle == 0 else f"{stem}.c{cycle}"


@dataclass(frozen=True, slots=True)
class TraceEntry:
    """One request as the trace states it, before users, cycles and cache keys are applied."""

    origin: str  # "file:line", kept on the request for diagnosis
    input_tokens: int
    output_tokens: int
    conversation: str | None = None  # shared by the turns of one conversation/session; None = single request
    timestamp_s: float = 0.0  # trace time, open-loop traces only
    blocks: tuple[tuple[str, int], ...] = ()  # (entry key, tokens) of hashed prefix blocks, in prompt order


@dataclass(frozen=True, slots=True)
class KVPlan:
    """The storage side of one request, in the terms of ``kvbench_core.contracts.workload.Request``."""

    reads: tuple[Read, ...]
    write: Write | None

    @property
    def decode_keys(self) -> tuple[str, ...]:
        """The request's whole context: what it read plus what it wrote (they add up to its tokens)."""
        return tuple(read.key for read in self.reads) + ((self.write.key,) if self.write else ())


class Conversation:
    """One replayed conversation: the user it belongs to, its QoS class, and its stored turns."""

    def __init__(self, stem: str, user: int, qos: str, name: str | None) -> None:
        self.stem = stem
        self.user = user
        self.qos = qos
        self.name = name  # Request.conversation; None for a single request
        self._turns = 0
        self._stored: list[tuple[str, int]] = []  # (key, tokens), oldest first

    def plan(self, entry: TraceEntry) -> KVPlan:
        key = f"{self.stem}_turn_{self._turns}"
        self._turns += 1
        if entry.blocks:
            return _prefix_plan(entry, key)
        reads: list[Read] = []
        covered = 0
        for stored_key, tokens in self._stored:
            if covered + tokens > entry.input_tokens:
                break
            reads.append(Read(stored_key, tokens, "turn"))
            covered += tokens
        del self._stored[len(reads):]  # a shorter context branches here; later turns follow the branch
        new = entry.input_tokens - covered
        if new == 0:
            return KVPlan(tuple(reads), None)
        self._stored.append((key, new))
        return KVPlan(tuple(reads), Write(key, new))


def _prefix_plan(entry: TraceEntry, key: str) -> KVPlan:
    reads = tuple(
        Read(block_key, tokens, "prefix", on_miss=Write(block_key, tokens, "prefix"))
        for block_key, tokens in entry.blocks
    )
    rest = entry.input_tokens - sum(tokens for _, tokens in entry.blocks)
    if rest > 0:
        return KVPlan(reads, Write(key, rest))
    return KVPlan(reads, None)
