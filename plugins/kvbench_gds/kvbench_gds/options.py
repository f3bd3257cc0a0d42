"""The gds tier's options: their schema (defaults live here once) and the page-multiple sizes.

cuFile's DMA wants 4 KiB-aligned offsets and sizes, which the schema cannot
say for a size written as ``16MiB``; ``page_multiple`` checks it, naming the
field, at validation (``check_options``) and again when the tier is built.
"""

from __future__ import annotations

from typing import Any

from kvbench_core.contracts.errors import SpecError
from kvbench_core.contracts.units import parse_size, size_schema
from kvbench_core.filetiers.directory import CREATE_OPTION

ALIGN = 4096  # GPU page size: cuFile DMA wants 4 KiB-aligned offsets and sizes
MAX_TRANSFER = 1 << 30
#: The options that must be whole 4 KiB pages.
PAGE_SIZED = ("transfer_size", "task_size")
_SIZE = size_schema("a size such as 4MiB or 4194304")

OPTIONS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["path"],
    "properties": {
        "path": {"type": "string", "minLength": 1,
                 "description": "directory for the entry files, on a GDS-capable filesystem (ext4, xfs…)"},
        "create": CREATE_OPTION,
        "device": {"type": "string", "pattern": "^(cuda(:[0-9]+)?|cpu)$", "default": "cuda",
                   "description": "torch device of the staging buffers; 'cpu' is for testing only (never GDS)"},
        "num_threads": {"type": "integer", "minimum": 1, "maximum": 256, "default": 8,
                        "description": "kvikio thread pool size (process-wide): cuFile tasks in flight"},
        "task_size": {**_SIZE, "default": "4MiB",
                      "description": "bytes per cuFile task; kvikio splits each pwrite/pread into these"},
        "transfer_size": {**_SIZE, "default": "16MiB",
                          "description": "bytes per pwrite/pread (staging buffer size), a multiple of 4 KiB"},
        "compat_mode": {"enum": ["on", "off", "auto"], "default": "auto",
                        "description": "kvikio compatibility mode: on = POSIX, off = cuFile only, "
                                       "auto = cuFile when the system allows"},
        "require_gds": {"type": "boolean", "default": False,
                        "description": "fail before the run unless I/O takes the real GDS DMA path"},
        "bypass_page_cache": {"type": "boolean", "default": True,
                              "description": "keep the page cache out of the measurement (O_DIRECT under "
                                             "cuFile; fsync + posix_fadvise DONTNEED on fallback paths)"},
        "fsync": {"type": "boolean", "default": True,
                  "description": "fsync each entry before write returns"},
        "payload_origin": {"enum": ["host", "gpu"], "default": "host",
                           "description": "gpu: render generated payloads in GPU memory (no host bytes)"},
    },
}


def page_multiple(options: dict[str, Any], option: str, where: str) -> int:
    """A size option in bytes: whole 4 KiB pages, 4 KiB to 1 GiB (cuFile's alignment); errors name
    ``<where>.<option>``."""
    value = options[option]
    size = parse_size(value)
    if not ALIGN <= size <= MAX_TRANSFER or size % ALIGN:
        raise SpecError(f"{where}.{option}: expected a multiple of 4 KiB between 4 KiB and "
                        f"1 GiB, got {value!r}")
    return size
