"""Service models fitted from a measured result: what one operation of a given size costs on each tier.

The raw material is what every result already records per tier and operation (docs/metrics.md): the
operations' latency histogram (``metrics.tiers.<t>.<op>.histograms.total``), their count and bytes.  An
operation of ``n`` bytes costs a latency drawn from that histogram, scaled by ``(n / m) ** SIZE_EXPONENT``
(``m`` the measured mean operation size): the measured tail keeps its shape (a slow fsync slows a whole
entry, which a sum of independent per-command draws averaged away: that first model forecast the p95 of
quickstart-like runs 35-45 % low).

The exponent is 1 (a transfer's time scales with its bytes).  0.5 was tried: the histogram already holds
the spread of the sizes, so scaling each draw by its size in full counts that spread twice, and on
five fitted runs' reproduction of themselves the median absolute p95 error was 35 % at 1 and 26 % at 0.5
(most of it the noise of a p95 of 40 requests, +-30 %); but on the held-out points of docs/FORECAST.md
0.5 did no better on the p95 (27 % both) and worse on everything else (bandwidth 15 % vs 11 %, max users
21 vs 17 for 14 measured), so 1 stays.  A forecast that changes entry sizes (contexts, a model) says so
in its uncertainty, as a tier past its measured concurrency does.

**Servers: the concurrency the tier was measured at, not the workers that could have reached it.**  A
tier serves ``k`` operations at once, ``k`` the operations it had in flight on average in the measured run
(Little's law over its window: the operations' summed latency / the window), rounded up, at most the
workers that could reach it.  A first model gave it all those workers (4): but at 4 workers the tiers of
this machine had 0.15-1.2 operations in flight, so the model had them serve 4 at once at the latency
measured at under 1, and forecast the throughput of 16 workers at 1.9x, their tier bandwidth at 1.9-2.9x
what was measured (docs/FORECAST.md); the held-out runs' own operations took 2-7x longer at 4x the
concurrency, as a queue at about one server does.  The measured latency already holds the queueing of
the measured load, so each draw is divided by ``1 + L / k`` (``L`` the measured in-flight): the mean wait
of ``k`` M/M/1 servers sharing ``L``, which the simulation's queue adds back at the measured load.  Where
``k`` is every worker that could reach the tier no operation can have queued for a server (the workers
bound it), and the latency is taken as measured.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from kvbench_core.contracts.errors import ForecastRefused
from kvbench_core.engine.measure.histogram import LatencyHistogram

#: Draws kept per operation model: enough that a forecast's tail is not the pool's.
POOL_DRAWS = 1 << 18
#: How an operation's latency scales with its size relative to the measured mean (see above).
SIZE_EXPONENT = 1.0


@dataclass
class OpModel:
    """One tier operation's fitted service time."""

    tier: str
    op: str
    ops: int  # measured operations: the fit's sample size
    mean_bytes: float  # the measured operations' mean size
    pool: np.ndarray  # operation latencies (s) drawn from the measured histogram
    speedup: float = 1.0  # a what-if: --tier T.bandwidth=xN
    _cursor: int = 0

    def service_s(self, nbytes: int) -> float:
        """Seconds one operation of ``nbytes`` takes once the tier serves it."""
        if self._cursor >= len(self.pool):
            self._cursor = 0
        draw = float(self.pool[self._cursor])
        self._cursor += 1
        return draw * (nbytes / self.mean_bytes) ** SIZE_EXPONENT / self.speedup


@dataclass
class TierModel:
    """One measured tier: its operation models and whether clients share its device."""

    name: str
    backend: str
    volatile: bool  # DRAM/GPU: each client has its own; a persistent tier's device is shared
    ops: dict[str, OpModel]
    servers: int  # operations the tier serves at once (k)
    in_flight: float = 0.0  # operations it had in flight on average in the measured run (per client if volatile)

    def op(self, op: str) -> OpModel:
        model = self.ops.get(op)
        if model is None:
            raise ForecastRefused(f"forecast: tier '{self.name}' has no measured {op} operations in the result, "
                                  f"so the model cannot say what a {op} there costs")
        return model


