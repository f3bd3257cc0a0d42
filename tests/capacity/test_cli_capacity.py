"""``kvbench capacity``: a fake tier with a known service time gives a known answer, the budget holds, and
``--json`` parses.

The tier sleeps a known time per byte (a memory-like backend, as slow as a disk); with one worker and no
think time or generation pacing, U closed-loop users see a service time of about U x one write, so an SLA
between 5 and 6 writes makes 5 users the answer.

The SLA sits half a write from either side, because the machine's own time pushes both ways: time inside
a request's service (scheduling, the copy) adds up over the 5 queued writes ahead of it and pushes 5 users
over; time between a user's answer and its next request (the closed loop's turn, under a loaded CPU) is
time the worker idles, so 6 users queue less and can come in under an SLA set just below 6 writes (it did,
under CI load, at 5.9 writes of 100 ms)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import small_spec
from known_tiers import PerBytePlugin
from testkit import registered

from kvbench_core.cli import main
from kvbench_core.runspec.overrides import _deep_merge

#: Every request writes one entry of 4 tokens x 24 KiB (tiny-1b) = 96 KiB: copying it costs nothing beside
#: the tier's time, so a request's service is the tier's known time plus a few ms of scheduling.
TOKENS = 4
ENTRY = TOKENS * 24 * 1024
WRITE_S = 0.100  # the tier's time for one entry: 5 users ~ 500 ms of service, 6 ~ 600 ms
SLA_MS = 590  # 5.9 writes: what the budget and open-loop tests judge against
#: The known-answer test's tier and SLA: 5 users ~ 1.0 s, 6 ~ 1.2 s, the SLA between them, so 5 stays within
#: up to 20 ms of a request's own overhead per queued write and 6 stays over up to 100 ms of idle per turn.
KNOWN_WRITE_S = 0.200
KNOWN_SLA_MS = 1100


@pytest.fixture
def perbyte_tier() -> Iterator[None]:
    with registered(PerBytePlugin(), "test-perbyte-tier"):
        yield


def capacity_spec(write_spec: Any, tmp_path: Any, write_s: float = WRITE_S, sla_ms: int = SLA_MS,
                  **extra: Any) -> str:
    spec = small_spec(
        cache={"tiers": [{"name": "slow", "backend": "perbyte", "capacity": "256MiB",
                          "options": {"s_per_byte": write_s / ENTRY}}]},
        workload={"users": 1, "max_inflight": 1, "mode": "prefill-only", "generation": "none",
                  "options": {"no_reads": True, "qos_mix": {"interactive": 0, "responsive": 1, "batch": 0},
                              "profiles": {"chatbot": {"context": [TOKENS, TOKENS], "generate": [1, 1],
                                                       "think_s": [0, 0]}}}},
        qos={"responsive": {"p95": f"{sla_ms}ms"}},
        output={"directory": str(tmp_path / "results")})
    del spec["requests"]
    return str(write_spec(_deep_merge(spec, extra)))


@pytest.mark.slow
def test_a_tier_of_known_service_time_gives_the_known_answer(perbyte_tier: None, write_spec: Any, tmp_path: Any,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    path = capacity_spec(write_spec, tmp_path, write_s=KNOWN_WRITE_S, sla_ms=KNOWN_SLA_MS)
    began = time.perf_counter()
    code = main(["capacity", path, "--budget", "90s", "--step", "1s", "--resolution", "0", "-q"])
    wall = time.perf_counter() - began
    out = capsys.readouterr().out
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0] == "capacity search: t, closed loop (users)"
    answer = next(line for line in lines if line.startswith("max users within SLA"))
    assert answer.startswith("max users within SLA: 5 (95 % CI "), out
    assert "limited by responsive: service p95" in answer and f"of {KNOWN_SLA_MS:,} ms" in answer
    assert lines.index(answer) < lines.index(next(line for line in lines if line.strip().startswith("users")))
    assert wall < 90 + 10  # the budget, and set-up and clean-up
    result = json.loads((tmp_path / "results").glob("*.json").__next__().read_text())
    steps = result["autoscaling"]["summary"]["steps"]
    assert [s["load"] for s in steps][:4] == [1, 2, 4, 8] and steps[-1]["load"] in (5, 6)
    for step in steps:  # each step judged on its own >= 20 requests, p95 from its merged histogram
        assert step["classes"]["responsive"]["requests"] >= 20
        assert step["verdict"] == ("within" if step["load"] <= 5 else "over")
    # the service time grows ~ one write per user, as the tier's known time says
    by_load = {s["load"]: s["classes"]["responsive"]["service_p95_ms"] for s in steps}
    assert by_load[8] / by_load[4] == pytest.approx(2.0, rel=0.25)


@pytest.mark.slow
def test_the_budget_holds_and_json_parses(perbyte_tier: None, write_spec: Any, tmp_path: Any,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """A budget too short for the search: the run ends inside it and says the search did not finish."""
    path = capacity_spec(write_spec, tmp_path)
    began = time.perf_counter()
    code = main(["capacity", path, "--budget", "8s", "--step", "1s", "--json"])
    wall = time.perf_counter() - began
    captured = capsys.readouterr()
    document = json.loads(captured.out)
    assert code == 0 and wall < 8 + 8
    assert document["search_finished"] is False and document["budget_s"] == 8.0
    assert document["steps"] and all("histograms" not in step for step in document["steps"])
    assert document["max_users_within_sla"] is not None and document["at_least"] is True
    assert {"ci95", "drift", "repeated_loads", "method"} <= document.keys()  # the interval's whole record
    assert "capacity search:" in captured.err  # the plan goes to stderr, so stdout is the JSON alone


@pytest.mark.slow
def test_repeated_searches_add_the_interval_the_next_search_lands_in(perbyte_tier: None, write_spec: Any, tmp_path: Any,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """--repeats 2 on a 24 s budget: two searches of 12 s, each its own result, and above them the mean answer
    with the prediction interval of the two (capacity/repeats.py), at least as wide as the median search's."""
    path = capacity_spec(write_spec, tmp_path)
    code = main(["capacity", path, "--budget", "24s", "--step", "1s", "--repeats", "2", "--json"])
    captured = capsys.readouterr()
    document = json.loads(captured.out)
    assert code == 0 and "2 searches in a row, 12 s each" in captured.err
    searches = document["searches"]
    assert len(searches) == 2 and len({s["result"] for s in searches}) == 2
    assert all(s["budget_s"] == 12.0 and s["max_users_within_sla"] is not None for s in searches)
    answers = [s["max_users_within_sla"] for s in searches]
    assert document["answers"] == answers and document["max_users_within_sla"] == sum(answers) // 2
    low, high = document["ci95"]
    assert low <= min(answers) and max(answers) <= high
    widths = sorted(own_high - own_low for own_low, own_high in (s["ci95"] for s in searches))
    assert high - low >= sum(widths) / 2 - 1  # never narrower than the median search's own (rounded ends)
    assert main(["capacity", path, "--repeats", "0"]) != 0
    assert capsys.readouterr().err.strip().splitlines() == ["kvbench: error: --repeats 0: at least 1 search"]


