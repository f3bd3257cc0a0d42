"""The run-spec schema is composed from the core's own part and every installed plugin's option
fragments, so a typo in a vendor option is caught by ``kvbench spec validate`` with its JSON path."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
from conftest import HAS_NVME, small_spec

from kvbench_core.cli import main
from kvbench_core.contracts.errors import SpecError
from kvbench_core.contracts.plugins import registry
from kvbench_core.runspec.loader import validate
from kvbench_core.runspec.overrides import apply_overrides
from kvbench_core.runspec.spec_schema import full_schema

nvme_only = pytest.mark.skipif(not HAS_NVME, reason="the kvbench-nvme plugin is not installed")


def options_rule(rules: list[dict[str, Any]], selector: str, name: str) -> dict[str, Any]:
    """The ``then.options`` schema the composed schema applies when ``selector`` is ``name``."""
    for rule in rules:
        if rule["if"].get("properties", {}).get(selector) == {"const": name}:
            return rule["then"]["properties"]["options"]
    raise AssertionError(f"no options rule for {selector}={name}")


def test_every_installed_implementation_contributes_its_options_fragment() -> None:
    schema = full_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    props = schema["properties"]
    tier_rules = props["cache"]["properties"]["tiers"]["items"]["allOf"]
    for name, cls in registry("backend").items():
        assert options_rule(tier_rules, "backend", name) == cls.options_schema
    for name, cls in registry("source").items():
        assert options_rule(props["workload"]["allOf"], "source", name) == cls.options_schema
    for name, cls in registry("autoscaler").items():
        assert options_rule(props["autoscaler"]["oneOf"][1]["allOf"], "name", name) == cls.options_schema


def test_the_core_builtins_are_there() -> None:
    tier_rules = full_schema()["properties"]["cache"]["properties"]["tiers"]["items"]["allOf"]
    assert set(options_rule(tier_rules, "backend", "cpu")["properties"]) == {"prefault"}
    assert set(options_rule(tier_rules, "backend", "gpu")["properties"]) == {"device"}


def test_kvbench_spec_schema_prints_the_composed_schema(capsys: Any) -> None:
    assert main(["spec", "schema"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(json.dumps(full_schema()))


@nvme_only
def test_the_nvme_plugin_options_appear_in_the_schema(capsys: Any) -> None:
    assert main(["spec", "schema"]) == 0
    rules = json.loads(capsys.readouterr().out)["properties"]["cache"]["properties"]["tiers"]["items"]["allOf"]
    nvme = options_rule(rules, "backend", "nvme")
    assert {"path", "fsync", "direct", "transfer_size", "queue_depth"} <= set(nvme["properties"])
    assert nvme["required"] == ["path"]


def nvme_spec(**options: Any) -> dict[str, Any]:
    return small_spec(cache={"tiers": [{"name": "dram", "backend": "cpu", "capacity": "1GiB"},
                                       {"name": "disk", "backend": "nvme", "capacity": "8GiB",
                                        "options": {"path": "/tmp/kvbench-never-created", **options}}]})


@nvme_only
@pytest.mark.parametrize(("options", "message"), [
    ({"transfer_size": "huge"},
     'cache.tiers[1].options.transfer_size: expected bytes per pread/pwrite command, e.g. 1MiB, got "huge"'),
    ({"transfer_size": 0}, "cache.tiers[1].options.transfer_size: expected a value >= 1, got 0"),
    ({"queue_depth": "deep"}, 'cache.tiers[1].options.queue_depth: expected integer >= 1 and <= 256, got "deep"'),
    ({"fsync": "yes"}, 'cache.tiers[1].options.fsync: expected boolean, got "yes"'),
    ({"odirect": True}, "cache.tiers[1].options.odirect: unknown field (allowed: allow_nonempty, create, direct, "
                        "drop_cache, engine, fsync, path, pipeline_writes, queue_depth, transfer_size)"),
])
def test_a_bad_plugin_option_is_rejected_with_its_path(options: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError) as info:
        validate(nvme_spec(**options))
    assert str(info.value) == message


@nvme_only
def test_a_required_plugin_option() -> None:
    raw = nvme_spec()
    del raw["cache"]["tiers"][1]["options"]["path"]
    with pytest.raises(SpecError) as info:
        validate(raw)
    assert str(info.value) == "cache.tiers[1].options.path: required field is missing"


def test_a_core_tier_rejects_options_it_does_not_take() -> None:
    raw = apply_overrides(small_spec(), ["cache.tiers.0.options.path=/tmp"])
    with pytest.raises(SpecError) as info:
        validate(raw)
    assert str(info.value) == "cache.tiers[0].options.path: unknown field (allowed: prefault)"


def test_workload_and_autoscaler_options_are_checked_by_their_fragments() -> None:
    for overrides, message in (
        (["workload.options.rag.top_k=0"], "workload.options.rag.top_k: expected a value >= 1, got 0"),
        (["workload.options.arrival.process=bursty"],
         'workload.options.arrival.process: expected one of "closed", "poisson", got "bursty"'),
        (["autoscaler.name=capacity", "autoscaler.options.low=0.5"],
         "autoscaler.options.low: unknown field (allowed: fast_growth, fine_factor, interval_s, min_stage_requests, "
         "ramp_factor)"),
        (["autoscaler.name=qos", "autoscaler.options.stable_intervals=0"],
         "autoscaler.options.stable_intervals: expected a value >= 1, got 0"),
    ):
        with pytest.raises(SpecError) as info:
            validate(apply_overrides(small_spec(), overrides))
        assert str(info.value) == message


def test_options_of_the_default_source_are_checked_when_source_is_left_out() -> None:
    # The synthetic source is the default: its options must be validated even without `source: synthetic`
    # (they once passed `spec validate` and only failed when the run started).
    raw = apply_overrides(small_spec(), ["workload.options.rag.top_k=zero"])
    assert "source" not in raw["workload"]
    with pytest.raises(SpecError) as info:
        validate(raw)
    assert str(info.value) == 'workload.options.rag.top_k: expected integer >= 1, got "zero"'
