"""The run spec: one YAML file describing a whole run, validated against a JSON Schema that the
core composes from its own fragment and every installed plugin's option fragments.

Flow: ``load_plan(path, overrides)`` -> parse YAML (or a result JSON, whose embedded spec is re-run) ->
apply ``--set`` overrides -> validate (errors name the JSON path; plugin options are validated here,
once: a backend's, a source's and an autoscaler's by the composed schema, a codec's by
``check_codec_choices``) -> fill defaults -> resolve sizes and durations -> the frozen ``RunPlan``
(``runspec/plan.py``). Inner code trusts the plan.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

from kvbench_core.contracts.errors import SpecError
from kvbench_core.contracts.plugins import lookup
from kvbench_core.contracts.redact import register_spec_secrets
from kvbench_core.contracts.units import parse_duration, parse_size
from kvbench_core.contracts.validation import validate_or_raise, with_defaults
from kvbench_core.runspec.bounds import check_an_entry_fits, check_memory_tiers, check_parsed_bounds
from kvbench_core.runspec.codec_choices import check_codec_choices, resolve_codecs
from kvbench_core.runspec.overrides import _deep_merge, apply_overrides
from kvbench_core.runspec.plan import RunPlan, plan_run, thaw
from kvbench_core.runspec.reading import _read_spec
from kvbench_core.runspec.safepaths import (
    directory_option,
    expanded,
    overlap_reason,
    refusal_reason,
    resolved,
    tier_paths,
    unset_variable,
)
from kvbench_core.runspec.spec_schema import DEFAULTS, GENERATION_MS_PER_TOKEN, full_schema, section_schema
from kvbench_core.runspec.workers import check_workers


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
    _check_plugin_options(raw)
    if not raw.get("model", {}).get("name") and not raw.get("model", {}).get("config"):
        raise SpecError("model: give a catalog name (model.name) or a config.json path (model.config)")
    if raw.get("duration") is not None and parse_duration(raw["duration"]) == 0:
        raise SpecError(f"duration: expected a time > 0 (leave it out to stop on requests alone), "
                        f"got {raw['duration']!r}")
    # Compare parsed sizes: "0GiB" disables a tier as surely as 0 does.
    if not any(tier.get("capacity", "auto") == "auto" or parse_size(tier["capacity"]) > 0 for tier in cache["tiers"]):
        raise SpecError("cache.tiers: every tier has capacity 0; enable at least one")


def _check_plugin_options(raw: dict[str, Any]) -> None:
    """Every chosen plugin (tiers, codecs, the source, the autoscaler) known, and its ``check_options``:
    what its schema fragment cannot say, checked without building it (a run builds it once)."""
    for i, tier in enumerate(raw["cache"]["tiers"]):
        cls = lookup("backend", tier["backend"], path=f"cache.tiers[{i}].backend")
        cls.check_options(dict(tier.get("options") or {}), f"cache.tiers[{i}].options")
    check_codec_choices(raw)
    source = (raw.get("workload") or {}).get("source", DEFAULTS["workload"]["source"])
    source_class = lookup("source", source, path="workload.source")
    source_class.check_options((raw.get("workload") or {}).get("options") or {}, "workload.options")
    autoscaler = raw.get("autoscaler")
    if autoscaler:
        lookup("autoscaler", autoscaler["name"], path="autoscaler.name").check_options(
            autoscaler.get("options") or {}, "autoscaler.options")


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
        _resolve_tier(tier)
    resolve_codecs(spec)
    generation = spec["workload"]["generation"]
    spec["workload"]["generation_ms_per_token"] = (
        GENERATION_MS_PER_TOKEN[generation] if isinstance(generation, str) else float(generation)
    )
    if spec.get("precondition") is not None:
        spec["precondition"] = _resolve_precondition(spec["precondition"])
    if spec.get("autoscaler") is not None:
        spec["autoscaler"] = with_defaults(section_schema("autoscaler"), spec["autoscaler"])
    return spec


def _resolve_tier(tier: dict[str, Any]) -> None:
    """One tier in place: its capacity in bytes (or ``auto``), its directory expanded, ``cold_after`` in s."""
    capacity = tier.get("capacity", "auto")
    tier["capacity"] = "auto" if capacity == "auto" else parse_size(capacity)
    tier.setdefault("options", {})
    if option := directory_option(tier):
        tier["options"][option] = expanded(tier["options"][option])
    if tier.get("cold_after") is not None:
        tier["cold_after"] = parse_duration(tier["cold_after"])


def _resolve_precondition(written: dict[str, Any]) -> dict[str, Any]:
    """The precondition section with its defaults, sizes in bytes and a thread count."""
    pre = with_defaults(section_schema("precondition"), written)
    pre["size"] = "auto" if pre["size"] == "auto" else parse_size(pre["size"])
    pre["entry_size"] = parse_size(pre["entry_size"])
    pre["threads"] = pre["threads"] or min(os.cpu_count() or 1, 256)
    return pre


def load_plan(path: str | os.PathLike[str], overrides: list[str] | None = None, *,
              accept_edited: bool = False, on_this_machine: bool = True) -> tuple[dict[str, Any], RunPlan]:
    """``(as_written, plan)``: the spec with overrides applied, and its run plan (``spec.plan``), every
    check done (``on_this_machine`` false: all but the tier directories' parents, ``missing_parents``).
    A result file's spec is verified first (``kvbench_core.runspec.rerun``); the plan's
    ``spec["rerun_of"]`` then says so."""
    written, recorded_dir, result = _read_spec(path)
    rerun_of = None
    if result is not None:
        from kvbench_core.runspec.rerun import verify_rerun

        rerun_of = verify_rerun(result, str(path), accept_edited=accept_edited)
    register_spec_secrets({"spec": written, "overrides": overrides or []})  # before any message can quote one
    raw = apply_overrides(written, overrides or [])
    register_spec_secrets(raw)
    validate(raw)
    # A re-run result resolves relative paths (model config, traces) where the original run did.
    spec_dir = recorded_dir if recorded_dir and Path(recorded_dir).is_dir() else str(Path(path).resolve().parent)
    check_output_paths(raw.get("output") or {}, clients=raw.get("clients", 1),
                       processes=(raw.get("workers") or {}).get("processes", 1))
    check_tier_paths(raw["cache"]["tiers"], on_this_machine=on_this_machine)
    check_parsed_bounds(raw)
    check_memory_tiers(raw)
    resolved = resolve(raw, spec_dir)
    if rerun_of is not None:
        resolved["rerun_of"] = rerun_of
    # The model is resolved here, once: an unknown name, a broken config.json or an impossible TP degree
    # is an error naming its field before any tier is opened.
    plan = plan_run(resolved)
    check_workers(plan)
    if all(tier.capacity != "auto" for tier in plan.enabled_tiers):  # auto: judged once the tiers open
        check_an_entry_fits([(tier.name, float(tier.capacity)) for tier in plan.enabled_tiers],
                            plan.model.bytes_per_token_all_ranks, plan.eviction["large_entry_limit_ratio"])
    return raw, plan


def load_spec(path: str | os.PathLike[str], overrides: list[str] | None = None, *,
              accept_edited: bool = False, on_this_machine: bool = True) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(as_written, resolved)``: ``load_plan``'s checks, for a caller that reads the resolved spec itself
    (``spec validate --resolved``, tests); a run uses the plan."""
    as_written, plan = load_plan(path, overrides, accept_edited=accept_edited, on_this_machine=on_this_machine)
    return as_written, thaw(plan.spec)


def check_tier_paths(tiers: list[dict[str, Any]], *, on_this_machine: bool = True) -> None:
    """File tiers' directories: ``$VARIABLE``s set, never the OS, a virtual filesystem or a home directory
    itself (as for ``output.directory``: refused at load, not when the run opens the tier after writing
    its result directory), and no two tiers sharing or nesting a directory; ``on_this_machine``, also
    each one's parent present here (``missing_parents``)."""
    for field, path in tier_paths(tiers):
        check_tier_directory(field, path)
    reason = overlap_reason(tiers)
    if reason is not None:
        raise SpecError(reason)
    missing = missing_parents(tiers) if on_this_machine else []
    if missing:
        raise SpecError(missing[0])


def missing_parents(tiers: list[dict[str, Any]]) -> list[str]:
    """A tier directory that does not exist is created, but only inside one that does, unless the tier says
    ``create: true`` (filetiers/directory.CREATE_OPTION): a mistyped path silently grew a tree of directories.
    One reason per tier whose parent is missing on this machine: a fact of the machine, not of the spec
    (a GDS spec names its host's ``/mnt/nvme``), so a run refuses it and ``spec validate`` notes it."""
    reasons = []
    for i, tier in enumerate(tiers):
        options, option = tier.get("options") or {}, directory_option(tier)
        if option is None or tier.get("capacity") in (0, "0") or options.get("create") is True:
            continue
        path = options[option]
        target = resolved(path)
        parent = os.path.dirname(target)
        if not os.path.lexists(target) and not os.path.isdir(parent):
            reasons.append(f"cache.tiers[{i}].options.{option}: {path}: its parent {parent} does not exist; "
                           "create it, or set create: true in the tier's options to let kvbench make it")
    return reasons


def check_tier_directory(field: str, path: str) -> None:
    """One file tier's directory (at ``field``: a spec's ``cache.tiers[1].options.path``, a command line's
    ``--options.path``): its ``$VARIABLE``s set, and never the OS, a virtual filesystem or a home directory."""
    _check_variables(field, path)
    target = resolved(path)
    reason = refusal_reason(target)
    if reason is not None:
        raise SpecError(f"{field}: {path}{f' ({target})' if target != path else ''} {reason}")


def _check_variables(field: str, path: str) -> None:
    variable = unset_variable(path)
    if variable is not None:
        raise SpecError(f"{field}: {path}: {variable} is not set in the environment (kvbench expands ~ and "
                        "$VARIABLE in paths as a shell does)")


def check_output_paths(output: dict[str, Any], *, clients: int = 1, processes: int = 1) -> None:
    """Results and the I/O log never go into the OS, a virtual filesystem or a home directory itself, and
    must be writable: found out now, not when the result of a long run cannot be saved.  The I/O log must
    not exist yet: kvbench never overwrites a file it did not create (it once replaced the spec itself)."""
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
        if is_file:
            _check_one_writer(field, clients, processes)
        existing = where
        while not os.path.lexists(existing):
            existing = os.path.dirname(existing)
        if not os.path.isdir(existing):
            raise SpecError(f"{field}: {shown} cannot be created: {existing} is not a directory")
        if not os.access(existing, os.W_OK | os.X_OK):
            raise SpecError(f"{field}: {shown} is not writable here ({existing}: permission denied or read-only)")


def _check_one_writer(field: str, clients: int, processes: int) -> None:
    """One I/O log file is written by one process: not by several clients, nor by a run's worker processes."""
    if clients > 1:
        raise SpecError(f"{field}: one I/O log cannot take {clients} client processes at once; "
                        "log a single-client run")
    if processes > 1:
        raise SpecError(f"{field}: one I/O log cannot take {processes} worker processes at once; "
                        "log a run with workers.processes: 1")


def spec_sha256(as_written: dict[str, Any]) -> str:
    """Content hash of a spec, stable across key order."""
    import hashlib

    canonical = json.dumps(as_written, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()