def test_a_spec_the_search_cannot_run_is_refused_in_one_line(perbyte_tier: None, write_spec: Any, tmp_path: Any,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    path = capacity_spec(write_spec, tmp_path, requests=30)
    assert main(["capacity", path]) != 0
    assert capsys.readouterr().err.strip().splitlines() == [
        "kvbench: error: requests: 30 would end the search after that many requests; remove it (the budget "
        "bounds the search)"]
    assert main(["capacity", capacity_spec(write_spec, tmp_path), "--budget", "2s", "--step", "1s"]) != 0
    assert "--budget 2s: leaves 1 s for the search after warm-up 0 s and the drain limit 1 s" in capsys.readouterr().err
    assert not (tmp_path / "results").exists()


@pytest.mark.slow
def test_an_open_loop_searches_its_arrival_rate(perbyte_tier: None, write_spec: Any, tmp_path: Any,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Poisson arrivals at 2/s onto one worker of ~100 ms: 800 % (16/s) is past what it serves, 100 % is far
    inside; the served rate of each step within follows the searched rate, and the answer lies between."""
    path = capacity_spec(write_spec, tmp_path, workload={"options": {"arrival": {"process": "poisson", "rate": 2}}})
    code = main(["capacity", path, "--budget", "90s", "--step", "1s", "--resolution", "0.1", "--json", "-q"])
    captured = capsys.readouterr()
    document = json.loads(captured.out)
    assert code == 0 and "open loop (arrival rate, in % of the spec's)" in captured.err
    assert document["load_kind"] == "arrival_rate_percent" and "max_users_within_sla" not in document
    steps = document["steps"]
    assert [s["load"] for s in steps][:3] == [100, 200, 400]
    for step in steps:
        if step["verdict"] == "within":
            assert step["requests_per_s"] == pytest.approx(2 * step["load"] / 100, rel=0.35)
    assert 100 <= document["max_arrival_rate_percent_within_sla"] < 800
    assert any(s["verdict"] == "over" for s in steps)
