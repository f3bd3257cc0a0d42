"""``kvbench forecast``: a forecast of the measured configuration reproduces the run, what-ifs move it the
way the known service times say, and what the model cannot say is refused in one line.

The measured run is over a fake tier of known service time (``PerByteTier``: a memory tier that sleeps a
known time per byte) below a 1 MiB DRAM tier, so requests hit DRAM, demote and read the slow tier."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from known_tiers import PerBytePlugin
from testkit import registered
from tiny_spec import history_spec

from kvbench_core.cli import main
from kvbench_core.forecast.forecast import Forecaster, directories_not_needed, measured_figures

S_PER_BYTE = 0.020 / (1 << 20)  # 20 ms per MiB: the slow tier's known service time


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One measured run (4 users, 2 workers, 6 s after 1 s warm-up) and its result path."""
    root = tmp_path_factory.mktemp("forecast")
    spec = history_spec([{"name": "slow", "backend": "perbyte", "capacity": "256MiB",
                          "options": {"s_per_byte": S_PER_BYTE}}], users=4,
                        duration="6s", warmup="1s", output={"directory": str(root / "results"), "progress": "off"})
    del spec["requests"]
    spec["workload"]["options"]["multi_turn"]["max_turns"] = 4
    path = root / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    with registered(PerBytePlugin(), "test-forecast-perbyte"):
        assert main(["run", str(path), "-q"]) == 0
        yield next((root / "results").glob("*.json"))  # registered while the module's tests read it


def test_a_forecast_of_the_measured_configuration_reproduces_the_run(measured: Path) -> None:
    forecaster = Forecaster(str(measured))
    forecast, run = forecaster.forecast([], []), measured_figures(forecaster.result)
    # Tolerances: the simulation draws from the run's own latency histograms over its own request stream,
    # so counts agree to the run's noise; 25 % on a 6 s window of ~200 requests.
    assert forecast["requests_completed"] == pytest.approx(run["requests_completed"], rel=0.25)
    assert forecast["cache_hit_rate"] == pytest.approx(run["cache_hit_rate"], abs=0.08)
    # A class's p95 of 40 requests is its second slowest, and this 2-core machine is shared: the median error
    # over the classes is the figure (as docs/FORECAST.md's targets), within 45 % here (15-40 % seen).
    errors = sorted(abs(forecast["qos"][name]["service_p95_ms"] / q["service_p95_ms"] - 1)
                    for name, q in run["qos"].items() if q["requests"] >= 20)
    assert errors and errors[len(errors) // 2] <= 0.45, (errors, forecast["qos"], run["qos"])
    for tier, ops in run["tiers"].items():
        for op, gbps in ops.items():
            assert forecast["tiers"][tier][op] == pytest.approx(gbps, rel=0.3), (tier, op)


def test_a_faster_tier_and_more_users_move_the_forecast_as_the_service_times_say(measured: Path) -> None:
    forecaster = Forecaster(str(measured))
    base = forecaster.forecast([], [])
    faster = forecaster.forecast([], ["slow.bandwidth=x4"])
    crowded = forecaster.forecast(["workload.users=16"], [])  # still 2 workers: requests wait for one
    assert faster["requests_per_s"] > base["requests_per_s"]
    assert crowded["requests_per_s"] == pytest.approx(base["requests_per_s"], rel=0.3)  # the workers bound it
    assert base["beyond_measured"] == [] == crowded["beyond_measured"]  # still the 2 measured workers
    more = forecaster.forecast(["workload.max_inflight=8", "workload.users=8"], [])
    assert [line.split(":")[0] for line in more["beyond_measured"]] == ["dram", "slow"]
    longer = forecaster.forecast(["workload.options.profiles.chatbot.context=[160,480]"], [])  # 10x the tokens
    assert any(line.startswith("slow write: operations of") for line in longer["beyond_measured"])
    bigger = forecaster.forecast([], ["dram.capacity=256MiB"])  # everything fits in DRAM: no slow reads
    assert bigger["reads_served_by_tier"].get("slow", 0) == 0 < base["reads_served_by_tier"]["slow"]
    assert bigger["tiers"].get("slow", {}).get("read", 0.0) == 0.0
    # ... unless the runner's tick moves entries idle for 0.5 s down to it
    cold = forecaster.forecast(["cache.tiers.1.cold_after=0.5s"], ["dram.capacity=256MiB"])
    assert cold["tiers"]["slow"]["write"] > bigger["tiers"].get("slow", {}).get("write", 0.0)


def test_an_arrival_rate_is_forecast_as_an_open_loop(measured: Path) -> None:
    """The source's own Poisson arrivals (``--set`` of the arrival process): below the tiers' ceiling,
    what arrives is served (30 s: ~300 arrivals, so the Poisson count is within a few %)."""
    forecast = Forecaster(str(measured)).forecast(["workload.options.arrival.process=poisson",
                                                   "workload.options.arrival.rate=10", "duration=30s"], [])
    assert forecast["requests_per_s"] == pytest.approx(10, rel=0.3)
    assert forecast["requests_dropped"] == 0


@pytest.mark.parametrize(("args", "why"), [
    (["--tier", "nvme.bandwidth=x2"], "tier 'nvme' has no measurement in the result"),
    (["--tier", "slow.bandwidth=4"], "a factor is written xN"),
    (["--tier", "slow.speed=x4"], "expected NAME.bandwidth=xN or NAME.capacity=SIZE"),
    (["--set", "workload.users=400", "--set", "workload.max_inflight=400"], "the fitted model says nothing past"),
    (["--clients", "0"], "--clients 0: at least 1"),
])
def test_what_the_model_cannot_say_is_refused_in_one_line(measured: Path, args: list[str], why: str,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["forecast", str(measured), *args])  # the fixture keeps the fake tier registered
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and why in err, err


def test_json_has_the_forecast_the_measured_figures_and_the_search(measured: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["forecast", str(measured), "--json", "--search", "--max-users", "8"])
    document = json.loads(capsys.readouterr().out)
    assert code == 0
    assert document["forecast"]["users"] == 4 and document["measured"]["requests_completed"] > 0
    search = document["search"]
    assert search["steps"][0]["users"] == 4 and all(s["users"] <= 8 for s in search["steps"])
    within = [s["users"] for s in search["steps"] if s["sla_met"]]
    assert search["max_users_within_sla"] == max(within, default=0)


@pytest.mark.slow
def test_ten_thousand_users_for_300_s_finish(measured: Path) -> None:
    """The issue's size (docs/FORECAST.md records its wall time); no time is asserted."""
    forecast = Forecaster(str(measured)).forecast(["workload.users=10000", "duration=300s"], [])
    assert forecast["users"] == 10000 and forecast["requests_completed"] > 0


def test_a_tier_directory_missing_here_is_no_reason_to_refuse() -> None:
    """A result from another machine names its directories there: each file tier is told create: true,
    which lifts the loader's refusal; a forecast opens no backend, so nothing is created."""
    result = {"spec": {"as_written": {"cache": {"tiers": [
        {"name": "dram", "backend": "cpu", "capacity": "1GiB"},
        {"name": "nvme", "backend": "nvme", "capacity": "1GiB", "options": {"path": "/elsewhere/kv"}}]}}}}
    assert directories_not_needed(result) == ["cache.tiers.1.options.create=true"]
