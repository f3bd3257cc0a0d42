"""The capacity room (kvbench_core/capacity): judged steps, the doubling-then-bisection search, and the
answer with its bootstrap interval, on scripted samples with known latencies."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from kvbench_core.builtins.sla_search import SLASearchAutoscaler
from kvbench_core.capacity.interval import answer
from kvbench_core.capacity.search import Bisection, steps_needed
from kvbench_core.capacity.step import NOT_JUDGED, OVER, WITHIN, JudgedStep, Step
from kvbench_core.contracts.autoscaler import TelemetrySample
from kvbench_core.contracts.workload import Request
from kvbench_core.engine.measure.histogram import LatencyHistogram
from kvbench_core.engine.run.arrivals import OpenLoopArrivals, UserPool
from kvbench_core.engine.run.executor import StepOutcome
from kvbench_core.engine.run.load_requests import LoadRequests
from kvbench_core.engine.run.workers import Finished

SLA = {"responsive": 0.100}


def histogram(values: list[float]) -> LatencyHistogram:
    h = LatencyHistogram()
    for value in values:
        h.add(value)
    return h


def sample(t: float, values: dict[str, list[float]], *, tokens_per_s: float = 0.0,
           split: dict[str, float] | None = None, tiers: dict[str, dict[str, float]] | None = None) -> TelemetrySample:
    """One decision's sample whose requests at this load had these service latencies (seconds)."""
    hists = {q: histogram(v) for q, v in values.items()}
    worst = {q: max(v) for q, v in values.items()}
    return TelemetrySample(t_s=t, users=1, requests=sum(map(len, values.values())),
                           generated_tokens_per_s=tokens_per_s, context_tokens_per_s=0.0, read_bytes_per_s=0.0,
                           write_bytes_per_s=0.0, e2e_p95_s=worst, e2e_p99_s=worst, service_p95_s=worst,
                           service_p99_s=worst, sla_p95_s=SLA, sla_p99_s={q: 2 * v for q, v in SLA.items()},
                           storage_p95_s=0.0, service_histograms=hists, service_split_s=split or {},
                           tier_bytes_per_s=tiers or {})


def step_at(load: float, values: list[float]) -> Step:
    judged = JudgedStep(load, 0.0, min_requests=20, max_step_s=60.0)
    judged.add(sample(5.0, {"responsive": values}))
    return judged.judge()


# -- the judged step ---------------------------------------------------------------------------------------------


def test_a_step_waits_for_20_requests_per_class_and_judges_them_merged() -> None:
    """Two looks of 10 requests: the first look's own p95 is its slowest (0.3 s, over the 100 ms SLA), so the
    worst of the looks' p95s says over; merged, 1 slow of 20 leaves the p95 (the 19th) at 90 ms: within."""
    step = JudgedStep(8, 0.0, min_requests=20, max_step_s=60.0)
    step.add(sample(2.0, {"responsive": [0.05] * 9 + [0.3]}))
    assert step.shortfall() == "responsive 10 of 20 requests"
    step.add(sample(4.0, {"responsive": [0.05] * 9 + [0.09]}))
    assert step.shortfall() is None
    judged = step.judge()
    assert judged.verdict == WITHIN and judged.requests == 20
    assert judged.classes["responsive"].service_p95_ms == pytest.approx(90.0, rel=0.02)
    assert judged.saturation == pytest.approx(0.9, rel=0.02)


def test_the_p99_target_is_judged_once_it_is_a_percentile() -> None:
    """The SLA sla_met judges: p95 and p99.  3 slow of 100 put the p99 (250 ms) over its 200 ms target; 1 slow
    of 40 is their p99 too, but the p99 of 40 requests is simply the slowest: recorded, not judged."""
    hundred = step_at(8, [0.05] * 97 + [0.25] * 3)
    assert hundred.verdict == OVER and hundred.classes["responsive"].p99_judged
    assert hundred.reason.startswith("responsive service p99 249 ms of 200 ms")  # its bucket, within 1 %
    forty = step_at(8, [0.05] * 39 + [0.25])
    assert forty.verdict == WITHIN and not forty.classes["responsive"].p99_judged
    assert forty.classes["responsive"].service_p99_ms == pytest.approx(250.0)


def test_a_load_at_which_requests_failed_is_over_whatever_the_served_ones_say() -> None:
    step = JudgedStep(8, 0.0, min_requests=20, max_step_s=60.0)
    step.add(dataclasses.replace(sample(5.0, {"responsive": [0.01] * 30}), failed_requests=2))
    judged = step.judge()
    assert (judged.verdict, judged.failed) == (OVER, 2) and judged.reason.startswith("2 requests failed")
    assert answer([step_at(4, [0.01] * 30), judged]).load == 4


