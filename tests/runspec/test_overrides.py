"""``--set PATH=VALUE`` overrides: dotted paths, list indexes, YAML-typed values, validated like the file."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import small_spec

from kvbench_core.contracts.errors import SpecError
from kvbench_core.runspec.loader import load_spec
from kvbench_core.runspec.overrides import apply_overrides


def two_tier_spec() -> dict[str, Any]:
    return small_spec(cache={"tiers": [{"name": "dram", "backend": "cpu", "capacity": "1GiB"},
                                       {"name": "more", "backend": "cpu", "capacity": "4GiB"}]})


def test_values_are_typed_like_yaml() -> None:
    spec = apply_overrides(small_spec(), ["workload.users=20", "duration=10s", "verify=true", "model.dtype=null",
                                          "workload.generation=2.5", "name=a=b"])
    assert spec["workload"]["users"] == 20
    assert spec["duration"] == "10s"
    assert spec["verify"] is True
    assert spec["model"]["dtype"] is None
    assert spec["workload"]["generation"] == 2.5
    assert spec["name"] == "a=b"  # only the first '=' separates path from value


def test_list_items_by_index() -> None:
    spec = apply_overrides(two_tier_spec(), ["cache.tiers.1.capacity=8GiB", "cache.tiers.0.name=hot"])
    assert [(t["name"], t["capacity"]) for t in spec["cache"]["tiers"]] == [("hot", "1GiB"), ("more", "8GiB")]
    # as error messages name them
    spec = apply_overrides(two_tier_spec(), ["cache.tiers[1].capacity=8GiB", "cache.tiers[0].options.x=1"])
    assert spec["cache"]["tiers"][1]["capacity"] == "8GiB" and spec["cache"]["tiers"][0]["options"] == {"x": 1}


def test_missing_mappings_are_created() -> None:
    spec = apply_overrides(small_spec(), ["autoscaler.name=qos", "workload.options.rag.top_k=3",
                                          "cache.tiers.0.options.x=1"])
    assert spec["autoscaler"] == {"name": "qos"}
    assert spec["workload"]["options"]["rag"] == {"top_k": 3}
    assert spec["cache"]["tiers"][0]["options"] == {"x": 1}


def test_whole_structures_can_be_replaced() -> None:
    spec = apply_overrides(two_tier_spec(), ["cache.tiers=[{name: only, backend: cpu, capacity: 1MiB}]"])
    assert spec["cache"]["tiers"] == [{"name": "only", "backend": "cpu", "capacity": "1MiB"}]


def test_the_original_spec_is_not_modified() -> None:
    original = two_tier_spec()
    apply_overrides(original, ["cache.tiers.1.capacity=8GiB", "workload.users=3"])
    assert original == two_tier_spec()


@pytest.mark.parametrize(("override", "message"), [
    ("workload.users", "--set 'workload.users': expected PATH=VALUE, e.g. workload.users=20"),
    ("=3", "--set '=3': empty path"),
    ("cache.tiers.2.capacity=1GiB",
     "--set cache.tiers[2]: no list item 2 (the list has 2 items: 0 to 1, or -1 for the last)"),
    ("cache.tiers.one.capacity=1GiB",
     "--set cache.tiers.one: no list item one (the list has 2 items: 0 to 1, or -1 for the last)"),
    ("duration.unit=s", "--set duration.unit: duration is '2s', not a mapping"),
    ("name.first.second=x", "--set name.first: name is not a mapping"),
])
def test_malformed_overrides_are_user_errors(override: str, message: str) -> None:
    with pytest.raises(SpecError) as info:
        apply_overrides(two_tier_spec() | {"duration": "2s"}, [override])
    assert str(info.value) == message


def test_overrides_are_validated_like_the_file(write_spec: Any) -> None:
    path = write_spec(two_tier_spec())
    with pytest.raises(SpecError) as info:
        load_spec(path, ["workload.users=ten"])
    assert str(info.value) == 'workload.users: expected integer >= 1 and <= 1000000, got "ten"'
    with pytest.raises(SpecError, match=r"^cache.tiers\[1\].capacity: expected a size"):
        load_spec(path, ["cache.tiers.1.capacity=lots"])
    with pytest.raises(SpecError, match=r"^workload.colour: unknown field"):
        load_spec(path, ["workload.colour=red"])


def test_overrides_reach_the_resolved_spec_and_the_spec_as_written(write_spec: Any) -> None:
    path = write_spec(two_tier_spec())
    as_written, spec = load_spec(path, ["workload.users=20", "duration=10s", "cache.tiers.1.capacity=8GiB"])
    assert (as_written["workload"]["users"], as_written["duration"]) == (20, "10s")
    assert (spec["workload"]["users"], spec["duration"]) == (20, 10.0)
    assert spec["cache"]["tiers"][1]["capacity"] == 8 << 30
