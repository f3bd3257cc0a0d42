"""The run spec: every kind of mistake gets one line naming the JSON path and what was expected;
a valid spec resolves to bytes and seconds with every default filled in."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from conftest import HAS_NVME, small_spec

from kvbench_core.cli import main
from kvbench_core.contracts.errors import InputFileError, SpecError
from kvbench_core.contracts.plugins import registry
from kvbench_core.runspec.loader import load_spec, resolve, validate
from kvbench_core.runspec.overrides import apply_overrides


def spec_error(raw: dict[str, Any]) -> str:
    with pytest.raises(SpecError) as info:
        validate(raw)
    return str(info.value)


def with_overrides(*overrides: str) -> dict[str, Any]:
    return apply_overrides(small_spec(), list(overrides))


# -- schema violations: one line, the path, the expectation, the offending value --------------------------


@pytest.mark.parametrize(("overrides", "message"), [
    # wrong type
    (["workload.users=ten"], 'workload.users: expected integer >= 1 and <= 1000000, got "ten"'),
    (["workload.users=1.5"], "workload.users: expected integer >= 1 and <= 1000000, got 1.5"),
    (["declaration.network.fabric=5"], "declaration.network.fabric: expected string or null, got 5"),
    # out of range
    (["workload.users=0"], "workload.users: expected a value >= 1, got 0"),
    (["cache.eviction.target_usage_ratio=1.5"], "cache.eviction.target_usage_ratio: expected a value <= 1, got 1.5"),
    (["cache.eviction.large_entry_limit_ratio=0"],
     "cache.eviction.large_entry_limit_ratio: expected a value > 0, got 0"),
    # not one of the choices
    (["workload.mode=both"], 'workload.mode: expected one of "mixed", "prefill-only", "decode-only", got "both"'),
    (["cache.promotion=always"], 'cache.promotion: expected one of "none", "on_read", got "always"'),
    (["version=2"], "version: expected 1, got 2"),
    # malformed names and units
    (["cache.tiers.0.name=a/b"], 'cache.tiers[0].name: expected a tier name, got "a/b"'),
    (["cache.tiers.0.capacity=12 parsecs"],
     "cache.tiers[0].capacity: expected a size, 0 to disable the tier, or 'auto' to ask the backend, "
     'got "12 parsecs"'),
    (["duration=10 fortnights"], 'duration: expected seconds, or a string like 30s / 5m / 500ms, got "10 fortnights"'),
    (["duration=-5"], "duration: expected a value >= 0, got -5"),
    (["duration=0s"], "duration: expected a time > 0 (leave it out to stop on requests alone), got '0s'"),
    (["warmup=soon"], 'warmup: expected seconds, or a string like 30s / 5m / 500ms, got "soon"'),
    (["precondition.size=lots"],
     "precondition.size: expected bytes to write, or auto = 2x the bottom tier's capacity, got \"lots\""),
    # an error deep inside one branch of a oneOf is reported there, not as "expected null"
    (["autoscaler.name=qos", "autoscaler.options.low=-1"], "autoscaler.options.low: expected a value >= 0, got -1"),
    (["autoscaler=5"], "autoscaler: expected null, or {name, max_users, stop_when_converged, options}, got 5"),
    # a tier without its backend
    (["cache.tiers.0.backend=null"], "cache.tiers[0].backend: expected string, got null"),
])
def test_a_schema_violation_names_the_path_and_the_expectation(overrides: list[str], message: str) -> None:
    assert spec_error(with_overrides(*overrides)) == message


def test_size_units_are_exactly_those_the_parser_knows() -> None:
    # "8Gi" once passed the schema and then crashed the run with a ValueError in resolve().
    for bad in ("8Gi", "8 gigs", "8GiBB", "1e9"):
        assert "cache.tiers[0].capacity: expected a size" in spec_error(with_overrides(f"cache.tiers.0.capacity={bad}"))
    for good, size in (("8GiB", 8 << 30), ("8 GB", 8 * 10**9), ("512kib", 512 << 10), ("1.5MiB", 3 << 19),
                       ("100", 100), ("64B", 64)):
        raw = with_overrides(f"cache.tiers.0.capacity={good}")
        validate(raw)
        assert resolve(raw, ".")["cache"]["tiers"][0]["capacity"] == size


def test_unknown_keys_are_errors_at_every_level() -> None:
    assert spec_error(with_overrides("colour=red")).startswith("colour: unknown field (allowed: autoscaler, cache,")
    assert spec_error(with_overrides("workload.userz=3")).startswith("workload.userz: unknown field (allowed: ")
    assert spec_error(with_overrides("cache.tiers.0.size=1")).startswith("cache.tiers[0].size: unknown field")
    assert spec_error(with_overrides("declaration.network.colour=x")).startswith(
        "declaration.network.colour: unknown field (allowed: congestion_control, fabric,")
    assert spec_error(with_overrides("cache.tiers.0.options.colour=x")) == (
        "cache.tiers[0].options.colour: unknown field (allowed: prefault)")


def test_required_fields() -> None:
    raw = small_spec()
    del raw["requests"]
    assert spec_error(raw) == "duration: required field is missing (or give requests instead)"
    raw = small_spec()
    del raw["cache"]
    assert spec_error(raw) == "cache: required field is missing"
    assert spec_error(with_overrides("cache.tiers=[{backend: cpu}]")) == (
        "cache.tiers[0].name: required field is missing")
    assert spec_error(with_overrides("cache.tiers=[]")).startswith("cache.tiers: [] should be non-empty")
    raw = small_spec()
    del raw["model"]
    assert spec_error(raw) == "model: give a catalog name (model.name) or a config.json path (model.config)"


@pytest.mark.skipif(not HAS_NVME, reason="kvbench-nvme is not installed")
def test_an_implementations_required_options_are_named_when_options_is_left_out() -> None:
    """Without an ``options`` object the fragment's if/then never applied, and the backend's constructor
    crashed with KeyError: 'path'."""
    assert spec_error(with_overrides("cache.tiers=[{name: disk, backend: nvme, capacity: 64MiB}]")) == (
        "cache.tiers[0].options.path: required field is missing")
    raw = small_spec()
    raw["workload"] = {"users": 2}
    validate(raw)  # the default source needs no options, so leaving them out stays valid


def test_every_violation_is_reported_at_once() -> None:
    message = spec_error(with_overrides("workload.users=ten", "workload.mode=both", "seed=-1"))
    assert message.splitlines() == [
        "invalid spec:",
        "  seed: expected a value >= 0, got -1",
        '  workload.mode: expected one of "mixed", "prefill-only", "decode-only", got "both"',
        '  workload.users: expected integer >= 1 and <= 1000000, got "ten"',
    ]


@pytest.mark.parametrize(("override", "kind", "path"), [
    ("cache.tiers.0.backend=floppy", "backend", "cache.tiers[0].backend"),
    ("workload.source=tape", "source", "workload.source"),
    ("autoscaler.name=oracle", "autoscaler", "autoscaler.name"),
])
def test_unknown_plugin_names_list_the_installed_ones(override: str, kind: str, path: str) -> None:
    bad = override.split("=")[1]
    installed = ", ".join(sorted(registry(kind)))
    assert spec_error(with_overrides(override)) == f"{path}: unknown {kind} {bad!r}; installed: {installed}"
    assert set(registry(kind)) >= {"backend": {"cpu", "gpu"}, "source": {"synthetic"},
                                   "autoscaler": {"qos", "capacity"}}[kind]


def test_tier_names_must_be_unique() -> None:
    raw = small_spec(cache={"tiers": [{"name": "a", "backend": "cpu", "capacity": 1024},
                                      {"name": "b", "backend": "cpu", "capacity": 1024},
                                      {"name": "a", "backend": "cpu", "capacity": 1024}]})
    assert spec_error(raw) == "cache.tiers: tier names must be unique, repeated: a"


def test_at_least_one_tier_must_have_capacity() -> None:
    raw = small_spec(cache={"tiers": [{"name": "a", "backend": "cpu", "capacity": 0},
                                      {"name": "b", "backend": "cpu", "capacity": "0"}]})
    assert spec_error(raw) == "cache.tiers: every tier has capacity 0; enable at least one"
    raw["cache"]["tiers"][1]["capacity"] = "0GiB"  # once passed, and crashed the run with no tier at all
    assert spec_error(raw) == "cache.tiers: every tier has capacity 0; enable at least one"
    raw["cache"]["tiers"][1]["capacity"] = "1MiB"
    validate(raw)
    raw["cache"]["tiers"][1]["capacity"] = "auto"
    validate(raw)


def test_modes_are_one_field_so_they_cannot_be_combined() -> None:
    for mode in ("mixed", "prefill-only", "decode-only"):
        validate(with_overrides(f"workload.mode={mode}"))
    assert "workload.mode: expected one of" in spec_error(with_overrides("workload.mode=[prefill-only, decode-only]"))


# -- files --------------------------------------------------------------------------------------------


def test_malformed_yaml_names_file_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("version: 1\nname: x\nworkload: [\n  users: 3\ncache: {}\n")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert str(info.value) == f"{path}:5:6: malformed YAML: expected ',' or ']', but got ':'"


def test_a_missing_file_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(InputFileError) as info:
        load_spec(tmp_path / "nope.yaml")
    assert str(info.value) == f"{tmp_path / 'nope.yaml'}: spec file not found"


def test_the_top_level_must_be_a_mapping(tmp_path: Path) -> None:
    path = tmp_path / "list.yaml"
    path.write_text("- version: 1\n")
    with pytest.raises(SpecError, match=r"list.yaml: expected a mapping at the top level, got list"):
        load_spec(path)


def test_a_result_without_an_embedded_spec_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"kvbench_result": 1, "metrics": {}}))
    with pytest.raises(SpecError, match=r"r.json: a kvbench result without an embedded spec"):
        load_spec(path)


# -- resolution --------------------------------------------------------------------------------------


def test_resolution_fills_defaults_and_converts_units(write_spec: Any, tmp_path: Path) -> None:
    raw = small_spec(duration="1.5m", warmup="500ms", workload={"generation": "realistic"},
                     cache={"tiers": [{"name": "dram", "backend": "cpu", "capacity": "2GiB", "cold_after": "2m"},
                                      {"name": "big", "backend": "cpu", "capacity": "auto"}]},
                     precondition={"size": "1GB"})
    del raw["requests"]
    path = write_spec(raw)
    as_written, spec = load_spec(path)
    assert as_written["duration"] == "1.5m"
    assert (spec["duration"], spec["warmup"]) == (90.0, 0.5)
    assert spec.get("requests") is None
    assert spec["cache"]["tiers"][0] == {"name": "dram", "backend": "cpu", "capacity": 2 << 30, "cold_after": 120.0,
                                         "options": {}}
    assert spec["cache"]["tiers"][1]["capacity"] == "auto"
    assert spec["cache"]["eviction"] == {"target_usage_ratio": 0.8, "large_entry_limit_ratio": 0.95,
                                         "max_recursion_depth": 10, "max_evictions": 5000}
    assert spec["cache"]["promotion"] == "none"
    assert spec["workload"]["generation_ms_per_token"] == 30.0
    assert (spec["workload"]["decode_batch"], spec["workload"]["source"]) == (32, "synthetic")
    assert spec["precondition"] == {"size": 10**9, "entry_size": 64 << 20, "threads": 4}
    assert spec["spec_dir"] == str(tmp_path)


def test_precondition_threads_zero_means_one_per_cpu(write_spec: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 12)
    _, spec = load_spec(write_spec(small_spec(precondition={"size": "1GB", "threads": 0})))
    assert spec["precondition"]["threads"] == 12


def test_generation_pacing_names_and_custom_values() -> None:
    for generation, ms in (("none", 0.0), ("fast", 2.0), ("realistic", 30.0), (7.5, 7.5)):
        raw = with_overrides(f"workload.generation={generation}")
        validate(raw)
        assert resolve(raw, ".")["workload"]["generation_ms_per_token"] == ms


# -- the CLI: exit code 2, one line on stderr, never a traceback ------------------------------------------


def test_spec_validate_cli_reports_a_bad_spec_without_a_traceback(write_spec: Any, capsys: Any) -> None:
    path = write_spec(with_overrides("workload.users=ten"))
    assert main(["spec", "validate", str(path)]) == 2
    out, err = capsys.readouterr()
    assert err == 'kvbench: error: workload.users: expected integer >= 1 and <= 1000000, got "ten"\n'
    assert out == ""


@pytest.mark.parametrize("content", ["version: 1\nworkload: [\n", "version: 1\n", "just a string\n"])
def test_spec_validate_cli_exit_code_two_for_every_bad_file(tmp_path: Path, capsys: Any, content: str) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(content)
    assert main(["spec", "validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kvbench: error: ") and "Traceback" not in err


def test_spec_validate_cli_accepts_a_good_spec_and_its_overrides(write_spec: Any, capsys: Any) -> None:
    path = write_spec(small_spec())
    assert main(["spec", "validate", str(path)]) == 0
    # then each size and duration as parsed (issue 20; tests/contracts/test_units.py checks those lines)
    assert capsys.readouterr().out == (f"{path}: valid\n"
                                       "  cache.tiers[0].capacity: 64MiB = 67,108,864 bytes (64.00 MiB)\n")
    assert main(["spec", "validate", str(path), "--set", "workload.users=0"]) == 2
    assert capsys.readouterr().err == "kvbench: error: workload.users: expected a value >= 1, got 0\n"
    assert main(["spec", "validate", str(path), "--resolved", "--set", "duration=2m"]) == 0
    assert json.loads(capsys.readouterr().out)["duration"] == 120.0


def test_spec_validate_cli_checks_every_file_it_is_given(write_spec: Any, tmp_path: Path, capsys: Any) -> None:
    # `kvbench spec validate specs/*.yaml` once stopped at argparse ("unrecognized arguments"): each file is
    # checked, a bad one is one line naming it, and the exit code is the worst one.
    good = write_spec(small_spec())
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    missing = tmp_path / "nope.yaml"
    assert main(["spec", "validate", str(good), str(good)]) == 0
    assert capsys.readouterr().out.count(f"{good}: valid\n") == 2
    assert main(["spec", "validate", str(empty), str(good), str(missing)]) == 2
    out, err = capsys.readouterr()
    assert out.startswith(f"{good}: valid\n")
    assert err.splitlines() == [f"kvbench: error: {empty}: the spec is empty; a run spec is a YAML mapping "
                                "(see specs/quickstart.yaml)",
                                f"kvbench: error: {missing}: spec file not found"]
    assert main(["spec", "validate", str(good), str(good), "--set", "workload.users=0"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"kvbench: error: {good}: workload.users: expected a value >= 1, got 0"] * 2


def test_spec_validate_cli_missing_file(tmp_path: Path, capsys: Any) -> None:
    assert main(["spec", "validate", str(tmp_path / "nope.yaml")]) == 2
    assert capsys.readouterr().err == f"kvbench: error: {tmp_path / 'nope.yaml'}: spec file not found\n"


def test_spec_declare_lists_the_missing_declaration_fields(write_spec: Any, capsys: Any) -> None:
    path = write_spec(small_spec(declaration={"network": {"fabric": "none", "gpudirect_rdma": False}}))
    assert main(["spec", "declare", str(path), "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["network.fabric"] == status["network.gpudirect_rdma"] == "declared"
    assert status["tiers.topology"] == status["workload.input_length_mean"] == "detected at run"
    # issue #31 §4: the run fills these, or says why they do not apply (no inference engine, no network tier)
    assert status["engine.name"] == status["network.link_speed_gbps"] == "detected or n/a at run"
    assert status["mixed_use.checkpoint_size"] == "missing"
    assert main(["spec", "declare", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    missing = [line for line in lines if line.startswith("missing ")]
    assert any("mixed_use.recovery_time_objective" in line for line in missing)
    assert not any("network.fabric" in line for line in missing)
    assert lines[-1] == f"{len(missing)} field(s) to declare under 'declaration:' in {path}"


@pytest.mark.skipif(not HAS_NVME, reason="the kvbench-nvme plugin is not installed")
def test_the_quickstart_spec_is_valid() -> None:
    _, spec = load_spec(Path(__file__).parents[2] / "specs" / "quickstart.yaml")
    assert [tier["backend"] for tier in spec["cache"]["tiers"]] == ["cpu", "nvme"]


# -- issue 19: bounds, memory, alias bombs, --set indexes, length errors -------------------------------------

def load_error(tmp_path: Path, raw: dict[str, Any], *overrides: str) -> str:
    """The one-line error ``load_spec`` (every load-time check, not just the schema) gives for ``raw``."""
    import yaml

    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(SpecError) as info:
        load_spec(path, list(overrides))
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(("override", "expected"), [
    ("cache.tiers[0].capacity=1.0e+99", "cache.tiers[0].capacity: expected a size"),
    ("cache.tiers[0].capacity=99999999999999999999TiB", "cache.tiers[0].capacity: expected a size <= 8 PiB"),
    ("cache.tiers[0].capacity=10^40", "cache.tiers[0].capacity: expected a size"),
    ("duration=1.0e+99", "duration: expected a value <= 2592000, got 1e+99"),
    ("duration=9999999h", "duration: expected a duration <= 30 days"),
    ("warmup=1.0e+99", "warmup: expected a value <= 2592000"),
    ("output.interval=1.0e-9", "output.interval: expected a value >= 0.01"),
    ("requests=1000000000000", "requests: expected a value <= 1000000000"),
    ("workload.users=1000001", "workload.users: expected a value <= 1000000"),
    ("seed=100000000000000000000", "seed: expected a value <= "),
])
def test_every_number_is_bounded_as_a_number_and_as_a_string(tmp_path: Path, override: str, expected: str) -> None:
    assert load_error(tmp_path, small_spec(), override).startswith(expected)


def test_a_sampling_interval_is_bounded_by_the_samples_it_makes(tmp_path: Path) -> None:
    message = load_error(tmp_path, small_spec(duration="3h"), "output.interval=0.01")
    assert message.startswith("output.interval: 0.01 s over a 10800 s run is 1,080,000 samples; at most 100,000")


def test_a_dram_tier_larger_than_the_memory_it_can_have_is_refused_naming_both(tmp_path: Path) -> None:
    """specs/peak-throughput.yaml's 32 GiB DRAM tier was OOM-killed (exit 137, no result) on a 24 GiB machine."""
    from kvbench_core.runspec.memlimit import host_memory_limit

    limit = host_memory_limit()
    if limit is None:
        pytest.skip("this kernel does not say how much memory is available")
    too_big = f"{limit.nbytes // 2**30 + 1}GiB"
    message = load_error(tmp_path, small_spec(), f"cache.tiers[0].capacity={too_big}")
    assert message.startswith(f"cache.tiers[0].capacity: {too_big.replace('GiB', '')}.00 GiB of DRAM tiers is more "
                              "than this machine can give: MemAvailable ")
    two_clients = f"{limit.nbytes // 2**31 + 1}GiB"  # fits once, not twice: the clients' tiers add up
    assert "(2 clients)" in load_error(tmp_path, small_spec(clients=2), f"cache.tiers[0].capacity={two_clients}")
    load_spec_ok = small_spec()
    load_spec_ok["cache"]["tiers"][0]["capacity"] = "auto"
    path = tmp_path / "auto.yaml"
    import yaml

    path.write_text(yaml.safe_dump(load_spec_ok))
    assert load_spec(path)[1]["cache"]["tiers"][0]["capacity"] == "auto"


