"""The run plan (#18): a spec is turned into one frozen, typed plan, and a run does each piece of set-up
once: plugin options validated once, every backend built once, the model resolved once.

The counters wrap the real functions (nothing is stubbed): a quickstart-like run through ``kvbench run``
in this process, with a DRAM tier over a directory tier, the synthetic source and the qos autoscaler.
"""

from __future__ import annotations

import dataclasses
import pickle
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import small_spec

from kvbench_core.cli import main
from kvbench_core.contracts import validation
from kvbench_core.contracts.plugins import registry
from kvbench_core.runspec import plan as plan_module
from kvbench_core.runspec.loader import load_plan
from kvbench_core.runspec.plan import RunPlan

pytest.importorskip("kvbench_nvme")


def spec_file(tmp_path: Path) -> Path:
    raw = small_spec(duration="1s", requests=None, workload={"users": 2},
                     autoscaler={"name": "qos"},
                     output={"directory": str(tmp_path / "out")},
                     cache={"tiers": [{"name": "dram", "backend": "cpu", "capacity": "8MiB"},
                                      {"name": "disk", "backend": "nvme", "capacity": "64MiB",
                                       "options": {"path": str(tmp_path / "tier"), "fsync": False}}]})
    del raw["requests"]
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


@dataclasses.dataclass
class Counts:
    models: int = 0
    validations: list[Any] = dataclasses.field(default_factory=list)  # the schema of every validation
    built: Counter[str] = dataclasses.field(default_factory=Counter)  # plugin class name -> constructions


@pytest.fixture
def counts(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counts]:
    seen = Counts()
    resolve_model = plan_module.resolve_model

    def counted_model(*args: Any, **kwargs: Any) -> Any:
        seen.models += 1
        return resolve_model(*args, **kwargs)

    monkeypatch.setattr(plan_module, "resolve_model", counted_model)
    original = validation.validate_or_raise

    def counted_validation(instance: Any, schema: Any, *args: Any, **kwargs: Any) -> None:
        seen.validations.append(schema)
        original(instance, schema, *args, **kwargs)

    # Every module that imported validate_or_raise by name gets the counting one.
    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith(("kvbench", "plugins")) and \
                getattr(module, "validate_or_raise", None) is original:
            monkeypatch.setattr(module, "validate_or_raise", counted_validation)
    for kind in ("backend", "source", "autoscaler"):
        for cls in set(registry(kind).values()):
            monkeypatch.setattr(cls, "__init__", _counting(cls.__init__, cls.__name__, seen.built))
    yield seen


def _counting(init: Callable[..., None], name: str, built: Counter[str]) -> Callable[..., None]:
    def counted(self: Any, *args: Any, **kwargs: Any) -> None:
        if type(self).__name__ == name:  # a subclass's super().__init__ is the same construction
            built[name] += 1
        init(self, *args, **kwargs)

    return counted


def plugin_schemas() -> list[Any]:
    return [cls.options_schema for kind in ("backend", "source", "autoscaler") for cls in registry(kind).values()]


def test_a_run_validates_options_once_builds_each_backend_once_and_resolves_the_model_once(
        tmp_path: Path, counts: Counts) -> None:
    assert main(["run", str(spec_file(tmp_path)), "-q"]) == 0
    assert counts.models == 1
    # Plugin options are validated by the composed spec schema, once; no plugin schema is checked again.
    assert not [schema for schema in counts.validations if any(schema is s for s in plugin_schemas())]
    assert len(counts.validations) == 1
    backend_classes = {registry("backend")[name].__name__ for name in ("cpu", "nvme")}
    source, autoscaler = registry("source")["synthetic"].__name__, registry("autoscaler")["qos"].__name__
    assert counts.built == Counter({name: 1 for name in (*backend_classes, source, autoscaler)})


def test_spec_validate_checks_what_backends_refuse_without_building_one(tmp_path: Path, counts: Counts,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """A backend's own option checks (``check_options``: what its schema cannot say) run at validation,
    before anything is built or written; validation builds nothing."""
    path = spec_file(tmp_path)
    assert main(["spec", "validate", str(path)]) == 0
    assert counts.models == 1 and not counts.built
    assert main(["spec", "validate", str(path), "--set", "cache.tiers[1].options.direct=true",
                 "--set", "cache.tiers[1].options.transfer_size=1000"]) == 2
    assert "cache.tiers[1].options.transfer_size: with direct: true the transfer size must be a multiple of 4 KiB" \
        in capsys.readouterr().err
    assert not counts.built
    assert not (tmp_path / "tier").exists() and not (tmp_path / "out").exists()


def test_the_plan_is_frozen_typed_and_travels_to_a_client_process_whole(tmp_path: Path) -> None:
    _, plan = load_plan(spec_file(tmp_path))
    assert isinstance(plan, RunPlan)
    assert [tier.backend.name for tier in plan.tiers] == ["cpu", "nvme"]
    disk = plan.tiers[1].backend
    assert disk.options["fsync"] is False and "transfer_size" not in disk.options  # as written: the class
    # fills its schema's defaults when the run builds it (tests/contracts/test_option_defaults.py)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.seed = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        disk.options["fsync"] = True  # type: ignore[index]
    with pytest.raises(TypeError):
        plan.spec["seed"] = 1  # type: ignore[index]
    with pytest.raises(AttributeError):
        plan.spec["output"]["formats"].append("html")  # nested lists are frozen too (tuples)
    copy = pickle.loads(pickle.dumps(plan))  # spawn pickles it to each client process
    assert copy == plan and hash(copy) == hash(plan)
    assert copy.model.bytes_per_token_all_ranks == plan.model.bytes_per_token_all_ranks


def test_a_tp_degree_the_model_cannot_take_names_model_tp(tmp_path: Path) -> None:
    raw = small_spec(model={"name": "tiny-1b", "tp": 3})
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(Exception, match=r"^model\.tp: "):
        load_plan(path)
