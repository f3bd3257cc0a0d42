"""How much memory a memory tier can really have: the host's (MemAvailable, capped by the cgroup's limit)
and a GPU's (free device memory).

A DRAM tier larger than this does not fail politely: the kernel's OOM killer ends the run with exit 137
and no result.  So the spec loader refuses it before the run, naming both figures, and ``capacity:
auto`` sizes a memory tier from the same figures.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

#: cgroup v2 (unified) and v1 memory controllers, as mounted in containers and systemd slices.
_CGROUP_V2 = "/sys/fs/cgroup"
_CGROUP_V1 = "/sys/fs/cgroup/memory"
#: A v1 "unlimited" limit is a huge page-rounded number; anything above this is no limit.
_NO_LIMIT = 1 << 60


@dataclass(frozen=True)
class MemoryLimit:
    """Bytes a memory tier may use, and the figures that say so (for the error message)."""

    nbytes: int
    reason: str


def _read_int(path: str) -> int | None:
    try:
        with open(path) as handle:
            text = handle.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _mem_available() -> int | None:
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cgroup_room() -> int | None:
    """What this process's cgroup still allows (limit minus usage); None when it has no limit."""
    for limit_file, usage_file in ((f"{_CGROUP_V2}/memory.max", f"{_CGROUP_V2}/memory.current"),
                                   (f"{_CGROUP_V1}/memory.limit_in_bytes", f"{_CGROUP_V1}/memory.usage_in_bytes")):
        limit = _read_int(limit_file)  # "max" (no limit) reads as None
        if limit is not None and limit < _NO_LIMIT:
            return max(0, limit - (_read_int(usage_file) or 0))
    return None


def host_memory_limit() -> MemoryLimit | None:
    """The host memory a DRAM tier can have; None when the kernel does not say (not Linux)."""
    available, room = _mem_available(), _cgroup_room()
    figures = [(value, text) for value, text in ((available, "MemAvailable"), (room, "left under the cgroup limit"))
               if value is not None]
    if not figures:
        return None
    nbytes, _ = min(figures)
    return MemoryLimit(nbytes, ", ".join(f"{text} {value / 2**30:.2f} GiB" for value, text in figures))


def gpu_memory_limit(device: str) -> MemoryLimit | None:
    """Free memory on a CUDA device; None without torch or CUDA (the tier's open says why)."""
    if not device.startswith("cuda") or os.environ.get("CUDA_VISIBLE_DEVICES") == "":
        return None
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    free, total = torch.cuda.mem_get_info(torch.device(device))
    return MemoryLimit(int(free), f"{free / 2**30:.2f} GiB free of {total / 2**30:.2f} GiB on {device}")
