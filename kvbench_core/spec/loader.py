"""The run spec: one YAML file describing a whole run, validated against a JSON Schema that the
core composes from its own fragment and every installed plugin's option fragments.

Flow: ``load_spec(path, overrides)`` -> parse YAML (or a result JSON, whose
embedded spec is re-run) -> apply ``--set`` overrides -> validate (errors name
the JSON path) -> fill defaults -> resolve sizes and durations.  Inner code
trusts the resolved spec.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import re
from pathlib import Path
from typing import Any

import yaml

from kvbench_core.codecs.stage import CODEC_SCHEMA, check_codec_choices, resolve_codecs
from kvbench_core.contracts.backend import BackendContext
from kvbench_core.contracts.errors import InputFileError, SpecError
from kvbench_core.contracts.plugins import extra_schema, lookup, registry
from kvbench_core.contracts.validation import validate_or_raise
from kvbench_core.spec.bounds import MAX_BYTES, MAX_SECONDS, MIN_INTERVAL_S, check_memory_tiers, check_parsed_bounds
from kvbench_core.spec.declaration import declaration_schema
from kvbench_core.spec.redact import register_spec_secrets
from kvbench_core.spec.safepaths import expanded, overlap_reason, tier_paths, unset_variable
from kvbench_core.spec.units import DURATION_PATTERN, SIZE_PATTERN, parse_duration, parse_size

SPEC_VERSION = 1

_SIZE = {
    "oneOf": [{"type": "integer", "minimum": 0, "maximum": MAX_BYTES}, {"type": "string", "pattern": SIZE_PATTERN}],
    "description": "a size in bytes, or a string like 512MiB / 8GB",
}
_DURATION = {
    "oneOf": [{"type": "number", "minimum": 0, "maximum": MAX_SECONDS},
              {"type": "string", "pattern": DURATION_PATTERN}],
    "description": "seconds, or a string like 30s / 5m / 500ms",
}
_CAPACITY = {
    "oneOf": [{"const": "auto"}, _SIZE],
    "description": "a size, 0 to disable the tier, or 'auto' to ask the backend",
}

DEFAULTS: dict[str, Any] = {
    "seed": 42,
    "warmup": 0,
    "trials": 1,
    "trial_pause": 0,
    "clients": 1,
    "verify": False,
    "payload": "random",
    "on_error": "stop",
    "model": {"dtype": None, "tp": 1},
    "workload": {
        "source": "synthetic",
        "users": 10,
        "users_scope": "per_client",
        "mode": "mixed",
        "generation": "none",
        "decode_batch": 32,
        "max_inflight": 16,
        "options": {},
    },
    "cache": {
        "promotion": "none",
        "eviction": {
            "target_usage_ratio": 0.8,
            "large_entry_limit_ratio": 0.95,
            "max_recursion_depth": 10,
            "max_evictions": 5000,
        },
    },
    "autoscaler": None,
    "precondition": None,
    "output": {"directory": "results", "formats": ["json"], "keep_files": False, "progress": "auto",
               "interval": 1.0},
    "declaration": {},
}

#: A run name becomes part of file names: no path separators, no hidden files, no name too long for a directory.
NAME_PATTERN = r"^(?![ .])[A-Za-z0-9 _.+=@,()-]{1,100}$"

GENERATION_MS_PER_TOKEN = {"none": 0.0, "fast": 2.0, "realistic": 30.0}


def core_schema() -> dict[str, Any]:
    """The core's own part of the run-spec schema (plugin fragments are added by ``full_schema``)."""
    tier = {
        "type": "object",
        "additionalProperties": False,
        "required": ["name", "backend"],
        "properties": {
            "name": {"type": "string", "pattern": "^[A-Za-z0-9_.-]+$", "description": "a tier name"},
            "backend": {"type": "string"},
            "capacity": _CAPACITY,
            "options": {"type": "object"},
            "cold_after": {**_DURATION, "description": "a duration (seconds, or a string like 30s / 5m): entries "
                                                        "idle this long in the tier above move down into this tier"},
            "codec": CODEC_SCHEMA,
        },
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "kvbench run spec",
        "type": "object",
        "additionalProperties": False,
        "required": ["version", "cache"],
        "anyOf": [{"required": ["duration"]}, {"required": ["requests"]}],
        "properties": {
            "version": {"const": SPEC_VERSION},
            "name": {"type": "string", "pattern": NAME_PATTERN,
                     "description": "a run name (it names the result files): up to 100 letters, digits, spaces "
                                    "and . _ + - = @ , ( ), not starting with a dot or a space"},
            "description": {"type": "string"},
            "seed": {"type": "integer", "minimum": 0, "maximum": 2**63 - 1},
            "model": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "name": {"type": "string"},
                    "config": {"type": "string", "description": "path to a Hugging Face config.json"},
                    "dtype": {"enum": ["fp32", "fp16", "bf16", "fp8", "int8", None]},
                    "tp": {"type": "integer", "minimum": 1, "maximum": 1024},
                },
            },
            "duration": _DURATION,
            "requests": {"type": "integer", "minimum": 1, "maximum": 10**9},
            "warmup": _DURATION,
            "drain_timeout": {**_DURATION, "description": "how long in-flight work may finish after duration "
                                                          "(default 10% of duration, at most 30s); then cancelled"},
            "qos": {"type": "object", "additionalProperties": False,
                    "description": "per QoS class SLA targets; the seed's table is the default",
                    "properties": {name: {"type": "object", "additionalProperties": False,
                                          "properties": {"p95": _DURATION, "p99": _DURATION}}
                                   for name in ("interactive", "responsive", "batch")}},
            "trials": {"type": "integer", "minimum": 1, "maximum": 100},
            "trial_pause": _DURATION,
            "clients": {"type": "integer", "minimum": 1, "maximum": 1024},
            "verify": {"type": "boolean"},
            "payload": {"enum": ["random", "synthetic_kv"],
                        "description": "what entries contain: random (incompressible, the default) or synthetic_kv "
                                       "(BF16 values from an activation-like model, see docs/codecs.md)"},
            "on_error": {"enum": ["stop", "count"]},
            "workload": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "source": {"type": "string"},
                    "users": {"type": "integer", "minimum": 1, "maximum": 1_000_000},
                    "users_scope": {"enum": ["per_client", "split"],
                                    "description": "users per client/rank, or split across them"},
                    "mode": {"enum": ["mixed", "prefill-only", "decode-only"]},
                    "generation": {"oneOf": [{"enum": ["none", "fast", "realistic"]},
                                             {"type": "number", "minimum": 0, "maximum": 60_000}],
                                   "description": "none/fast/realistic or milliseconds per token"},
                    "decode_batch": {"type": "integer", "minimum": 1, "maximum": 65_536},
                    "max_inflight": {"type": "integer", "minimum": 0, "maximum": 4096},
                    "options": {"type": "object"},
                },
            },
            "cache": {
                "type": "object",
                "additionalProperties": False,
                "required": ["tiers"],
                "properties": {
                    "promotion": {"enum": ["none", "on_read"]},
                    "codec": CODEC_SCHEMA,
                    "eviction": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "target_usage_ratio": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
                            "large_entry_limit_ratio": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
                            "max_recursion_depth": {"type": "integer", "minimum": 1, "maximum": 100},
                            "max_evictions": {"type": "integer", "minimum": 1, "maximum": 10**7},
                            "no_room_below": {"enum": ["refuse", "drop"],
                                              "description": "a victim the tier below has no room for: refuse "
                                                             "the cascade (the seed, default) or drop the victim"},
                        },
                    },
                    "tiers": {"type": "array", "minItems": 1, "maxItems": 16, "items": tier},
                },
            },
            "autoscaler": {
                "description": "null, or {name, max_users, stop_when_converged, options}",
                "oneOf": [
                    {"type": "null"},
                    {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["name"],
                        "properties": {
                            "name": {"type": "string"},
                            "max_users": {"type": "integer", "minimum": 1, "maximum": 1_000_000},
                            "stop_when_converged": {"type": "boolean"},
                            "options": {"type": "object"},
                        },
                    },
                ]
            },
            "precondition": {
                "description": "null, or {size, entry_size, threads}",
                "oneOf": [
                    {"type": "null"},
                    {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "size": {"oneOf": [{"const": "auto"}, _SIZE],
                                     "description": "bytes to write, or auto = 2x the bottom tier's capacity"},
                            "entry_size": _SIZE,
                            "threads": {"type": "integer", "minimum": 0, "maximum": 256,
                                        "description": "writer threads; 0 = one per CPU (the seed's auto)"},
                        },
                    },
                ]
            },
            "output": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "directory": {"type": "string"},
                    "formats": {"type": "array", "items": {"enum": ["json", "xlsx", "png", "html"]},
                                "uniqueItems": True},
                    "keep_files": {"type": "boolean"},
                    "progress": {"enum": ["auto", "on", "off", True, False],
                                 "description": "auto (only on a terminal), on or off"},
                    "interval": {"type": "number", "minimum": MIN_INTERVAL_S, "maximum": 3600,
                                 "description": "seconds between timeseries samples (10 ms to 1 h)"},
                    "io_log": {"type": "string", "description": "write every device command as JSONL here"},
                },
            },
            "declaration": declaration_schema(),
        },
    }


