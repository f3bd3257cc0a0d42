"""What machine produced a result: OS, kernel, CPU, RAM, Python, and where each path tier lives."""

from __future__ import annotations

import os
import platform
import socket
from pathlib import Path
from typing import Any


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return platform.processor() or None


def _ram_bytes() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _os_release() -> str | None:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        return None
    return None


def mount_of(path: str) -> dict[str, Any] | None:
    """Filesystem type, mount point and source device of the mount holding ``path``."""
    try:
        target = os.path.realpath(path)
        while not os.path.exists(target):
            target = os.path.dirname(target)
        best: dict[str, Any] | None = None
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            left, _, right = line.partition(" - ")
            fields, tail = left.split(), right.split()
            mount_point = fields[4].replace("\\040", " ")
            if (target == mount_point or target.startswith(mount_point.rstrip("/") + "/")) and (
                best is None or len(mount_point) > len(best["mount_point"])
            ):
                best = {"mount_point": mount_point, "fs_type": tail[0], "source": tail[1],
                        "device_numbers": fields[2]}
        if best:
            best["block_device"] = _block_device(best["device_numbers"])
        return best
    except (OSError, IndexError):
        return None


def _block_device(numbers: str) -> dict[str, Any] | None:
    """Map ``major:minor`` to /sys/block's device name and model, where visible."""
    link = Path(f"/sys/dev/block/{numbers}")
    if not link.exists():
        return None
    resolved = link.resolve()
    name = resolved.name
    disk = resolved.parent.name if (resolved / "partition").exists() else name
    info: dict[str, Any] = {"name": name, "disk": disk}
    for key, rel in (("model", "device/model"), ("rotational", "queue/rotational"),
                     ("max_sectors_kb", "queue/max_sectors_kb"), ("scheduler", "queue/scheduler")):
        try:
            info[key] = (Path("/sys/block") / disk / rel).read_text().strip()
        except OSError:
            continue
    return info


def detect_environment(paths: dict[str, str] | None = None) -> dict[str, Any]:
    """The detected environment; ``paths`` maps tier names to directories to describe."""
    uname = platform.uname()
    env: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "os": _os_release() or uname.system,
        "kernel": uname.release,
        "machine": uname.machine,
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "ram_bytes": _ram_bytes(),
        "python": platform.python_version(),
    }
    if paths:
        env["paths"] = {tier: {"path": path, **(mount_of(path) or {})} for tier, path in paths.items()}
    return env
