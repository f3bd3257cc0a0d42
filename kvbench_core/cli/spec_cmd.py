"""``kvbench spec validate|schema|declare``: validate a spec, print the composed schema, list what to declare."""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterator
from typing import Any

from kvbench_core.contracts.errors import UserError
from kvbench_core.contracts.units import format_bytes, parse_duration, parse_size
from kvbench_core.runspec.codec_choices import codec_choice, tier_codec
from kvbench_core.runspec.declaration import CHECKLIST, missing_fields
from kvbench_core.runspec.loader import load_spec, missing_parents
from kvbench_core.runspec.spec_schema import full_schema

#: A value written with a unit letter ("128k", "30s"): the ones worth showing as parsed.
_WITH_UNIT = re.compile(r"^\s*[0-9.]+\s*[a-zA-Z]+\s*$")
#: Option names that hold a size when the core does not resolve them (a plugin parses its own options).
_SIZE_NAMES = ("size", "capacity", "bytes")

#: Declaration fields a run fills in itself (from backends, the workload and the machine).
DETECTED_AT_RUN = {
    "tiers.topology", "tiers.capacities", "tiers.eviction_policy", "tiers.admission_policy",
    "tiers.promotion_policy", "tiers.cache_state", "tiers.working_set_vs_tier", "access.per_tier", "access.queue_depth",
    "access.scheduler_integration", "access.preloading", "tensor.kv_dtype", "tensor.codec", "tensor.lossless",
    "workload.input_length_mean", "workload.input_length_p99", "workload.prefix_reuse_rate",
    "workload.prefix_length_distribution",
    "workload.concurrency", "workload.arrival_process", "workload.warmup", "access.request_concurrency",
    # from /proc and /sys (results/environment.py); storage.* below, for tiers on a block device
    "host.transparent_hugepages", "host.dirty_ratios", "host.numa_nodes", "host.kernel_cmdline",
    # the route to each endpoint, the tiers' interfaces, and 1.0 without a codec (results/detected_declaration.py)
    "network.fabric", "distributed.interface", "tensor.compression_ratio",
}
#: Fields a run detects, or marks "not applicable" with the reason when it cannot apply (no network tier:
#: no link speed; no file tier: no mount options; no codec: no codec version; no inference engine).
DETECTED_OR_NOT_APPLICABLE = {
    "network.link_speed_gbps", "network.gpudirect_rdma", "network.congestion_control", "network.nvme_of",
    "tensor.quality_impact", "distributed.erasure_coding", "distributed.shard_placement",
    "distributed.gpu_to_shard_placement", "host.gpu_pcie_link", "storage.mount_options", "storage.read_ahead_kb",
    "storage.logical_block_size", "storage.physical_block_size", "storage.volatile_write_cache",
    *(f"engine.{name}" for name in ("name", "version", "kv_connector", "kv_connector_version",
                                    "disaggregated_prefill_decode", "transfer_protocol")),
}
#: ... and on a machine with an NVIDIA GPU, its PCIe link.
DETECTED_WITH_GPU = {"host.gpu_pcie_link"}
#: ... and those it fills in too when a tier runs through a codec (docs/codecs.md).
DETECTED_WITH_CODEC = {"tensor.codec_version", "tensor.integration_point", "tensor.overlapped"}


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("spec", help="validate a spec, print the schema, list declaration gaps")
    sub = parser.add_subparsers(dest="spec_command", metavar="SUBCOMMAND", required=True)
    validate = sub.add_parser("validate", help="validate a spec file (and overrides)")
    validate.add_argument("files", nargs="+", metavar="file",
                          help="the run spec (YAML or JSON), or a result JSON to validate the spec it carries; several "
                               "files (specs/*.yaml) are each validated, and every error is reported")
    validate.add_argument("--set", dest="overrides", action="append", default=[], metavar="PATH=VALUE",
                          help="override a field as `kvbench run` would, e.g. --set cache.tiers[1].capacity=8GiB")
    validate.add_argument("--resolved", action="store_true", help="print the resolved spec (defaults filled)")
    validate.set_defaults(handler=handle_validate)
    schema = sub.add_parser("schema", help="print the composed JSON Schema (installed plugins included)")
    schema.set_defaults(handler=handle_schema)
    declare = sub.add_parser("declare", help="show which declaration fields are still missing for a spec")
    declare.add_argument("file", help="the run spec (YAML or JSON)")
    declare.add_argument("--json", action="store_true", help="machine-readable output")
    declare.set_defaults(handler=handle_declare)


def handle_validate(args: argparse.Namespace) -> int:
    if len(args.files) == 1:  # one file: its error is the command's error, as for every other command
        _validate_one(args.files[0], args)
        return 0
    # Several (specs/*.yaml): validate them all, one error line per bad file naming it, the worst exit code.
    worst = 0
    for file in args.files:
        try:
            _validate_one(file, args)
        except UserError as error:
            text = str(error)
            print(f"kvbench: error: {text if text.startswith(file) else f'{file}: {text}'}", file=sys.stderr)
            worst = max(worst, error.exit_code)
    return worst