def test_capacity_auto_for_a_dram_tier_is_half_of_what_the_host_can_give(monkeypatch: pytest.MonkeyPatch) -> None:
    """MemAvailable moves between two readings on a busy machine, so the tier reads one fixed limit here."""
    from kvbench_core.builtins import memory
    from kvbench_core.contracts.backend import BackendContext
    from kvbench_core.runspec.memlimit import host_memory_limit

    limit = host_memory_limit()
    monkeypatch.setattr(memory, "host_memory_limit", lambda: limit)
    auto = memory.CPUMemoryBackend({}, BackendContext(tier_name="dram", run_id="r")).capacity_bytes()
    assert (limit is None and auto is None) or (limit is not None and auto == limit.nbytes // 2)


def test_a_yaml_alias_bomb_is_refused_before_anything_is_expanded(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Nine levels of billion laughs grew past 1.5 GB RSS in 111 s; five took 6.4 s to refuse.  Now the
    shared graph is counted and refused before a single Python object is built from it, so the cost is
    the file's size, not its expansion (the time is in docs/RELIABILITY.md, not asserted here)."""
    from kvbench_core.runspec import reading

    built: list[object] = []
    for loader in (reading._StrictLoader, reading._FastStrictLoader):
        original = loader.construct_document
        monkeypatch.setattr(loader, "construct_document",
                            lambda self, node, original=original: built.append(node) or original(self, node))
    levels = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    levels += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    path = tmp_path / "bomb.yaml"
    path.write_text("version: 1\n" + "\n".join(levels) + "\n")
    with pytest.raises(SpecError, match=r"bomb\.yaml:\d+:\d+: malformed YAML: its aliases expand to more than "
                                        r"100,000 values \(an alias bomb\?\)"):
        load_spec(path)
    assert built == []  # refused on the composed graph: nothing was constructed, let alone expanded


def test_a_few_aliases_are_fine(tmp_path: Path) -> None:
    path = tmp_path / "aliases.yaml"
    path.write_text("version: 1\nname: t\nmodel: {name: tiny-1b}\nrequests: 5\n"
                    "cache:\n  tiers:\n    - &dram {name: dram, backend: cpu, capacity: 8MiB}\n")
    assert load_spec(path)[0]["cache"]["tiers"][0]["capacity"] == "8MiB"


def test_negative_list_indexes_in_set_count_from_the_end() -> None:
    spec = apply_overrides(small_spec(), ["cache.tiers[-1].capacity=32MiB"])
    assert spec["cache"]["tiers"][0]["capacity"] == "32MiB"
    with pytest.raises(SpecError, match=r"^--set cache\.tiers\[-2\]: no list item -2 \(the list has 1 "
                                        r"items: 0 to 0, or -1 for the last\)$"):
        apply_overrides(small_spec(), ["cache.tiers[-2].capacity=1"])


def test_too_many_tiers_is_a_count_not_a_dump_of_every_tier() -> None:
    raw = small_spec()
    raw["cache"]["tiers"] = [{"name": f"t{i}", "backend": "cpu", "capacity": "1MiB"} for i in range(20)]
    assert spec_error(raw) == "cache.tiers: expected at most 16 items, got 20"


def test_a_gpu_tier_larger_than_the_devices_free_memory_is_refused_naming_both(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The device's figure comes from torch.cuda.mem_get_info; faked here so the rule runs without a GPU."""
    from kvbench_core.runspec import memlimit

    seen: list[str] = []

    def free_memory(device: str) -> memlimit.MemoryLimit:
        seen.append(device)
        return memlimit.MemoryLimit(8 << 30, "8.00 GiB free of 80.00 GiB on cuda:1")

    monkeypatch.setattr(memlimit, "gpu_memory_limit", free_memory)
    raw = small_spec()
    raw["cache"]["tiers"].insert(0, {"name": "hbm", "backend": "gpu", "capacity": "16GiB",
                                     "options": {"device": "cuda:1"}})
    assert load_error(tmp_path, raw) == ("cache.tiers[0].capacity: 16.00 GiB is more than the GPU can give: "
                                         "8.00 GiB free of 80.00 GiB on cuda:1; lower it or use capacity: auto")
    assert seen == ["cuda:1"]


def test_one_io_log_for_several_client_processes_is_refused(tmp_path: Path) -> None:
    raw = small_spec(clients=2)
    raw["output"]["io_log"] = str(tmp_path / "io.jsonl")
    assert load_error(tmp_path, raw).startswith("output.io_log: one I/O log cannot take 2 client processes at once")
