"""The run-spec JSON Schema: the core's own fragment, composed with every installed plugin's option fragments.

Defaults live here once (``DEFAULTS`` and the schema's ``default`` keywords); ``loader.resolve`` fills them.
"""

from __future__ import annotations

from typing import Any

from kvbench_core.contracts.plugins import extra_schema, registry
from kvbench_core.contracts.units import duration_schema, size_schema
from kvbench_core.runspec.bounds import MAX_BYTES, MAX_SECONDS, MIN_INTERVAL_S
from kvbench_core.runspec.codec_choices import CODEC_SCHEMA
from kvbench_core.runspec.declaration import declaration_schema

SPEC_VERSION = 1

_SIZE = size_schema("a size in bytes, or a string like 512MiB / 8GB", minimum=0, maximum=MAX_BYTES)
_DURATION = duration_schema("seconds, or a string like 30s / 5m / 500ms", maximum=MAX_SECONDS)
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
    "workers": {"processes": 1},
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
               "interval": 1.0, "exit_zero": False},
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
                     "description": "a run name (it names the result files): up to 100 ASCII letters, digits, "
                                    "spaces and . _ + - = @ , ( ), not starting with a dot or a space (any "
                                    "text goes in description)"},
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
            "workers": {"type": "object", "additionalProperties": False,
                        "description": "one run's I/O over several processes (docs/scale-out.md, worker processes)",
                        "properties": {"processes": {
                            "type": "integer", "minimum": 1, "maximum": 256,
                            "description": "worker processes, each with its share of the users and of every "
                                           "tier's capacity; one merged result"}}},
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
                            "stop_when_converged": {"type": "boolean", "default": False},
                            "options": {"type": "object", "default": {}},
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
                            "size": {"oneOf": [{"const": "auto"}, _SIZE], "default": "auto",
                                     "description": "bytes to write, or auto = 2x the bottom tier's capacity"},
                            "entry_size": {**_SIZE, "default": "64MiB"},
                            "threads": {"type": "integer", "minimum": 0, "maximum": 256, "default": 4,
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
                    "metrics": {"type": "object", "additionalProperties": False, "required": ["port"],
                                "description": "serve live OpenMetrics while the run runs (docs/live-metrics.md)",
                                "properties": {
                                    "port": {"type": "integer", "minimum": 1, "maximum": 65535},
                                    "host": {"type": "string", "minLength": 1, "default": "127.0.0.1",
                                             "description": "the address to listen on; 0.0.0.0 serves every "
                                                            "interface"}}},
                    "exit_zero": {"type": "boolean",
                                  "description": "exit 0 for a degraded or inconclusive run (as --exit-zero); "
                                                 "failed and interrupted runs keep their codes"},
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


def section_schema(name: str) -> dict[str, Any]:
    """The object form of an optional top-level section (``autoscaler``, ``precondition``: null or an
    object), whose field defaults ``with_defaults`` fills: they live in the schema, once."""
    return next(branch for branch in core_schema()["properties"][name]["oneOf"] if branch.get("type") == "object")
