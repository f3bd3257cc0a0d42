"""The run is born whole (issue #30 §3): its parts are assembled before the loop, and nothing is created on
the runner, the run's state or the loop while it runs.

Before, ``Runner._drive`` created eight attributes as it went (the window, the pools, the arrivals, the
autoscaler, the tick and scale instants, the autoscaler's step) and the run's state had its tiers, source
and telemetry filled in half-way.  Now the runner, the state and the loop have slots (an attribute that is
not declared cannot be set, at any moment), the parts are one frozen object, and the parts the loop ends
with are the very objects assembled before it began.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, ClassVar

import pytest
from conftest import small_spec
from testkit import registered

from kvbench_core.builtins.memory import CPUMemoryBackend
from kvbench_core.contracts.errors import BackendUnavailable
from kvbench_core.contracts.plugins import hookimpl
from kvbench_core.engine.run import loop as loop_module
from kvbench_core.engine.run.parts import RunParts
from kvbench_core.engine.run.runner import Runner
from kvbench_core.runspec.loader import resolve, validate
from kvbench_core.runspec.plan import plan_run


def test_the_loop_runs_on_the_parts_assembled_before_it_and_creates_no_attribute(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = small_spec(requests=12, autoscaler={"name": "qos", "options": {"interval_s": 0.2}},
                      output={"directory": str(tmp_path), "interval": 0.1})  # every part there is
    validate(spec)
    runner: Runner | None = None
    before: dict[str, Any] = {}

    def barrier() -> None:  # the last step of set-up: the loop has not begun
        assert runner is not None and runner.parts is not None
        before.update(parts=runner.parts, each={f.name: getattr(runner.parts, f.name)
                                                for f in dataclasses.fields(RunParts)})

    loops: list[loop_module.RunLoop] = []
    drive = loop_module.RunLoop.drive

    def watched(self: loop_module.RunLoop) -> None:
        loops.append(self)
        drive(self)

    monkeypatch.setattr(loop_module.RunLoop, "drive", watched)
    runner = Runner(plan_run(resolve(spec, str(tmp_path))), barrier=barrier)
    state = runner.run()
    assert state.status == "ended" and state.telemetry.requests == 12  # a whole run: window, drain, cleanup
    assert runner.parts is before["parts"]
    assert {f.name: getattr(runner.parts, f.name) for f in dataclasses.fields(RunParts)} == before["each"]
    (loop,) = loops
    for owner in (runner, state, loop):
        assert not hasattr(owner, "__dict__"), f"{type(owner).__name__} can grow attributes"
        with pytest.raises(AttributeError):
            owner.born_mid_run = True  # type: ignore[union-attr]
    with pytest.raises(dataclasses.FrozenInstanceError):
        runner.parts.window = None  # type: ignore[misc]


class Closes(CPUMemoryBackend):
    """A DRAM tier that notes its closing."""

    name = "closes"
    closed: ClassVar[list[str]] = []

    def close(self) -> None:
        type(self).closed.append(self.context.tier_name)
        super().close()


class RefusesToOpen(Closes):
    name = "refuses"

    def open(self) -> None:
        raise BackendUnavailable("refuses: the endpoint is down")


class _Plugin:
    @hookimpl
    def kvbench_storage_backends(self) -> dict[str, type]:
        return {"closes": Closes, "refuses": RefusesToOpen}


def test_a_set_up_that_fails_half_way_still_closes_the_tiers_it_opened(tmp_path: Path) -> None:
    """The parts are never assembled (the second tier cannot open); the state still lists the tier that did
    open, it is closed, and the run is reported failed with the tier's own words."""
    spec = small_spec(cache={"tiers": [{"name": "first", "backend": "closes", "capacity": "64MiB"},
                                       {"name": "second", "backend": "refuses", "capacity": "64MiB"}]},
                      output={"directory": str(tmp_path)})
    Closes.closed = []
    with registered(_Plugin(), "test-run-parts"):
        validate(spec)
        runner = Runner(plan_run(resolve(spec, str(tmp_path))))
        state = runner.run()
    assert runner.parts is None
    assert (state.status, state.stop_reason) == ("failed", "refuses: the endpoint is down")
    assert [tier.name for tier in state.tiers] == ["first"]
    assert Closes.closed == ["first"]