def _options_rules(kind: str, selector: str) -> list[dict[str, Any]]:
    """``if {selector: name} then {options: fragment}`` for every installed implementation."""
    rules = []
    for name, cls in sorted(registry(kind).items()):
        rules.append({
            "if": {"properties": {selector: {"const": name}}, "required": [selector]},
            "then": {"properties": {"options": cls.options_schema}},
        })
    return rules


def _default_options_rule(kind: str, selector: str) -> list[dict[str, Any]]:
    """Options of a spec that leaves ``selector`` out belong to the default implementation."""
    cls = registry(kind).get(DEFAULTS["workload"][selector])
    if cls is None:
        return []
    return [{"if": {"not": {"required": [selector]}}, "then": {"properties": {"options": cls.options_schema}}}]


def full_schema() -> dict[str, Any]:
    """The composed schema: the core's plus every installed plugin's option fragments."""
    schema = core_schema()
    props = schema["properties"]
    props["cache"]["properties"]["tiers"]["items"]["allOf"] = _options_rules("backend", "backend")
    props["workload"]["allOf"] = _options_rules("source", "source") + _default_options_rule("source", "source")
    props["autoscaler"]["oneOf"][1]["allOf"] = _options_rules("autoscaler", "name")
    props.update(extra_schema())
    return schema


