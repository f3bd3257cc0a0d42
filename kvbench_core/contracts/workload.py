"""Requests and the workload-source contract.

A workload source turns a user (closed loop) or the clock (open loop, trace
replay) into ``Request`` objects: which KV entries to read before prefill
(prefix, previous turn, RAG chunks), which entry the prefill writes, and how
many tokens are generated.  The runner derives the phase and the decode reads
(``decode_read_count``) in one place, so every source follows the seed's rules.
Sources never see the cache: where a decision depends on cache state (a
prefix hit), the request says what to do on a miss (``Read.on_miss``).
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kvbench_core.contracts.configurable import Configurable

PREFILL_ONLY_CONTEXT_TOKENS = 10_000  # seed §3.1: contexts this long are prefill-only


class Phase(enum.StrEnum):
    PREFILL = "prefill"
    DECODE = "decode"
    PREFILL_DECODE = "prefill_decode"


@dataclass(frozen=True, slots=True)
class QoSClass:
    """A QoS class with its SLA targets (seconds) and scheduling priority (higher first)."""

    name: str
    priority: int
    p95_target_s: float
    p99_target_s: float


DEFAULT_QOS: dict[str, QoSClass] = {
    "interactive": QoSClass("interactive", 3, 0.050, 0.100),
    "responsive": QoSClass("responsive", 2, 0.100, 0.200),
    "batch": QoSClass("batch", 1, 1.000, 5.000),
}


@dataclass(frozen=True, slots=True)
class Write:
    """Store a KV entry of ``tokens`` tokens under ``key``."""

    key: str
    tokens: int
    kind: str = "prefill"  # prefill | prefix | rag | preload | precondition


@dataclass(frozen=True, slots=True)
class Read:
    """Load the KV entry ``key``; on a miss, perform ``on_miss`` (e.g. store the prefix) instead."""

    key: str
    tokens: int
    kind: str  # prefix | turn | rag | decode
    on_miss: Write | None = None


@dataclass(slots=True)
class Request:
    """One inference request as the storage sees it."""

    user_id: int
    seq: int
    qos: str
    context_tokens: int
    generate_tokens: int
    reads: tuple[Read, ...] = ()
    write: Write | None = None
    # The entries holding the request's KV (its whole context): each decode read reads all of them, as the
    # seed's decode re-reads the request's cache.  () = the prefill write's entry alone.
    decode_keys: tuple[str, ...] = ()
    phase: Phase | None = None  # None: derived from context length (seed §3.1)
    arrival_s: float | None = None  # open loop / replay: issue at this offset from the window start
    think_s: float = 0.0  # closed loop: the user's pause after this request completes
    conversation: str | None = None
    tags: dict[str, Any] = field(default_factory=dict)


def derive_phase(request: Request) -> Phase:
    """The request's phase: explicit, else PREFILL for long contexts, else PREFILL_DECODE."""
    if request.phase is not None:
        return request.phase
    if request.context_tokens >= PREFILL_ONLY_CONTEXT_TOKENS:
        return Phase.PREFILL
    return Phase.PREFILL_DECODE


def decode_read_count(generate_tokens: int, decode_batch: int) -> int:
    """Seed §3.3: ceil(generate / batch), at least one read."""
    return max(1, -(-generate_tokens // max(1, decode_batch)))


@dataclass(slots=True)
class WorkloadContext:
    """What every source is told: the run's seed, users and model size, and the traffic mode."""

    seed: int
    users: int
    bytes_per_token: int
    mode: str = "mixed"  # mixed | prefill-only | decode-only
    decode_batch: int = 32
    duration_s: float | None = None
    qos_classes: dict[str, QoSClass] = field(default_factory=lambda: dict(DEFAULT_QOS))
    spec_dir: str = "."  # relative paths in source options resolve against the spec file's folder


class WorkloadSource(Configurable, abc.ABC):
    """Produces requests.  Subclass, set ``name``/``options_schema``, register via the
    ``kvbench_workload_sources`` hook.  Must be deterministic under ``context.seed``."""

    #: Open-loop sources stamp ``arrival_s`` on each request and are polled by the clock, not by users.
    open_loop: bool = False

    def __init__(self, options: dict[str, Any], context: WorkloadContext) -> None:
        super().__init__(options)
        self.context = context

    def preload(self) -> Iterable[Write]:
        """Entries to store before the measured window (RAG ingestion, decode-only population)."""
        return ()

    @abc.abstractmethod
    def next_request(self, user_id: int) -> Request | None:
        """The user's next request (closed loop) or the next arrival (open loop); None = exhausted."""

    def describe(self) -> dict[str, Any]:
        """Source facts for the declaration (trace file, sha256, arrival process…)."""
        return {"source": self.name}
