"""A plugin's option defaults live once, in its ``options_schema``; ``with_defaults`` fills them."""

from __future__ import annotations

import dataclasses
import enum
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest

from kvbench_core.contracts.autoscaler import Autoscaler
from kvbench_core.contracts.backend import BackendContext
from kvbench_core.contracts.errors import SpecError
from kvbench_core.contracts.plugins import registry
from kvbench_core.contracts.validation import validate_or_raise, with_defaults
from kvbench_core.contracts.workload import WorkloadContext

SCHEMA = {
    "type": "object",
    "properties": {
        "timeout": {"type": "string", "default": "5s"},
        "keys": {"type": "array", "default": ["a_", "b_"]},
        "nested": {"type": "object", "properties": {"depth": {"type": "integer", "default": 2}}},
        "url": {"type": "string"},
    },
}


def test_absent_keys_get_the_schema_default_and_given_keys_win():
    options = {"timeout": "1s", "url": "redis://x"}
    filled = with_defaults(SCHEMA, options)
    assert filled == {"timeout": "1s", "url": "redis://x", "keys": ["a_", "b_"]}
    assert options == {"timeout": "1s", "url": "redis://x"}  # the caller's dict is left alone


def test_a_given_none_is_kept_not_replaced_by_the_default():
    assert with_defaults(SCHEMA, {"timeout": None})["timeout"] is None


def test_mutable_defaults_are_never_shared():
    first, second = with_defaults(SCHEMA, {}), with_defaults(SCHEMA, {})
    first["keys"].append("c_")
    assert second["keys"] == ["a_", "b_"]
    assert SCHEMA["properties"]["keys"]["default"] == ["a_", "b_"]


def test_a_nested_object_given_gets_its_defaults_but_an_absent_one_is_not_created():
    """A partial section keeps its other defaults; a section the user left out is not conjured up by its
    inner defaults unless the section itself declares a default."""
    assert "nested" not in with_defaults(SCHEMA, {})
    given = {"nested": {}}
    assert with_defaults(SCHEMA, given)["nested"] == {"depth": 2}
    assert given == {"nested": {}}  # the inner dict is copied, not filled in place
    assert with_defaults(SCHEMA, {"nested": {"depth": 5}})["nested"] == {"depth": 5}
    section = {"properties": {"nested": {**SCHEMA["properties"]["nested"], "default": {}}}}
    assert with_defaults(section, {}) == {"nested": {"depth": 2}}


def test_one_of_branches_are_not_followed():
    schema = {"properties": {"qos": {"oneOf": [{"type": "string"}, {"type": "object", "properties": {
        "batch": {"type": "number", "default": 1.0}}}]}}}
    assert with_defaults(schema, {"qos": {}}) == {"qos": {}}


def test_a_schema_without_properties_returns_a_copy():
    options = {"x": 1}
    filled = with_defaults({"type": "object"}, options)
    assert filled == options and filled is not options


# -- every installed plugin class: leaving an option out is the same as giving its schema default ----------

KINDS = ("backend", "source", "autoscaler", "codec")
WORKLOAD_DATA = Path(__file__).resolve().parents[2] / "plugins" / "kvbench_workloads" / "tests" / "data"
#: The one sample trace each trace source replays when built here (they parse their file when constructed).
TRACE_SAMPLES = {"sharegpt": "sharegpt_pairs.json", "burstgpt": "burstgpt_v3.csv",
                 "mooncake": "mooncake_conversation.jsonl"}
#: Values for the options a schema requires (nixl's POSIX backend then requires ``path`` too).
REQUIRED_VALUES: dict[str, Any] = {"bucket": "kvbench-defaults", "nixl_backend": "POSIX"}


def installed_classes() -> list[tuple[str, str, type]]:
    return [(kind, name, cls) for kind in KINDS for name, cls in sorted(registry(kind).items())]


EVERY_CLASS = pytest.mark.parametrize(("kind", "name", "cls"), installed_classes(),
                                     ids=lambda item: item if isinstance(item, str) else None)


def minimal_options(kind: str, name: str, cls: type, where: Path) -> dict[str, Any]:
    """The fewest options the class's schema accepts: its required fields and nothing else."""
    schema = cls.options_schema
    options: dict[str, Any] = {}
    for _ in range(2):  # a conditional ``required`` (nixl: path unless OBJ) shows after the first pass
        for error in jsonschema.Draft202012Validator(schema).iter_errors(options):
            if error.validator != "required":
                continue
            field = error.message.split("'")[1]
            if field == "path" and kind != "source":
                options["path"] = str(where)
            elif field == "path" and name in TRACE_SAMPLES:
                options["path"] = str(WORKLOAD_DATA / TRACE_SAMPLES[name])
            elif field in REQUIRED_VALUES:
                options[field] = REQUIRED_VALUES[field]
            else:
                pytest.skip(f"{kind} {name!r} requires option {field!r}, which this test has no value for "
                            "(a third-party plugin: add it to REQUIRED_VALUES)")
    validate_or_raise(options, schema, root=f"{kind}.{name}.options")
    return options