def test_a_step_without_its_requests_is_not_judged_and_its_rates_are_weighted_by_time() -> None:
    step = JudgedStep(4, 10.0, min_requests=20, max_step_s=60.0)
    step.add(sample(12.0, {"responsive": [0.01] * 5}, tokens_per_s=100.0, split={"queue": 1.0, "dram read host": 3.0},
                    tiers={"dram": {"read": 1000.0, "write": 0.0}}))
    step.add(sample(16.0, {"responsive": [0.01] * 5}, tokens_per_s=400.0, split={"queue": 1.0, "dram read device": 3.0},
                    tiers={"dram": {"read": 4000.0, "write": 0.0}}))
    judged = step.judge()
    assert judged.verdict == NOT_JUDGED and "responsive 10 of 20 requests" in judged.reason
    assert judged.duration_s == 6.0
    assert judged.generated_tokens_per_s == pytest.approx((100 * 2 + 400 * 4) / 6)
    assert judged.tiers["dram"]["read_bytes_per_s"] == pytest.approx((1000 * 2 + 4000 * 4) / 6)
    assert judged.tiers["dram"]["device_share"] == pytest.approx(0.5)
    assert judged.split == {"dram read device": 0.375, "dram read host": 0.375, "queue": 0.25}
    assert judged.dominant in ("dram read device", "dram read host")


def test_a_step_round_trips_through_its_result_record() -> None:
    step = step_at(16, list(np.linspace(0.01, 0.12, 40)))
    again = Step.from_dict(step.as_dict(), LatencyHistogram.from_dict)
    assert again.as_dict() == step.as_dict() and again.verdict == OVER


def test_a_step_counts_the_requests_issued_once_the_old_loads_last_one_finished() -> None:
    """Two requests of the old load are outstanding at the change (t=10): the ones issued at t=10.5 queued
    behind them and are left out; once the last old one finished (served at 11) new ones count.  A request
    issued before the window (never seen issued) does not hold the step open."""
    load = LoadRequests(0.0)

    def done(enqueued: float, served: float) -> Finished:
        return Finished(Request(0, 0, "responsive", 4, 1), "complete", enqueued, enqueued, served, served,
                        StepOutcome(storage_s=served - enqueued, decode_tokens_read=0))

    for t in (9.0, 9.5):
        load.issued(t)
    load.issued(10.5)
    load.finished(done(-1.0, 9.9))  # a warm-up request
    load.load_changed(10.0)
    load.finished(done(9.0, 10.6))
    for finished in (done(9.5, 11.0), done(10.5, 11.2)):
        load.finished(finished)
        load.add(finished)
    load.issued(11.5)
    load.finished(late := done(11.5, 11.7))
    load.add(late)
    load.issued(12.0)
    load.finished(dataclasses.replace(done(12.0, 12.1), kind="failed", outcome=None))
    histograms, split, failed = load.take()
    assert histograms["responsive"].count == 1 and histograms["responsive"].max == pytest.approx(0.2)
    assert (split, failed) == ({"queue": 0.0}, 1)


def test_an_open_loops_arrival_rate_changes_live_from_the_instant_it_is_set() -> None:
    """The source's clock runs ``scale`` times as fast from each change on; what was due before stays due."""
    arrivals = OpenLoopArrivals(source=None, users=UserPool(1), started_at=100.0, limit=64)  # type: ignore[arg-type]

    def due(arrival_s: float) -> float:
        return arrivals._due(Request(0, 0, "responsive", 4, 1, arrival_s=arrival_s))

    assert due(5.0) == 105.0
    arrivals.set_scale(102.0, 2.0)  # the source is at 2 s: 5 s is 3 source seconds = 1.5 s away
    assert (due(5.0), due(1.0)) == (103.5, 101.5)
    arrivals.set_scale(104.0, 0.5)  # the source is at 2 + 2 x 2 = 6 s, now at half speed
    assert due(7.0) == 106.0


# -- the search ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("boundary", [0, 1, 5, 13, 48, 100, 1000])
def test_the_search_brackets_the_boundary_within_the_steps_the_plan_promises(boundary: int) -> None:
    search, load, seen = Bisection(1, 1024, 0.05), 1, []
    while load is not None:
        seen.append(load)
        load = search.next(load, load <= boundary)
    assert search.lo <= boundary and (search.hi is None or boundary < search.hi)
    assert search.hi - search.lo <= max(1, 0.05 * search.lo)
    assert len(seen) <= steps_needed(1, 1024, 0.05)


def test_the_search_doubles_then_bisects() -> None:
    search, load, seen = Bisection(1, 1000, 0.0), 1, []
    while load is not None:
        seen.append(load)
        load = search.next(load, load <= 5)
    assert seen == [1, 2, 4, 8, 6, 5]
    assert (search.lo, search.hi, search.bracket()) == (5, 6, "within at 5, over at 6 users")


# -- the answer and its interval ---------------------------------------------------------------------------------


def test_the_answer_is_where_the_saturation_crosses_the_sla_between_two_steps() -> None:
    steps = [step_at(10, [0.05] * 40), step_at(20, [0.08] * 40), step_at(30, [0.12] * 40)]
    found = answer(steps)
    # 20 users at 0.8, 30 at 1.2: the crossing is half-way, 25; the samples do not vary, nor does the interval.
    assert (found.load, found.ci_low, found.ci_high, found.at_least) == (25, 25, 25, False)
    assert found.limited_by == "responsive: service p95 80 ms of 100 ms"
    assert found.line().startswith("max users within SLA: 25 (95 % CI 25-25), limited by responsive")


