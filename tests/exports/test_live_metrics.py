"""``output.metrics: {port: N}``: a real run serves OpenMetrics on 127.0.0.1 while it runs — per-tier bytes,
operations and latency histograms, requests per QoS class, users and phase — scraped during the run and
parsed with prometheus-client's OpenMetrics parser; the port is closed when the run ends; a port already in
use is one line before anything runs; the Grafana dashboard asks only for metrics a scrape returns."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from testkit import free_port
from tiny_spec import run_cli, tiny_spec

parser = pytest.importorskip("prometheus_client.openmetrics.parser")
DASHBOARD = Path(__file__).resolve().parents[2] / "examples" / "grafana" / "kvbench-live.json"
ACCEPT = {"Accept": "application/openmetrics-text; version=1.0.0; charset=utf-8"}


def _scrape(port: int) -> dict[str, Any]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers=ACCEPT)
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.headers["Content-Type"].startswith("application/openmetrics-text")
        text = response.read().decode()
    return {family.name: family for family in parser.text_string_to_metric_families(text)}


def _samples(family: Any, name: str | None = None) -> dict[tuple[tuple[str, str], ...], float]:
    return {tuple(sorted(s.labels.items())): s.value for s in family.samples if name is None or s.name == name}


@pytest.fixture(scope="module")
def scrapes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Scrapes of a 3 s tiny run, every 0.2 s from a thread while the run runs in this one."""
    root = tmp_path_factory.mktemp("live")
    port = free_port()
    spec = yaml.safe_load(tiny_spec(root, duration="3s").read_text())
    spec["output"]["metrics"] = {"port": port}
    seen: list[dict[str, Any]] = []
    done = threading.Event()

    def scrape_while_running() -> None:
        while not done.is_set():
            with contextlib.suppress(OSError):  # not listening yet
                seen.append(_scrape(port))
            time.sleep(0.2)

    scraper = threading.Thread(target=scrape_while_running, daemon=True)
    scraper.start()
    code, _, err = run_cli(root, spec)
    done.set()
    scraper.join(timeout=10)
    result = json.loads(next((root / "out").glob("*.json")).read_text())
    return {"code": code, "err": err, "seen": seen, "port": port, "result": result}


def _phase(scrape: dict[str, Any]) -> str:
    return next(dict(labels)["phase"] for labels, value in _samples(scrape["kvbench_phase"]).items() if value == 1)


def test_a_scrape_during_the_measured_window_has_every_figure(scrapes: dict[str, Any]) -> None:
    assert scrapes["code"] == 0, scrapes["err"]
    measuring = [s for s in scrapes["seen"] if _phase(s) == "measure"]
    assert measuring, [_phase(s) for s in scrapes["seen"]]
    last = measuring[-1]
    tiers = set(scrapes["result"]["metrics"]["tiers"])
    moved = _samples(last["kvbench_tier_bytes"], "kvbench_tier_bytes_total")
    assert {dict(labels)["tier"] for labels in moved} == tiers
    assert sum(moved.values()) > 0
    assert _samples(last["kvbench_users"]) == {(): 3.0}
    assert _samples(last["kvbench_run"], "kvbench_run_info") == {
        (("run_id", scrapes["result"]["run"]["id"]), ("spec", "tiny")): 1.0}
    requests = _samples(last["kvbench_requests"], "kvbench_requests_total")
    assert {dict(labels)["qos_class"] for labels in requests} == set(scrapes["result"]["metrics"]["qos"])
    assert sum(requests.values()) > 0
    latency = last["kvbench_tier_latency_seconds"]
    counts = _samples(latency, "kvbench_tier_latency_seconds_count")
    infinite = {labels: v for labels, v in _samples(latency, "kvbench_tier_latency_seconds_bucket").items()
                if dict(labels)["le"] == "+Inf"}
    ops = _samples(last["kvbench_tier_operations"], "kvbench_tier_operations_total")
    for labels, count in counts.items():  # the histogram counts every operation, its +Inf bucket too
        assert infinite[tuple(sorted((*labels, ("le", "+Inf"))))] == count == ops[labels]


def test_the_phases_follow_the_run_and_counters_only_grow_in_the_window(scrapes: dict[str, Any]) -> None:
    phases = [_phase(s) for s in scrapes["seen"]]
    order = ["setup", "warmup", "measure", "drain", "results"]
    assert [order.index(p) for p in phases] == sorted(order.index(p) for p in phases)
    totals = [sum(_samples(s["kvbench_tier_bytes"], "kvbench_tier_bytes_total").values())
              for s in scrapes["seen"] if _phase(s) == "measure"]
    assert totals == sorted(totals)


def test_the_port_is_closed_when_the_run_ends(scrapes: dict[str, Any]) -> None:
    with pytest.raises(OSError):
        _scrape(scrapes["port"])


def test_a_port_in_use_is_one_line_before_the_run(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        spec = yaml.safe_load(tiny_spec(tmp_path).read_text())
        spec["output"]["metrics"] = {"port": taken.getsockname()[1]}
        code, _, err = run_cli(tmp_path, spec)
    assert code == 2 and err.count("\n") == 1 and "output.metrics: cannot serve on 127.0.0.1:" in err
    assert not (tmp_path / "out").exists()


def test_the_dry_run_refuses_a_port_in_use_as_the_run_does(tmp_path: Path) -> None:
    """Binding the port needs no storage I/O, so the dry run says it too (issue #31 §5, review R1)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        spec = yaml.safe_load(tiny_spec(tmp_path).read_text())
        spec["output"]["metrics"] = {"port": taken.getsockname()[1]}
        code, _, err = run_cli(tmp_path, spec, "--dry-run")
    assert code == 2 and err.count("\n") == 1 and "output.metrics: cannot serve on 127.0.0.1:" in err


def test_every_dashboard_query_names_a_metric_the_run_serves(scrapes: dict[str, Any]) -> None:
    import re

    dashboard = json.loads(DASHBOARD.read_text())
    served = {sample.name for family in scrapes["seen"][-1].values() for sample in family.samples}
    queries = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]
    assert len(queries) >= 6
    for query in queries:
        names = set(re.findall(r"kvbench_[a-z0-9_]+", query))
        assert names and names <= served, (query, names - served)


def test_without_prometheus_client_the_run_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    spec = yaml.safe_load(tiny_spec(tmp_path).read_text())
    spec["output"]["metrics"] = {"port": free_port()}
    code, _, err = run_cli(tmp_path, spec)
    assert code == 2 and "pip install 'kvbench-core[metrics]'" in err and not (tmp_path / "out").exists()
