"""Lifecycle hooks see a frozen, typed view of the run, not the runner's mutable state (#18)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import small_spec

from kvbench_core.contracts.plugins import get_plugin_manager, hookimpl
from kvbench_core.engine.run_state import RunView


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
