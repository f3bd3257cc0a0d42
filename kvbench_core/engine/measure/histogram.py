"""A mergeable latency histogram with a relative-error guarantee (DDSketch-style log buckets).

Values land in bucket ``ceil(log_gamma(x))`` with ``gamma = (1+a)/(1-a)``;
any quantile read back is within relative error ``a`` of a true sample
value at that rank.  The rank is the nearest rank (fio, HdrHistogram, numpy's
``inverted_cdf``): p_q is the ``ceil(q*n)``-th smallest sample, so at least a
fraction q of the samples are at or below it and p100 is the maximum; with few
samples the tail percentiles are the slowest operation, never below it.
Histograms from threads, processes or MPI ranks merge by adding bucket
counts, so percentiles are never averaged.  Serialised as a small dict of
bucket -> count.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from kvbench_core.contracts.percentiles import nearest_rank

DEFAULT_ACCURACY = 0.01
PERCENTILES = (50.0, 95.0, 99.0, 99.9)
#: Per-command latency goes one nine further, as fio's clat does: millions of commands make p99.99 meaningful.
COMMAND_PERCENTILES = (*PERCENTILES, 99.99)


class LatencyHistogram:
    """Latencies in seconds; zero and sub-nanosecond values go to a dedicated zero bucket."""

    __slots__ = ("_gamma_log", "accuracy", "buckets", "count", "max", "min", "total", "zeros")

    def __init__(self, accuracy: float = DEFAULT_ACCURACY) -> None:
        self.accuracy = accuracy
        self._gamma_log = math.log((1 + accuracy) / (1 - accuracy))
        self.buckets: dict[int, int] = {}
        self.zeros = 0
        self.count = 0
        self.total = 0.0
        self.min = math.inf
        self.max = 0.0

    def add(self, value: float) -> None:
        self.count += 1
        self.total += value
        self.min = min(self.min, value)
        self.max = max(self.max, value)
        if value <= 1e-9:
            self.zeros += 1
            return
        index = math.ceil(math.log(value) / self._gamma_log)
        self.buckets[index] = self.buckets.get(index, 0) + 1

    def merge(self, other: LatencyHistogram) -> None:
        if other.accuracy != self.accuracy:
            raise ValueError("cannot merge histograms with different accuracy")
        for index, n in other.buckets.items():
            self.buckets[index] = self.buckets.get(index, 0) + n
        self.zeros += other.zeros
        self.count += other.count
        self.total += other.total
        self.min = min(self.min, other.min)
        self.max = max(self.max, other.max)

    def quantile(self, q: float) -> float | None:
        """Value at quantile ``q`` in [0, 1] by the nearest rank (docs/metrics.md); None when empty."""
        if self.count == 0:
            return None
        rank = nearest_rank(q, self.count)
        if rank == self.count - 1:
            return self.max  # the slowest sample is known exactly, its bucket only to within the error
        seen = self.zeros
        if rank < seen:
            return 0.0
        for index in sorted(self.buckets):
            seen += self.buckets[index]
            if rank < seen:
                return self._value(index)
        return self.max  # a document whose bucket counts fall short of its count

    def bootstrap_quantile(self, q: float, replicates: int, rng: np.random.Generator) -> np.ndarray:
        """``replicates`` readings of quantile ``q`` from the counted samples drawn again with replacement (a
        bootstrap over requests: multinomial bucket counts), each by the nearest rank ``quantile`` uses, so the
        spread is what another run's sampling of the same distribution could read (capacity/interval.py)."""
        if self.count == 0:
            return np.full(replicates, np.nan)
        indexes = sorted(self.buckets)
        values = np.array([0.0] * bool(self.zeros) + [self._value(i) for i in indexes])
        counts = np.array([self.zeros] * bool(self.zeros) + [self.buckets[i] for i in indexes], dtype=float)
        draws = rng.multinomial(self.count, counts / counts.sum(), size=replicates).cumsum(axis=1)
        return values[(draws > nearest_rank(q, self.count)).argmax(axis=1)]

    def _value(self, index: int) -> float:
        """A bucket's value: its midpoint in the relative sense, 2*g^i/(g+1), within the samples' range."""
        gamma = math.exp(self._gamma_log)
        return min(max(2 * gamma**index / (gamma + 1), self.min), self.max)

    @property
    def mean(self) -> float | None:
        return self.total / self.count if self.count else None

    def summary(self, scale: float = 1000.0,
                percentiles: tuple[float, ...] = PERCENTILES) -> dict[str, float | int | None]:
        """count, mean, min, max and the percentile list, in milliseconds by default."""
        def scaled(value: float | None) -> float | None:
            return None if value is None else round(value * scale, 6)

        out: dict[str, float | int | None] = {"count": self.count, "mean": scaled(self.mean),
                                              "min": scaled(self.min if self.count else None),
                                              "max": scaled(self.max if self.count else None)}
        for p in percentiles:
            out[f"p{p:g}"] = scaled(self.quantile(p / 100))
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"accuracy": self.accuracy, "count": self.count, "total": self.total,
                "min": self.min if self.count else None, "max": self.max, "zeros": self.zeros,
                "buckets": {str(index): n for index, n in sorted(self.buckets.items())}}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LatencyHistogram:
        hist = cls(data["accuracy"])
        hist.buckets = {int(index): int(n) for index, n in data["buckets"].items()}
        hist.zeros, hist.count, hist.total = data["zeros"], data["count"], data["total"]
        hist.min = data["min"] if data["min"] is not None else math.inf
        hist.max = data["max"]
        return hist
