"""The nixl tier's options: the schema fragment kvbench composes into the spec's, and the checks it cannot say.

The schema requires ``path`` for the file backends and ``bucket`` for OBJ;
``check_combinations`` refuses what the schema cannot express without
unreadable messages (an OBJ option on a file backend, VRAM on a plugin that
moves DRAM only, ``params`` the tier sets itself), each by its field path.
"""

from __future__ import annotations

from typing import Any

from kvbench_s3.options import OPTIONS_SCHEMA as S3_OPTIONS_SCHEMA

from kvbench_core.contracts.errors import SpecError
from kvbench_core.contracts.units import parse_size, size_schema
from kvbench_core.filetiers.directory import CREATE_OPTION
from kvbench_nixl.arena import ALIGN

MAX_TRANSFER = 1 << 30
FILE_BACKENDS = ("POSIX", "GDS", "GDS_MT")
GPU_BACKENDS = ("GDS", "GDS_MT")
#: Options that apply only to file backends, and only to OBJ.
FILE_OPTIONS = ("path", "allow_nonempty", "create", "fsync", "drop_cache")
OBJ_OPTIONS = ("bucket", "endpoint_url", "region", "profile", "create_bucket", "prefix", "virtual_addressing")
#: OBJ plugin parameters the tier sets from its own options and the credentials chain.
MANAGED_OBJ_PARAMS = frozenset({"bucket", "endpoint_override", "scheme", "region", "use_virtual_addressing",
                                "access_key", "secret_key", "session_token"})
_SECRET_NAMES = "(?i)(secret|access_key|session_token|password|credential|token)"
_S3 = S3_OPTIONS_SCHEMA["properties"]

OPTIONS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["nixl_backend"],
    "properties": {
        "nixl_backend": {"enum": ["POSIX", "OBJ", "GDS", "GDS_MT"],
                         "description": "NIXL backend plugin: POSIX files, OBJ (S3), GDS / GDS_MT (cuFile, GPU)"},
        "transfer_size": {**size_schema("bytes per NIXL descriptor (per object for OBJ), 4 KiB to 1 GiB"),
                          "default": "1MiB"},
        "queue_depth": {"type": "integer", "minimum": 1, "maximum": 256, "default": 1,
                        "description": "descriptors per NIXL request: pieces of one entry in flight at once"},
        "memory": {"enum": ["DRAM", "VRAM"], "default": "DRAM",
                   "description": "where the registered payload memory lives; VRAM needs GDS/GDS_MT and a GPU"},
        "device": {"type": "string", "pattern": "^cuda(:[0-9]+)?$", "default": "cuda",
                   "description": "the GPU of a VRAM arena"},
        "agents": {"enum": ["separate", "shared"], "default": "separate",
                   "description": "one NIXL agent per concurrent operation (as one per engine worker), "
                                  "or one agent all operations share"},
        "params": {"type": "object", "default": {},
                   "propertyNames": {"not": {"pattern": _SECRET_NAMES},
                                     "description": "credentials come from the boto3 chain, never the spec"},
                   "additionalProperties": {"type": ["string", "integer", "boolean"]},
                   "description": "more init parameters of the NIXL plugin, e.g. {use_uring: true}"},
        "path": {"type": "string", "minLength": 1,
                 "description": "POSIX/GDS: directory for the entry files (created and marked if missing)"},
        "allow_nonempty": {"type": "boolean", "default": False,
                           "description": "use an existing non-empty directory kvbench did not create"},
        "create": CREATE_OPTION,
        "fsync": {"type": "boolean", "default": True, "description": "fsync each entry file before write returns"},
        "drop_cache": {"type": "boolean", "default": True,
                       "description": "posix_fadvise(DONTNEED) each entry file before it is read"},
        "bucket": _S3["bucket"],
        "endpoint_url": _S3["endpoint_url"],
        "region": _S3["region"],
        "profile": _S3["profile"],
        "create_bucket": _S3["create_bucket"],
        "prefix": _S3["prefix"],
        "virtual_addressing": {"type": "boolean", "default": False,
                               "description": "OBJ: virtual-hosted-style addressing (path style when false)"},
    },
    "allOf": [{"if": {"properties": {"nixl_backend": {"const": "OBJ"}}, "required": ["nixl_backend"]},
               "then": {"required": ["bucket"]}, "else": {"required": ["path"]}}],
}


def check_combinations(options: dict[str, Any], *, given: frozenset[str], where: str) -> None:
    """Refuse option combinations the schema lets through: ``options`` with their defaults, ``given`` the
    keys the spec wrote (an option of the other kind is refused when written, even at its default value);
    ``where`` is the options' field path."""
    backend = options["nixl_backend"]
    files = backend in FILE_BACKENDS
    for option in OBJ_OPTIONS if files else FILE_OPTIONS:
        if option in given:
            needs = "OBJ" if files else "POSIX, GDS or GDS_MT"
            raise SpecError(f"{where}.{option}: applies to nixl_backend {needs}, not {backend}")
    if options.get("memory") == "VRAM" and backend not in GPU_BACKENDS:
        raise SpecError(f"{where}.memory: VRAM needs nixl_backend GDS or GDS_MT "
                        f"(NIXL's {backend} plugin moves DRAM only)")
    managed = sorted(MANAGED_OBJ_PARAMS & set(options.get("params", {}))) if backend == "OBJ" else []
    if managed:
        raise SpecError(f"{where}.params.{managed[0]}: set by the tier (bucket, endpoint_url, region, "
                        "virtual_addressing options; credentials from the boto3 chain), not in params")


def transfer_size(value: int | str, where: str) -> int:
    size = parse_size(value)
    if not ALIGN <= size <= MAX_TRANSFER:
        raise SpecError(f"{where}.transfer_size: expected a size between 4 KiB and 1 GiB, got {value!r}")
    return size


def plugin_params(params: dict[str, str | int | bool]) -> dict[str, str]:
    """``params`` as the strings NIXL's init parameters are."""
    return {key: param_text(value) for key, value in params.items()}


def posix_io_queue(params: dict[str, str]) -> str:
    """The io queue NIXL's POSIX plugin picks from its parameters (its own order: aio, uring, posix_aio);
    NIXL does not report it back, so this is what was asked for."""
    for key, queue in (("use_aio", "libaio"), ("use_uring", "io_uring"), ("use_posix_aio", "POSIX AIO")):
        if params.get(key) == "true":
            return queue
    return "NIXL's default (libaio where available)"


def param_text(value: str | int | bool) -> str:
    """NIXL's init parameters are strings; booleans as NIXL spells them."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