def test_the_interval_comes_from_the_steps_own_requests() -> None:
    """Noisy requests around the SLA widen the interval, it holds the answer, and the same steps give the same
    interval (a fixed bootstrap seed); with 10x the requests it narrows."""
    rng = np.random.default_rng(3)

    def noisy(load: float, scale: float, n: int) -> Step:
        return step_at(load, list(rng.lognormal(np.log(scale), 0.3, n)))

    few = [noisy(10, 0.03, 60), noisy(20, 0.055, 60), noisy(30, 0.09, 60)]
    many = [noisy(10, 0.03, 600), noisy(20, 0.055, 600), noisy(30, 0.09, 600)]
    wide, narrow = answer(few), answer(many)
    assert wide.ci_low <= wide.load <= wide.ci_high and wide.ci_high - wide.ci_low >= 2
    assert narrow.ci_high - narrow.ci_low < wide.ci_high - wide.ci_low
    assert answer(few).as_dict() == wide.as_dict()


def test_no_step_over_is_a_lower_bound_and_a_step_not_judged_counts_as_over() -> None:
    assert answer([step_at(8, [0.01] * 30), step_at(16, [0.02] * 30)]).line() == (
        "max users within SLA: at least 16 (95 % CI 16-16), limited by responsive: service p95 20 ms of 100 ms")
    short = step_at(32, [0.01] * 5)
    assert short.verdict == NOT_JUDGED
    found = answer([step_at(8, [0.01] * 30), step_at(16, [0.02] * 30), short])
    assert (found.load, found.at_least) == (16, False)  # nothing is known above 16: no interpolation into 32
    assert answer([]).load is None
    over = answer([step_at(2, [0.3] * 30), step_at(1, [0.15] * 30)])  # over already at 1 user: limited there
    assert (over.load, over.limited_by) == (0, "responsive: service p95 150 ms of 100 ms")


def test_the_bootstrap_quantile_reads_the_histograms_percentile() -> None:
    h = histogram(list(np.linspace(0.001, 0.1, 1000)))
    draws = h.bootstrap_quantile(0.95, 2000, np.random.default_rng(1))
    assert np.median(draws) == pytest.approx(h.quantile(0.95), rel=0.02)
    assert np.all(draws <= h.max) and np.ptp(draws) > 0
    assert np.isnan(LatencyHistogram().bootstrap_quantile(0.95, 3, np.random.default_rng(1))).all()


# -- the sla_search autoscaler -------------------------------------------------------------------------------------


def test_sla_search_holds_each_step_until_judged_and_reports_the_answer() -> None:
    """A system whose p95 is 20 ms per user: 5 users is the last within 100 ms."""
    scaler = SLASearchAutoscaler({"resolution": 0}, initial_users=1, max_users=64)
    t, actions = 0.0, []
    while not scaler.search.done:
        t += 1.0
        p95 = 0.02 * scaler.users
        decision = scaler.decide(sample(t, {"responsive": [p95] * 12}))
        actions.append((decision.action, decision.users))
    assert actions == [("hold", 1), ("scale_up", 2), ("hold", 2), ("scale_up", 4), ("hold", 4), ("scale_up", 8),
                       ("hold", 8), ("scale_down", 6), ("hold", 6), ("scale_down", 5), ("hold", 5), ("scale_up", 6),
                       ("hold", 6), ("scale_down", 5), ("hold", 5), ("found", 5)]
    summary = scaler.summary()
    assert (summary["max_users_within_sla"], summary["ci95"], summary["search_finished"]) == (5, [5, 5], True)
    assert [(s["load"], s["verdict"]) for s in summary["steps"]] == [
        (1, WITHIN), (2, WITHIN), (4, WITHIN), (8, OVER), (6, OVER), (5, WITHIN), (6, OVER), (5, WITHIN)]
    assert (summary["repeated_loads"], summary["drift"]) == (2, 0.0)  # the same p95s twice: no drift


def test_a_class_starved_at_a_higher_load_is_not_left_out_of_its_judgement() -> None:
    """Responsive and batch both complete requests at 1-2 users; from 4 users batch (the lower priority)
    completes none, and responsive alone is well within: the step waits for batch until max_step_s and is
    not judged (over), so 2 users is the answer, not a load at which batch is never served."""
    scaler = SLASearchAutoscaler({"resolution": 0, "max_step_s": 10}, initial_users=1, max_users=64)
    t = 0.0
    while not scaler.search.done and t < 1000:
        t += 1.0
        values = {"responsive": [0.01] * 12}
        if scaler.users <= 2:
            values["batch"] = [0.01] * 12
        scaler.decide(sample(t, values))
    summary = scaler.summary()
    verdicts = {s["load"]: s["verdict"] for s in summary["steps"]}
    assert verdicts[1] == verdicts[2] == WITHIN and verdicts[4] == NOT_JUDGED
    assert summary["max_users_within_sla"] == 2
    starved = next(s for s in summary["steps"] if s["load"] == 4)
    assert starved["reason"].startswith("batch 0 of 20 requests after 10")
