"""A tier of the forecast's cache: the waterfall's own bookkeeping runs on it, but it stores no bytes.

The simulated cache is the engine's ``MultiTierCache`` unchanged; only its backends are these.  Each
operation the cache asks of one (a request's read or write, a demotion's read of the tier above and write
below) is handed to the simulation (``steps.charge``), which holds the tier for the fitted service time on
the simulated clock before the cache goes on.
"""

from __future__ import annotations

from typing import Any, ClassVar

from kvbench_core.contracts.backend import BackendContext, ByteSink, ByteSource, IOTiming, StorageBackend
from kvbench_core.engine.cache.cache_types import TierSource
from kvbench_core.forecast.steps import charge


class SizedSource:
    """The payload of a new entry: only its size matters, no byte is made (nothing pulls it)."""

    __slots__ = ("size",)

    def __init__(self, size: int) -> None:
        self.size = size

    def fill(self, offset: int, out: memoryview) -> None:  # pragma: no cover - a model tier pulls nothing
        raise AssertionError("a forecast's model tier never pulls payload bytes")


class ModelTier(StorageBackend):
    """Hands each operation to the simulation; moves nothing."""

    name = "forecast-model"
    options_schema: ClassVar[dict[str, Any]] = {"type": "object"}

    def __init__(self, tier: str) -> None:
        super().__init__({}, BackendContext(tier_name=tier, run_id="forecast", seed=0, concurrency=1))
        self.tier = tier

    def write(self, key: str, source: ByteSource) -> IOTiming:
        size = int(getattr(source, "size", 0))
        inner = getattr(source, "inner", source)  # a cancellable wrapper, when the cache has a cancel token
        if isinstance(inner, TierSource):  # a demotion or promotion: it reads the tier it leaves
            charge(inner.backend.tier, "read", inner.size)
            size = inner.size
        charge(self.tier, "write", size)
        return IOTiming(total=0.0, host=0.0, device=0.0, nbytes=size)

    def read(self, key: str, size: int, sink: ByteSink) -> IOTiming:
        charge(self.tier, "read", size)
        return IOTiming(total=0.0, host=0.0, device=0.0, nbytes=size)

    def read_range(self, key: str, offset: int, out: memoryview) -> None:  # pragma: no cover - see write
        raise AssertionError("a forecast's model tier never copies bytes")

    def delete(self, key: str) -> None:
        """Deleting costs nothing in the model (an unlink, a DEL: small next to the entry's transfer)."""
