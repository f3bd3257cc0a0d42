"""Lifecycle hooks see a frozen, typed view of the run, not the runner's mutable state (#18)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import small_spec

from kvbench_core.contracts.lifecycle import RunView
from kvbench_core.contracts.plugins import get_plugin_manager, hookimpl


class Watcher:
    def __init__(self) -> None:
        self.seen: list[Any] = []

    @hookimpl
    def kvbench_measurement_started(self, run: Any) -> None:
        self.seen.append(run)

    @hookimpl
    def kvbench_measurement_finished(self, run: Any) -> None:
        self.seen.append(run)


@pytest.fixture
def watcher() -> Iterator[Watcher]:
    plugin = Watcher()
    get_plugin_manager().register(plugin, name="test-run-view")
    yield plugin
    get_plugin_manager().unregister(name="test-run-view")


def test_hooks_get_a_frozen_view(watcher: Watcher, run_spec: Any) -> None:
    run_spec(small_spec(requests=4))
    started, finished = watcher.seen
    assert isinstance(started, RunView) and isinstance(finished, RunView)
    assert [tier.name for tier in started.tiers] == ["dram"] and started.run_id == finished.run_id
    assert finished.measure_end is not None and finished.measure_end >= finished.measure_start
    with pytest.raises(dataclasses.FrozenInstanceError):
        started.run_id = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        started.spec["seed"] = 1  # type: ignore[index]


def test_the_view_is_a_snapshot_of_public_facts(watcher: Watcher, run_spec: Any) -> None:
    """No live backend or telemetry reaches a hook: the tier is its name, backend name, capacity and
    description, and the latency summaries come with the finished hook only (issue #30 §3)."""
    run_spec(small_spec(requests=4))
    started, finished = watcher.seen
    (tier,) = started.tiers
    assert (tier.backend, tier.directory) == ("cpu", None) and tier.capacity_bytes > 0
    assert started.latency == {} and set(finished.latency) == {"dram"}
    assert finished.latency["dram"]["write"]["total"]["count"] > 0
    with pytest.raises(TypeError):
        tier.description["x"] = 1  # type: ignore[index]