def _validate_one(file: str, args: argparse.Namespace) -> None:
    """A spec is valid where it is written, not only on the machine it names (a GDS spec's ``/mnt/nvme``):
    a tier directory whose parent is missing here is a note, which ``kvbench run`` refuses on this machine."""
    as_written, resolved = load_spec(file, args.overrides, on_this_machine=False)
    if args.resolved:
        print(json.dumps({k: v for k, v in resolved.items() if k != "spec_dir"}, indent=2))
    else:
        print(f"{file}: valid")
        for path, written, parsed in parsed_values(as_written, resolved):
            print(f"  {path}: {written} = {parsed}")
        for reason in missing_parents(as_written["cache"]["tiers"]):
            print(f"  note: on this machine {reason} (kvbench run refuses it here)")


def parsed_values(as_written: Any, resolved: Any, path: str = "") -> Iterator[tuple[str, str, str]]:
    """(field path, as written, as parsed) for every size and duration written with a unit, so that
    ``128k`` is seen to be 131,072 bytes before a run, not after.  A value the core resolved is shown as
    resolved; a plugin option the core leaves as text is parsed as a size when its name says it is one."""
    if isinstance(as_written, dict):
        for key, value in as_written.items():
            inner = resolved.get(key) if isinstance(resolved, dict) else None
            yield from parsed_values(value, inner, f"{path}.{key}" if path else str(key))
    elif isinstance(as_written, list):
        for index, value in enumerate(as_written):
            inner = resolved[index] if isinstance(resolved, list) and index < len(resolved) else None
            yield from parsed_values(value, inner, f"{path}[{index}]")
    elif isinstance(as_written, str) and _WITH_UNIT.match(as_written):
        shown = _as_parsed(as_written, resolved, path.rsplit(".", 1)[-1])
        if shown:
            yield path, as_written, shown


def _as_parsed(written: str, resolved: Any, name: str) -> str | None:
    as_size = _try(parse_size, written)
    as_duration = _try(parse_duration, written)
    if isinstance(resolved, int | float) and not isinstance(resolved, bool):
        if as_size == resolved:
            return _bytes(as_size)
        if as_duration == resolved:
            return f"{as_duration:g} s"
    if resolved == written and as_size is not None and any(word in name for word in _SIZE_NAMES):
        return _bytes(as_size)
    return None


def _bytes(value: float) -> str:
    return f"{int(value):,} bytes ({format_bytes(value)})"


def _try(parse: Any, text: str) -> float | None:
    try:
        return parse(text)
    except ValueError:
        return None


def handle_schema(args: argparse.Namespace) -> int:
    print(json.dumps(full_schema(), indent=2))
    return 0


def declaration_status(declared: dict, *, coded: bool = False) -> dict[str, str]:
    """``section.field`` -> declared | detected at run | detected or n/a at run | missing (``coded``: a tier
    runs a codec; without one its codec fields are not applicable)."""
    detected = DETECTED_AT_RUN | (DETECTED_WITH_CODEC if coded else set())
    status = {}
    for section, fields in CHECKLIST.items():
        for name in fields:
            dotted = f"{section}.{name}"
            if (declared.get(section) or {}).get(name) is not None:
                status[dotted] = "declared"
            elif dotted in detected:
                status[dotted] = "detected at run"
            elif dotted in DETECTED_OR_NOT_APPLICABLE or dotted in DETECTED_WITH_CODEC:
                status[dotted] = "detected or n/a at run"
            else:
                status[dotted] = "missing"
    return status


def uses_codec(spec: dict) -> bool:
    """Whether any tier of a spec (as written) runs through a codec other than ``none``."""
    cache = spec.get("cache") or {}
    choices = [codec_choice(tier_codec(cache, tier)) for tier in cache.get("tiers") or []]
    return any(choice is not None and choice["name"] != "none" for choice in choices)


def handle_declare(args: argparse.Namespace) -> int:
    as_written, _ = load_spec(args.file, on_this_machine=False)
    status = declaration_status(as_written.get("declaration") or {}, coded=uses_codec(as_written))
    if args.json:
        print(json.dumps(status, indent=2))
        return 0
    missing = [field for field, state in status.items() if state == "missing"]
    for field, state in status.items():
        section, name = field.split(".")
        description = CHECKLIST[section][name][1]
        print(f"{state:<16} {field:<42} {description}")
    print(f"\n{len(missing)} field(s) to declare under 'declaration:' in {args.file}")
    return 0


__all__ = ["declaration_status", "missing_fields", "register"]
