"""The answer of several searches: the interval the next search lands in (capacity/repeats.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kvbench_core.capacity.repeats import RepeatedAnswer, t_975


def test_three_answers_give_the_prediction_interval_of_a_fourth() -> None:
    """150, 161, 163: mean 158, sd 7.0, t(0.975, 2) = 4.303, sqrt(1 + 1/3): 158 +- 34.8."""
    repeated = RepeatedAnswer.of([150, 161, 163], [(145, 154), (156, 166), (161, 164)])
    reach = 4.303 * np.std([150, 161, 163], ddof=1) * math.sqrt(4 / 3)
    assert (repeated.load, repeated.ci_low, repeated.ci_high) == (158, math.floor(158 - reach), math.ceil(158 + reach))
    assert repeated.line() == ("max users within SLA over 3 searches: 158 (95 % CI for a further search 123-193; "
                               "answers 150, 161, 163)")


def test_the_interval_is_never_narrower_than_a_typical_searchs_own() -> None:
    """Three equal answers have no spread: the median search's own interval (sampling) still holds; one
    search's wild interval does not set it alone."""
    repeated = RepeatedAnswer.of([40, 40, 40], [(36, 44), (38, 42), (0, 200)])
    assert (repeated.ci_low, repeated.ci_high) == (36, 44)


def test_the_t_quantile_takes_the_wider_entry_between_table_rows_and_the_normal_past_them() -> None:
    assert t_975(2) == 4.303 and t_975(11) == t_975(10) == 2.228 and t_975(100) == 1.96
    assert all(t_975(d) >= t_975(d + 1) for d in range(1, 40))


def test_a_further_search_lands_inside_about_95_percent_of_the_time() -> None:
    """Answers drawn normal (mean 100, sd 10): the interval of 3 holds a 4th in about 95 % of 4,000 trials."""
    rng = np.random.default_rng(5)
    inside = 0
    for _ in range(4000):
        draws = rng.normal(100, 10, 4).round().astype(int)
        repeated = RepeatedAnswer.of(list(draws[:3]), [])
        inside += repeated.ci_low <= draws[3] <= repeated.ci_high
    assert 0.93 <= inside / 4000 <= 0.98


def test_one_search_has_no_prediction_interval() -> None:
    with pytest.raises(ValueError, match="at least two searches"):
        RepeatedAnswer.of([5], [(4, 6)])
