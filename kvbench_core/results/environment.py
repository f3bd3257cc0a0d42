"""What machine produced a result: OS, kernel, CPU, RAM, Python, where each path tier lives, and the
kernel and device settings a storage engineer asks about first.

Per path tier: the mount (filesystem, source, mount options) and its block device (model, rotational,
read_ahead_kb, logical and physical block size, volatile write cache, scheduler).  For the host:
transparent huge pages, the dirty-page ratios, NUMA nodes, the kernel command line and, where an
NVIDIA GPU is on the PCI bus, its PCIe link (generation as the link speed, width).  Everything is
read from /proc and /sys; what is not visible is left out, never guessed.
"""

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
                        "device_numbers": fields[2],
                        "mount_options": fields[5] + (f",{tail[2]}" if len(tail) > 2 else "")}
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
                     ("max_sectors_kb", "queue/max_sectors_kb"), ("scheduler", "queue/scheduler"),
                     ("read_ahead_kb", "queue/read_ahead_kb"), ("logical_block_size", "queue/logical_block_size"),
                     ("physical_block_size", "queue/physical_block_size"),
                     ("volatile_write_cache", "queue/write_cache")):
        try:
            info[key] = (Path("/sys/block") / disk / rel).read_text().strip()
        except OSError:
            continue
    return info


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def _selected(text: str | None) -> str | None:
    """The bracketed choice of a sysfs selector (``always [madvise] never`` -> ``madvise``)."""
    if text and "[" in text:
        return text.split("[", 1)[1].split("]", 1)[0]
    return text


def _number(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() else None


def _numa_nodes() -> int | None:
    nodes = Path("/sys/devices/system/node")
    if not nodes.is_dir():
        return None
    return len([n for n in nodes.iterdir() if n.name.startswith("node") and n.name[4:].isdigit()]) or None


def _gpu_pcie_links() -> list[dict[str, Any]]:
    """Every NVIDIA display/3D controller on the PCI bus with its current and maximum PCIe link."""
    links = []
    root = Path("/sys/bus/pci/devices")
    for device in sorted(root.iterdir()) if root.is_dir() else []:
        if _read(str(device / "vendor")) != "0x10de" or not (_read(str(device / "class")) or "").startswith("0x03"):
            continue
        links.append({"pci_address": device.name,
                      **{name: _read(str(device / name)) for name in ("current_link_speed", "current_link_width",
                                                                       "max_link_speed", "max_link_width")}})
    return links


def detect_host() -> dict[str, Any]:
    """Kernel settings that shape storage results: page cache writeback, THP, NUMA, the command line, GPUs."""
    return {
        "transparent_hugepages": _selected(_read("/sys/kernel/mm/transparent_hugepage/enabled")),
        "dirty_ratio": _number(_read("/proc/sys/vm/dirty_ratio")),
        "dirty_background_ratio": _number(_read("/proc/sys/vm/dirty_background_ratio")),
        "dirty_bytes": _number(_read("/proc/sys/vm/dirty_bytes")),
        "dirty_background_bytes": _number(_read("/proc/sys/vm/dirty_background_bytes")),
        "numa_nodes": _numa_nodes(),
        "kernel_cmdline": _read("/proc/cmdline"),
        "gpu_pcie_links": _gpu_pcie_links(),
    }


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
        "host": detect_host(),
    }
    if paths:
        env["paths"] = {tier: {"path": path, **(mount_of(path) or {})} for tier, path in paths.items()}
    return env