def build(kind: str, cls: type, options: dict[str, Any]) -> Any:
    """An instance as the run builds it, without opening it (no server, device or GPU is touched)."""
    if kind == "backend":
        return cls(options, BackendContext(tier_name="t0", run_id="defaults1"))
    if kind == "source":
        return cls(options, WorkloadContext(seed=7, users=4, bytes_per_token=64, spec_dir=str(WORKLOAD_DATA)))
    if kind == "autoscaler":
        return cls(options, initial_users=2, max_users=64)
    return cls(options)


def plain(value: Any, depth: int = 0) -> Any:
    """What an instance derived from its options, as comparable data; handles, locks and threads are left out."""
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return value
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [plain(item, depth) for item in value]
    if isinstance(value, dict):
        return {str(key): plain(item, depth) for key, item in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return plain({field.name: getattr(value, field.name) for field in dataclasses.fields(value)}, depth)
    if depth < 2 and hasattr(value, "__dict__") and type(value).__module__.startswith("kvbench"):
        return plain_attributes(value, depth + 1)  # the tier's own helpers: its directory, engine, endpoint
    return SKIP


SKIP = object()


def plain_attributes(instance: Any, depth: int, leave_out: tuple[str, ...] = ()) -> dict[str, Any]:
    shown = {key: plain(value, depth) for key, value in vars(instance).items() if key not in leave_out}
    return {key: value for key, value in shown.items() if value is not SKIP}


def derived_state(instance: Any) -> dict[str, Any]:
    state = plain_attributes(instance, 0, leave_out=("options",))
    if isinstance(instance, Autoscaler):
        state["interval_s"] = instance.interval_s
    return state


@EVERY_CLASS
def test_a_class_built_with_minimal_options_holds_every_schema_default(kind: str, name: str, cls: type,
                                                                      tmp_path: Path) -> None:
    schema = cls.options_schema
    options = minimal_options(kind, name, cls, tmp_path / "tier")
    instance = build(kind, cls, dict(options))
    defaults = with_defaults(schema, {})
    for key, default in defaults.items():
        assert instance.options[key] == default, f"{kind} {name!r}: options.{key} is {instance.options[key]!r}, " \
                                                 f"its schema default {default!r}"
    # The defaults fill the options a spec leaves out, and a valid spec stays valid with them filled.
    assert instance.options == with_defaults(schema, options)
    validate_or_raise(instance.options, schema, root=f"{kind}.{name}.options")


@EVERY_CLASS
def test_leaving_an_option_out_behaves_as_giving_its_schema_default(kind: str, name: str, cls: type,
                                                                   tmp_path: Path) -> None:
    """What a class derives (its attributes, its interval) is the same whether a default came from the
    schema or was written out: a constructor with its own fallback that differs from the schema fails here."""
    options = minimal_options(kind, name, cls, tmp_path / "tier")
    left_out = build(kind, cls, dict(options))
    written_out = build(kind, cls, applicable_defaults(kind, cls, options))
    assert derived_state(left_out) == derived_state(written_out)
    assert left_out.options == written_out.options


def applicable_defaults(kind: str, cls: type, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` with every schema default written out that the class accepts written: an option of
    another kind (nixl's OBJ-only ``create_bucket`` beside a POSIX tier) is refused when the spec writes it,
    at its default value too, as a cross-field rule judges what was written."""
    written = dict(options)
    for key, value in with_defaults(cls.options_schema, options).items():
        if key in options:
            continue
        try:
            build(kind, cls, {**options, key: value})
        except SpecError:
            continue
        written[key] = value
    return written


@EVERY_CLASS
def test_instances_never_share_a_mutable_default(kind: str, name: str, cls: type, tmp_path: Path) -> None:
    options = minimal_options(kind, name, cls, tmp_path / "tier")
    first, second = build(kind, cls, dict(options)), build(kind, cls, dict(options))
    for key, value in first.options.items():
        if isinstance(value, (list, dict)) and key not in options:
            assert value is not second.options[key], f"{kind} {name!r}: options.{key} is shared"
            assert value is not cls.options_schema["properties"][key]["default"]
