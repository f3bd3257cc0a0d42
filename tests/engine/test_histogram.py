"""Latency histograms merge exactly (bucket counts add up), so a percentile over threads, processes
or ranks is the percentile of the pooled samples within the sketch's relative error, never an average.
A percentile is the nearest rank (numpy's ``inverted_cdf``, fio's and HdrHistogram's convention): an
observed sample with at least a fraction q of the samples at or below it, so p100 is the maximum."""

from __future__ import annotations

import json
import math
from fractions import Fraction

import numpy as np
import pytest

from kvbench_core.engine.measure.histogram import DEFAULT_ACCURACY, PERCENTILES, LatencyHistogram

QUANTILES = (0.0, 0.01, 0.25, 0.5, 0.9, 0.95, 0.99, 0.999, 1.0)


def histogram_of(values: np.ndarray, accuracy: float = DEFAULT_ACCURACY) -> LatencyHistogram:
    hist = LatencyHistogram(accuracy)
    for value in values:
        hist.add(float(value))
    return hist


def assert_within_relative_error(hist: LatencyHistogram, samples: np.ndarray, accuracy: float) -> None:
    for q in QUANTILES:
        exact = float(np.percentile(samples, q * 100, method="inverted_cdf"))
        estimate = hist.quantile(q)
        assert estimate is not None
        assert abs(estimate - exact) <= accuracy * exact + 1e-12, (q, estimate, exact)


def shards(seed: int) -> list[np.ndarray]:
    """Four very different 'ranks': fast reads, slow writes, a heavy tail, and a handful of outliers."""
    rng = np.random.default_rng(seed)
    return [rng.lognormal(-7, 0.5, 3000), rng.lognormal(-3, 1.0, 1500), rng.pareto(1.5, 800) * 1e-3 + 1e-4,
            rng.uniform(1.0, 30.0, 7)]


@pytest.mark.parametrize("accuracy", [0.01, 0.002, 0.05])
def test_a_merged_percentile_is_the_pooled_percentile_within_the_error_bound(accuracy: float) -> None:
    parts = shards(seed=11)
    merged = LatencyHistogram(accuracy)
    for part in parts:
        merged.merge(histogram_of(part, accuracy))
    pooled = np.concatenate(parts)
    assert merged.count == len(pooled)
    assert merged.min == pooled.min() and merged.max == pooled.max()
    assert merged.mean == pytest.approx(pooled.mean())
    assert_within_relative_error(merged, pooled, accuracy)
    # Merging is exactly the same as recording everything in one histogram.
    assert merged.to_dict() == histogram_of(pooled, accuracy).to_dict() | {"total": merged.total}


def test_averaging_per_rank_percentiles_would_be_wrong() -> None:
    # What the merge protects against: the mean of the ranks' p99s is nowhere near the pooled p99.
    parts = shards(seed=5)
    merged = LatencyHistogram()
    for part in parts:
        merged.merge(histogram_of(part))
    averaged = np.mean([histogram_of(part).quantile(0.99) for part in parts])
    pooled = float(np.percentile(np.concatenate(parts), 99, method="inverted_cdf"))
    assert abs(merged.quantile(0.99) - pooled) <= DEFAULT_ACCURACY * pooled
    assert abs(averaged - pooled) > 0.5 * pooled


def test_zero_and_tiny_values_go_to_the_zero_bucket() -> None:
    hist = histogram_of(np.array([0.0, 0.0, 1e-12, 0.5]))
    assert (hist.zeros, hist.count) == (3, 4)
    assert hist.quantile(0.5) == 0.0
    assert hist.quantile(1.0) == pytest.approx(0.5, rel=DEFAULT_ACCURACY)


def test_an_empty_histogram_has_no_percentiles() -> None:
    hist = LatencyHistogram()
    assert hist.quantile(0.5) is None and hist.mean is None
    assert hist.summary() == {"count": 0, "mean": None, "min": None, "max": None,
                              "p50": None, "p95": None, "p99": None, "p99.9": None}
    hist.merge(LatencyHistogram())
    assert hist.count == 0 and hist.min == math.inf


def test_summary_reports_milliseconds_and_the_fixed_percentile_list() -> None:
    hist = histogram_of(np.linspace(0.001, 0.100, 100))
    summary = hist.summary()
    assert list(summary) == ["count", "mean", "min", "max", "p50", "p95", "p99", "p99.9"]
    assert summary["count"] == 100
    assert (summary["min"], summary["max"]) == (1.0, 100.0)
    assert summary["p50"] == pytest.approx(50.0, rel=DEFAULT_ACCURACY)
    assert summary["p95"] == pytest.approx(95.0, rel=DEFAULT_ACCURACY)


