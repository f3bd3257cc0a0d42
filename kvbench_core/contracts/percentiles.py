"""The percentile rule every kvbench figure uses: the nearest rank, as fio and HdrHistogram report it.

Public to plugins (``kvbench_core.contracts``): a workload plugin that summarises its trace (input-length
p99, say) must say the same number ``kvbench run`` says of the same requests, so both take the rule from here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def nearest_rank(q: float, count: int) -> int:
    """0-based rank of quantile ``q`` among ``count`` sorted samples: ``ceil(q*count) - 1``, at least 0.

    ``q*count`` is snapped to a whole number within float noise first: p99.9 arrives as 99.9/100 =
    0.9990000000000001, and of 1000 samples it is the 999th, not (as a plain ceil says) the 1000th."""
    position = q * count
    whole = round(position)
    if math.isclose(position, whole, rel_tol=1e-12, abs_tol=1e-12):
        position = whole
    return min(max(math.ceil(position) - 1, 0), count - 1)


def sample_percentiles(values: Sequence[float], percentiles: Sequence[float]) -> list[float]:
    """Exact percentiles (0-100) of a small sample by the same nearest rank: each is a value some sample had
    (a token count, not 3432.55).  For the workload statistics, kept as samples rather than histograms."""
    ordered = np.sort(np.asarray(values))
    return [ordered[nearest_rank(p / 100, len(ordered))].item() for p in percentiles]
