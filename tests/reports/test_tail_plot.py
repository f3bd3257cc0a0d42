"""The latency tail view ends at the slowest operation: (max, 1/n), whatever n (kvbench_core.reports.plots)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kvbench_core.engine.measure.histogram import DEFAULT_ACCURACY, LatencyHistogram
from kvbench_core.reports.plots import TAIL_DEPTH, tail_points


def serialised(samples: np.ndarray) -> dict:
    hist = LatencyHistogram()
    for value in samples:
        hist.add(float(value))
    return json.loads(json.dumps(hist.to_dict()))


def assert_a_tail(values: np.ndarray, slower: np.ndarray) -> None:
    assert np.all(np.diff(values) >= 0) and np.all(np.diff(slower) < 0)
    assert slower[0] == pytest.approx(1.0)


def test_a_few_operations_the_slowest_is_the_last_step() -> None:
    # A quickstart's 19 nvme reads: the 152 ms one is on the plot, at "1 in 19 slower", not cut at 69 ms.
    reads = np.array([10.0 + i for i in range(17)] + [69.24, 152.36]) / 1000
    values, slower = tail_points(serialised(reads))
    assert_a_tail(values, slower)
    assert (values[-1], slower[-1]) == (pytest.approx(152.36), pytest.approx(1 / 19))
    assert slower.min() == pytest.approx(1 / 19)  # nothing claims a finer fraction than one operation
    assert values[-2] == pytest.approx(69.24, rel=DEFAULT_ACCURACY)  # the step before it: the second-slowest


def test_many_operations_the_tail_reaches_the_axis_floor_then_the_maximum() -> None:
    samples = np.random.default_rng(4).lognormal(-5, 1, 5000)
    values, slower = tail_points(serialised(samples))
    assert_a_tail(values, slower)
    assert slower[-2] == pytest.approx(1 / TAIL_DEPTH)
    assert (values[-1], slower[-1]) == (pytest.approx(samples.max() * 1000), pytest.approx(1 / 5000))
    p999 = float(np.percentile(samples, 99.9, method="inverted_cdf")) * 1000
    assert values[-2] == pytest.approx(p999, rel=DEFAULT_ACCURACY)


def test_one_operation_and_none() -> None:
    values, slower = tail_points(serialised(np.array([0.004])))
    assert (values.tolist(), slower.tolist()) == ([4.0], [1.0])
    empty_values, empty_slower = tail_points(LatencyHistogram().to_dict())
    assert empty_values.size == empty_slower.size == 0


class _Axes:
    """Records where the p95 dot is drawn."""

    def __init__(self) -> None:
        self.dots: list[tuple[float, float]] = []

    def plot(self, xs: list[float], ys: list[float], *_: object, **__: object) -> None:
        self.dots.append((xs[0], ys[0]))

    def annotate(self, *_: object, **__: object) -> None:
        pass


@pytest.mark.parametrize(("count", "height"), [(19, 1 / 19), (9, 1 / 9), (1000, 0.05)])
def test_the_p95_dot_sits_on_the_tail_curve(count: int, height: float) -> None:
    """Under 20 operations the p95 is the slowest, where the curve ends at 1/n: the dot is drawn there, not
    at 0.05 below the end of the curve (review R4)."""
    from kvbench_core.reports.plots import _p95_marker

    axes = _Axes()
    histogram = serialised(np.linspace(0.001, 0.1, count))
    _p95_marker(axes, histogram, "tab:blue")
    ((_x, y),) = axes.dots
    assert y == pytest.approx(height)
    _values, slower = tail_points(histogram)
    assert y >= slower[-1] - 1e-12  # on or above the curve's last point