def _deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _parse_override_value(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """``workload.users=20`` style overrides; list items by index, written as error messages write them
    (``cache.tiers[1].capacity=8GiB``) or dotted (``cache.tiers.1.capacity=8GiB``)."""
    spec = copy.deepcopy(raw)
    for override in overrides:
        if "=" not in override:
            raise SpecError(f"--set {override!r}: expected PATH=VALUE, e.g. workload.users=20")
        path, text = override.split("=", 1)
        parts = [part for part in re.sub(r"\[(-?\d+)\]", r".\1", path.strip()).split(".") if part]
        if not parts:
            raise SpecError(f"--set {override!r}: empty path")
        node: Any = spec
        for i, part in enumerate(parts[:-1]):
            node = _descend(node, part, parts[: i + 1], create=True)
        last = parts[-1]
        if isinstance(node, list):
            node[_index(node, last, parts)] = _parse_override_value(text)
        elif isinstance(node, dict):
            node[last] = _parse_override_value(text)
        else:
            raise SpecError(f"--set {'.'.join(parts)}: {'.'.join(parts[:-1])} is {node!r}, not a mapping")
    return spec


def _index(node: list[Any], part: str, parts: list[str]) -> int:
    """A list index as Python reads it: ``tiers[-1]`` is the last tier."""
    if not re.fullmatch(r"-?\d+", part) or not -len(node) <= int(part) < len(node):
        valid = f"0 to {len(node) - 1}, or -1 for the last" if node else "none: the list is empty"
        shown = re.sub(r"\.(-?\d+)(?=\.|$)", r"[\1]", ".".join(parts))
        raise SpecError(f"--set {shown}: no list item {part} (the list has {len(node)} items: {valid})")
    return int(part) % len(node)


def _descend(node: Any, part: str, parts: list[str], *, create: bool) -> Any:
    if isinstance(node, list):
        return node[_index(node, part, parts)]
    if not isinstance(node, dict):
        raise SpecError(f"--set {'.'.join(parts)}: {'.'.join(parts[:-1]) or 'spec'} is not a mapping")
    if node.get(part) is None and create:
        node[part] = {}
    return node[part]


def _parse_json_or_yaml(text: str) -> Any:
    """JSON is YAML, but PyYAML needs ~1 s per 30 KB: a result file (JSON) is parsed as JSON first."""
    if text.lstrip().startswith("{"):
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            pass  # a YAML flow mapping, or broken JSON: YAML names the line
    try:
        return _load_within_budget(text, _FastStrictLoader)  # a SafeLoader that also refuses duplicate keys
    except yaml.YAMLError as error:
        _load_within_budget(text, _StrictLoader)  # PyYAML's own parser says what is wrong more plainly
        raise error from None


#: Most nodes a spec may hold, each alias counted as the nodes it stands for.  A real spec has a few hundred;
#: a "billion laughs" alias bomb has 10^9 and grew past 1.5 GB before anything refused it.
MAX_YAML_NODES = 100_000


def _load_within_budget(text: str, loader_class: type) -> Any:
    """Compose the YAML graph (aliases stay shared, so this is cheap), refuse it if its expansion exceeds
    ``MAX_YAML_NODES``, and only then build Python objects from it."""
    loader = loader_class(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_node_budget(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _check_node_budget(root: yaml.Node) -> None:
    """Count ``root``'s expanded size in one pass over the shared graph (each node once, iteratively)."""
    expanded: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in expanded:
            continue
        children = [item for pair in node.value for item in pair] if isinstance(node, yaml.MappingNode) \
            else list(node.value) if isinstance(node, yaml.SequenceNode) else []
        if not children_done:
            stack.append((node, True))
            stack.extend((child, False) for child in children if id(child) not in expanded)
            continue
        if any(id(child) not in expanded for child in children):
            raise yaml.constructor.ConstructorError(None, None, "an alias refers to a node that contains it",
                                                    node.start_mark)
        expanded[id(node)] = 1 + sum(expanded[id(child)] for child in children)
        if expanded[id(node)] > MAX_YAML_NODES:
            raise yaml.constructor.ConstructorError(
                None, None, f"its aliases expand to more than {MAX_YAML_NODES:,} values (an alias bomb?); "
                            "a run spec needs a few hundred", node.start_mark)


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's SafeLoader, except that a key given twice in one mapping is an error, not "last one wins"."""


class _FastStrictLoader(getattr(yaml, "CSafeLoader", _StrictLoader)):  # type: ignore[misc]
    """The same on libyaml when present: 6x faster (most of a failing spec's time went into parsing)."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    first_line: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=deep)
        try:
            seen = first_line.get(key)
        except TypeError:  # an unhashable key: SafeLoader reports it below
            continue
        if seen is not None:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r} (first given on line {seen})",
                                                    key_node.start_mark)
        first_line[key] = key_node.start_mark.line + 1
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_FastStrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def read_spec_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Parse a YAML spec, or a result JSON whose embedded spec is to be re-run."""
    return _read_spec(path)[0]


def _read_spec(path: str | os.PathLike[str]) -> tuple[dict[str, Any], str | None, dict[str, Any] | None]:
    """The spec, and for a result file the folder its relative paths were resolved against and the result."""
    file = Path(path)
    try:
        text = file.read_text()
    except FileNotFoundError:
        raise InputFileError(f"{file}: spec file not found") from None
    except UnicodeDecodeError as error:
        raise InputFileError(f"{file}: not a text file (byte {error.start} is not UTF-8); a run spec is YAML") from None
    except OSError as error:
        raise InputFileError(f"{file}: cannot read spec: {error.strerror}") from None
    try:
        data = _parse_json_or_yaml(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise SpecError(f"{file}{where}: malformed YAML: {problem}") from None
    except RecursionError:
        raise SpecError(f"{file}: malformed spec: values nested too deeply to parse") from None
    if data is None:
        raise SpecError(f"{file}: the spec is empty; a run spec is a YAML mapping (see specs/quickstart.yaml)")
    if isinstance(data, dict) and "kvbench_result" in data:
        embedded = (data.get("spec") or {}).get("as_written") if isinstance(data.get("spec"), dict) else None
        if not isinstance(embedded, dict):
            raise SpecError(f"{file}: a kvbench result without an embedded spec (spec.as_written)")
        return copy.deepcopy(embedded), data["spec"].get("spec_dir"), data
    if not isinstance(data, dict):
        raise SpecError(f"{file}: expected a mapping at the top level, got {type(data).__name__}")
    return data, None, None


def validate(raw: dict[str, Any]) -> None:
    """Validate a raw spec (before defaults); raises ``SpecError`` naming every bad field."""
    validate_or_raise(_with_empty_options(raw), full_schema())
    _check_cross_fields(raw)


def _with_empty_options(raw: dict[str, Any]) -> dict[str, Any]:
    """The spec with ``options: {}`` wherever a tier, the workload or the autoscaler leaves it out, so an
    implementation's required options are reported by name (``cache.tiers[1].options.path: required
    field is missing``) instead of the fragment being skipped for want of an ``options`` object."""
    checked = copy.copy(raw)
    cache = raw.get("cache")
    if isinstance(cache, dict) and isinstance(cache.get("tiers"), list):
        checked["cache"] = {**cache, "tiers": [{"options": {}, **tier} if isinstance(tier, dict) else tier
                                               for tier in cache["tiers"]]}
    for section in ("workload", "autoscaler"):
        if isinstance(raw.get(section), dict):
            checked[section] = {"options": {}, **raw[section]}
    return checked


def _check_cross_fields(raw: dict[str, Any]) -> None:
    """Rules JSON Schema cannot say clearly: unknown plugin names, unique tier names, units."""
    cache = raw["cache"]
    names = [tier["name"] for tier in cache["tiers"]]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise SpecError(f"cache.tiers: tier names must be unique, repeated: {', '.join(duplicates)}")
    for i, tier in enumerate(cache["tiers"]):
        _check_backend_options(tier, lookup("backend", tier["backend"], path=f"cache.tiers[{i}].backend"))
    check_codec_choices(raw)
    source = (raw.get("workload") or {}).get("source", DEFAULTS["workload"]["source"])
    source_class = lookup("source", source, path="workload.source")
    # An implementation may check what its schema fragment cannot say (raises SpecError naming the path).
    check_options = getattr(source_class, "check_options", None)
    if callable(check_options):
        check_options((raw.get("workload") or {}).get("options") or {}, "workload.options")
    autoscaler = raw.get("autoscaler")
    if autoscaler:
        lookup("autoscaler", autoscaler["name"], path="autoscaler.name")
    if not raw.get("model", {}).get("name") and not raw.get("model", {}).get("config"):
        raise SpecError("model: give a catalog name (model.name) or a config.json path (model.config)")
    if raw.get("duration") is not None and parse_duration(raw["duration"]) == 0:
        raise SpecError(f"duration: expected a time > 0 (leave it out to stop on requests alone), "
                        f"got {raw['duration']!r}")
    # Compare parsed sizes: "0GiB" disables a tier as surely as 0 does.
    if not any(tier.get("capacity", "auto") == "auto" or parse_size(tier["capacity"]) > 0 for tier in cache["tiers"]):
        raise SpecError("cache.tiers: every tier has capacity 0; enable at least one")


def _check_backend_options(tier: dict[str, Any], cls: type) -> None:
    """Build (never open) the tier's backend: its constructor checks what its schema fragment cannot
    (the range of a size string, combinations of options), and must do so before any file is written."""
    if any(importlib.util.find_spec(module) is None for module in getattr(cls, "requires", {})):
        return  # the run stops at selection time with the install hint
    cls(dict(tier.get("options") or {}), BackendContext(tier_name=tier["name"], run_id="validate"))


def resolve(raw: dict[str, Any], spec_dir: str) -> dict[str, Any]:
    """Defaults filled and units converted: sizes in bytes, durations in seconds."""
    spec = _deep_merge(DEFAULTS, raw)
    spec["spec_dir"] = spec_dir
    for key in ("directory", "io_log"):  # "$HOME/results" is the home's results, as in a shell
        if isinstance(spec["output"].get(key), str):
            spec["output"][key] = expanded(spec["output"][key])
    for key in ("duration", "warmup", "trial_pause", "drain_timeout"):
        if spec.get(key) is not None:
            spec[key] = parse_duration(spec[key])
    for targets in (spec.get("qos") or {}).values():
        for key in list(targets):
            targets[key] = parse_duration(targets[key])
    for tier in spec["cache"]["tiers"]:
        capacity = tier.get("capacity", "auto")
        tier["capacity"] = "auto" if capacity == "auto" else parse_size(capacity)
        tier.setdefault("options", {})
        if isinstance(tier["options"].get("path"), str):
            tier["options"]["path"] = expanded(tier["options"]["path"])
        if tier.get("cold_after") is not None:
            tier["cold_after"] = parse_duration(tier["cold_after"])
    resolve_codecs(spec)
    generation = spec["workload"]["generation"]
    spec["workload"]["generation_ms_per_token"] = (
        GENERATION_MS_PER_TOKEN[generation] if isinstance(generation, str) else float(generation)
    )
    if spec.get("precondition") is not None:
        pre = {"size": "auto", "entry_size": 64 << 20, "threads": 4, **spec["precondition"]}
        pre["size"] = "auto" if pre["size"] == "auto" else parse_size(pre["size"])
        pre["entry_size"] = parse_size(pre["entry_size"])
        pre["threads"] = pre["threads"] or min(os.cpu_count() or 1, 256)
        spec["precondition"] = pre
    if spec.get("autoscaler") is not None:
        spec["autoscaler"] = {"options": {}, "stop_when_converged": False, **spec["autoscaler"]}
    return spec


def load_spec(path: str | os.PathLike[str], overrides: list[str] | None = None, *,
              accept_edited: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(as_written, resolved)``: the spec with overrides applied, and its resolved form.  A result file's
    spec is verified first (``kvbench_core.results.rerun``); ``resolved["rerun_of"]`` then says so."""
    written, recorded_dir, result = _read_spec(path)
    rerun_of = None
    if result is not None:
        from kvbench_core.results.rerun import verify_rerun

        rerun_of = verify_rerun(result, str(path), accept_edited=accept_edited)
    register_spec_secrets({"spec": written, "overrides": overrides or []})  # before any message can quote one
    raw = apply_overrides(written, overrides or [])
    register_spec_secrets(raw)
    validate(raw)
    # A re-run result resolves relative paths (model config, traces) where the original run did.
    spec_dir = recorded_dir if recorded_dir and Path(recorded_dir).is_dir() else str(Path(path).resolve().parent)
    check_model(raw["model"], spec_dir)
    check_output_paths(raw.get("output") or {}, clients=raw.get("clients", 1))
    check_tier_paths(raw["cache"]["tiers"])
    check_parsed_bounds(raw)
    check_memory_tiers(raw)
    resolved = resolve(raw, spec_dir)
    if rerun_of is not None:
        resolved["rerun_of"] = rerun_of
    return raw, resolved


def check_tier_paths(tiers: list[dict[str, Any]]) -> None:
    """File tiers' directories: ``$VARIABLE``s set, and no two tiers sharing or nesting a directory."""
    for field, path in tier_paths(tiers):
        _check_variables(field, path)
    reason = overlap_reason(tiers)
    if reason is not None:
        raise SpecError(reason)


def _check_variables(field: str, path: str) -> None:
    variable = unset_variable(path)
    if variable is not None:
        raise SpecError(f"{field}: {path}: {variable} is not set in the environment (kvbench expands ~ and "
                        "$VARIABLE in paths as a shell does)")


def check_output_paths(output: dict[str, Any], *, clients: int = 1) -> None:
    """Results and the I/O log never go into the OS, a virtual filesystem or a home directory itself, and
    must be writable: found out now, not when the result of a long run cannot be saved.  The I/O log must
    not exist yet: kvbench never overwrites a file it did not create (it once replaced the spec itself)."""
    from kvbench_core.spec.safepaths import refusal_reason, resolved

    wanted = (("output.directory", output.get("directory", DEFAULTS["output"]["directory"]), False),
              ("output.io_log", output.get("io_log"), True))
    for field, path, is_file in wanted:
        if not path:
            continue
        _check_variables(field, path)
        target = resolved(path)
        where = os.path.dirname(target) if is_file else target
        shown = f"{path} ({where})" if where != path else path
        reason = refusal_reason(where)
        if reason is not None:
            raise SpecError(f"{field}: {shown} {reason}")
        if is_file and os.path.isdir(target):
            raise SpecError(f"{field}: {path} is a directory; give a file name")
        if is_file and os.path.lexists(target):
            raise SpecError(f"{field}: {path} already exists; kvbench never overwrites a file it did not create: "
                            "remove it or name a new file")
        if is_file and clients > 1:
            raise SpecError(f"{field}: one I/O log cannot take {clients} client processes at once; "
                            "log a single-client run")
        existing = where
        while not os.path.lexists(existing):
            existing = os.path.dirname(existing)
        if not os.path.isdir(existing):
            raise SpecError(f"{field}: {shown} cannot be created: {existing} is not a directory")
        if not os.access(existing, os.W_OK | os.X_OK):
            raise SpecError(f"{field}: {shown} is not writable here ({existing}: permission denied or read-only)")


def check_model(model: dict[str, Any], spec_dir: str) -> None:
    """Resolve the model once at load time, so an unknown name, a broken config.json or an impossible
    TP degree is an error naming its field before any tier is opened (the runner resolves it again)."""
    from kvbench_core.spec.geometry import resolve_model

    name, config = model.get("name"), model.get("config")
    if config and not os.path.isabs(config):
        config = os.path.join(spec_dir, config)
    for field, tp in (("model.config" if config else "model.name", 1), ("model.tp", model.get("tp", 1))):
        try:
            resolve_model(name or config, model.get("dtype"), tp, config=config if name else None)
        except (SpecError, InputFileError) as error:
            raise type(error)(f"{field}: {error}") from None


def spec_sha256(as_written: dict[str, Any]) -> str:
    """Content hash of a spec, stable across key order."""
    import hashlib

    canonical = json.dumps(as_written, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()