def _pool(histogram: dict[str, Any], rng: np.random.Generator) -> np.ndarray:
    """``POOL_DRAWS`` latencies drawn from a result's histogram (its buckets' representative values)."""
    sketch = LatencyHistogram.from_dict(histogram)
    indices = sorted(sketch.buckets)
    values = np.array([sketch._value(i) for i in indices] + [0.0] * (1 if sketch.zeros else 0))
    counts = np.array([sketch.buckets[i] for i in indices] + ([sketch.zeros] if sketch.zeros else []), float)
    return rng.choice(values, size=POOL_DRAWS, p=counts / counts.sum())


def fit_op(tier: str, op: str, figures: dict[str, Any], seed: int) -> OpModel | None:
    """The model of ``tier``'s ``op`` from its result figures; None when the run did none."""
    if not figures.get("ops"):
        return None
    total = (figures.get("histograms") or {}).get("total") or {}
    if not total.get("count") or not figures.get("bytes"):
        raise ForecastRefused(f"forecast: the result has no latency histogram for tier '{tier}' {op} "
                              "(metrics.tiers.<tier>.<op>.histograms.total): nothing to fit")
    rng = np.random.default_rng([seed, zlib.crc32(f"{tier}.{op}".encode())])
    return OpModel(tier=tier, op=op, ops=int(figures["ops"]), mean_bytes=float(figures["bytes"]) / int(figures["ops"]),
                   pool=_pool(total, rng))


def request_overhead_s(result: dict[str, Any]) -> float:
    """Seconds of a request's storage time spent outside its tier operations (the executor, the cache's
    bookkeeping, Python on a loaded machine), per request: the measured storage total minus every tier
    operation's total, over the requests.  The simulation holds the worker that long too."""
    metrics = result.get("metrics") or {}
    storage = ((metrics.get("histograms") or {}).get("storage") or {})
    requests = int(storage.get("count") or 0)
    if not requests:
        return 0.0
    ops = sum(float(((figures.get(op) or {}).get("histograms") or {}).get("total", {}).get("total") or 0.0)
              for figures in (metrics.get("tiers") or {}).values() for op in ("read", "write"))
    return max(0.0, (float(storage.get("total") or 0.0) - ops) / requests)


def fit_tiers(result: dict[str, Any], *, workers: int, clients: int, seed: int = 0) -> dict[str, TierModel]:
    """Every measured tier's model, from a result document (a dict read from its JSON) of a run with
    ``workers`` per client and ``clients`` clients."""
    metrics = result.get("metrics") or {}
    measured_s = float((metrics.get("window") or {}).get("measured_s") or 0.0)
    if measured_s <= 0:
        raise ForecastRefused("forecast: the result has no measured window (metrics.window.measured_s): "
                              "nothing to fit")
    models = {}
    for name, figures in (metrics.get("tiers") or {}).items():
        ops = {op: model for op in ("read", "write")
               if (model := fit_op(name, op, figures.get(op) or {}, seed)) is not None}
        volatile = bool(figures.get("volatile"))
        in_flight = measured_in_flight(figures, measured_s) / (clients if volatile else 1)
        reach = workers * (1 if volatile else clients)  # the most operations that could be in flight there
        servers = max(1, min(reach, math.ceil(in_flight - 1e-9)))
        if servers < reach:  # the measured latency less the queueing the k servers add back (none at k = reach)
            for model in ops.values():
                model.pool = model.pool / (1.0 + in_flight / servers)
        models[name] = TierModel(name=name, backend=str(figures.get("backend")), volatile=volatile,
                                 ops=ops, servers=servers, in_flight=in_flight)
    return models


def measured_in_flight(figures: dict[str, Any], measured_s: float) -> float:
    """The operations the tier had in flight on average over the measured window, read and write together
    (Little's law: the operations' summed latency over the window's length)."""
    busy = sum(float(((figures.get(op) or {}).get("histograms") or {}).get("total", {}).get("total") or 0.0)
               for op in ("read", "write"))
    return busy / measured_s