def test_serialisation_round_trip_through_json() -> None:
    original = LatencyHistogram(0.005)
    for part in shards(seed=2):
        original.merge(histogram_of(part, 0.005))
    original.add(0.0)
    restored = LatencyHistogram.from_dict(json.loads(json.dumps(original.to_dict())))
    assert restored.to_dict() == original.to_dict()
    assert [restored.quantile(q) for q in QUANTILES] == [original.quantile(q) for q in QUANTILES]
    # A restored histogram keeps merging like the original.
    restored.merge(histogram_of(np.array([2.0]), 0.005))
    assert (restored.count, restored.max) == (original.count + 1, max(original.max, 2.0))
    empty = LatencyHistogram.from_dict(json.loads(json.dumps(LatencyHistogram().to_dict())))
    assert empty.count == 0 and empty.quantile(0.5) is None


def test_histograms_of_different_accuracy_do_not_merge() -> None:
    with pytest.raises(ValueError, match="different accuracy"):
        LatencyHistogram(0.01).merge(LatencyHistogram(0.02))


def nearest_rank_sample(samples: np.ndarray, percentile: float) -> float:
    """The ceil(p/100 * n)-th smallest sample, computed in exact fractions (no float noise at whole ranks)."""
    rank = math.ceil(Fraction(str(percentile)) / 100 * len(samples))
    return float(np.sort(samples)[max(rank, 1) - 1])


@pytest.mark.parametrize("n", [1, 2, 10, 19, 100, 999, 1000, 1001, 5000])
def test_a_percentile_is_an_observed_sample_with_at_least_that_fraction_at_or_below_it(n: int) -> None:
    samples = np.random.default_rng(n).lognormal(-4, 1.2, n)
    hist = histogram_of(samples)
    ordered = np.sort(samples)
    for p in (*PERCENTILES, 99.99, 0.0, 1.0, 25.0, 90.0, 100.0):
        estimate = hist.quantile(p / 100)
        assert estimate is not None
        exact = nearest_rank_sample(samples, p)
        assert abs(estimate - exact) <= DEFAULT_ACCURACY * exact, (n, p, estimate, exact)
        # The invariant itself: at least ceil(q*n) samples are at or below p_q (within the bucket's error).
        at_or_below = int(np.searchsorted(ordered, estimate * (1 + DEFAULT_ACCURACY), side="right"))
        assert at_or_below >= math.ceil(Fraction(str(p)) / 100 * n), (n, p)
    assert hist.quantile(1.0) == samples.max()  # p100 is the slowest sample, exactly


def test_few_samples_the_tail_percentiles_are_the_slowest_operation() -> None:
    # A 5 s quickstart's 19 nvme reads: p95, p99 and p99.9 are all the 152 ms one, never the 69 ms below it.
    reads = np.array([10.0] * 17 + [69.24, 152.36]) / 1000
    summary = histogram_of(reads).summary()
    assert summary["p95"] == summary["p99"] == summary["p99.9"] == summary["max"] == 152.36
    assert summary["p50"] == pytest.approx(10.0, rel=DEFAULT_ACCURACY)
    # Ten requests of a QoS class: p95 and p99 are the slowest (an SLA is judged on it), p90 the ninth.
    service = np.array([100, 110, 120, 130, 140, 150, 160, 170, 453.8, 619.6]) / 1000
    hist = histogram_of(service)
    assert hist.quantile(0.95) == hist.quantile(0.99) == pytest.approx(0.6196)
    assert hist.quantile(0.90) == pytest.approx(0.4538, rel=DEFAULT_ACCURACY)
    one = histogram_of(np.array([0.25]))
    assert [one.quantile(q) for q in (0.0, 0.5, 1.0)] == [0.25, 0.25, 0.25]


def test_a_whole_rank_is_not_pushed_one_up_by_float_noise() -> None:
    # 99.9 / 100 * 1000 is 999.0000000000001: the 999th of 1000 samples, not the 1000th (the max).
    samples = np.arange(1, 1001) / 1000
    hist = histogram_of(samples)
    assert hist.quantile(99.9 / 100) == pytest.approx(0.999, rel=DEFAULT_ACCURACY)
    assert hist.quantile(99.9 / 100) < samples.max()
    assert hist.quantile(0.95) == pytest.approx(0.950, rel=DEFAULT_ACCURACY)
