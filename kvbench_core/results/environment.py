"""What machine produced a result: OS, kernel, CPU, RAM, Python, where each path tier lives, and the
kernel and device settings a storage engineer asks about first.

Per path tier: the mount (filesystem, source, mount options) and its block device (model, firmware and
NVMe transport, rotational, read_ahead_kb, max_sectors_kb, logical and physical block size, volatile write
cache, scheduler, its NUMA node and PCIe link where the kernel knows them).  Per network tier: the
interface the route to its endpoint takes, with its MTU, link speed and type, and TCP congestion control.  For the host:
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
    info.update(_device_placement(Path("/sys/block") / disk / "device"))
    for key, rel in (("model", "device/model"), ("firmware_rev", "device/firmware_rev"),
                     ("transport", "device/transport"), ("rotational", "queue/rotational"),
                     ("max_sectors_kb", "queue/max_sectors_kb"), ("scheduler", "queue/scheduler"),
                     ("read_ahead_kb", "queue/read_ahead_kb"), ("logical_block_size", "queue/logical_block_size"),
                     ("physical_block_size", "queue/physical_block_size"),
                     ("volatile_write_cache", "queue/write_cache")):
        try:
            info[key] = (Path("/sys/block") / disk / rel).read_text().strip()
        except OSError:
            continue
    return info


def _device_placement(device: Path) -> dict[str, Any]:
    """The block device's NUMA node and PCIe link, from the first directory above its ``device`` link that
    has them (an NVMe namespace's controller sits under its PCI function; a virtio disk under its own): the
    NUMA node only when the kernel knows it (not -1), the link only on a PCIe device."""
    found: dict[str, Any] = {}
    try:
        node = device.resolve()
    except OSError:
        return found
    while node != node.parent and str(node).startswith("/sys/devices"):
        if "numa_node" not in found and (numa := _read(str(node / "numa_node"))) not in (None, "-1"):
            found["numa_node"] = _number(numa)
        if "pcie_link" not in found and (speed := _read(str(node / "current_link_speed"))):
            found["pcie_link"] = {"pci_address": node.name, "speed": speed,
                                  "width": _number(_read(str(node / "current_link_width"))),
                                  "max_speed": _read(str(node / "max_link_speed")),
                                  "max_width": _number(_read(str(node / "max_link_width")))}
        node = node.parent
    return found


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


def detect_environment(paths: dict[str, str] | None = None, endpoints: dict[str, str] | None = None
                       ) -> dict[str, Any]:
    """The detected environment; ``paths`` maps tier names to directories to describe, ``endpoints`` network
    tiers to the endpoint their description names (``detect_network``)."""
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
    if endpoints:
        env["network"] = detect_network(endpoints)
    return env


#: ``/sys/class/net/<interface>/type`` (ARPHRD_*) -> what the link is.
LINK_TYPES = {1: "ethernet", 32: "infiniband", 772: "loopback"}
_SIOCGIFADDR = 0x8915


def _interface_addresses() -> dict[str, str]:
    """IPv4 address -> interface name, for every interface that has one (``ioctl``, no external tool)."""
    import fcntl
    import struct

    addresses: dict[str, str] = {}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for _, name in socket.if_nameindex():
            try:
                packed = fcntl.ioctl(probe.fileno(), _SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
            except OSError:
                continue  # no IPv4 address
            addresses[socket.inet_ntoa(packed[20:24])] = name
    return addresses


def route_to(host: str, port: int) -> dict[str, Any]:
    """The interface the kernel routes ``host:port`` through, with its MTU, link speed and type: a UDP
    socket is connected (which sends nothing) and its local address is matched to an interface.  IPv4
    only; what cannot be told is left out."""
    try:
        address = socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_DGRAM)[0][4][0]
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((address, port))
            local = probe.getsockname()[0]
    except OSError:
        return {}
    route: dict[str, Any] = {"address": address, "source_address": local}
    interface = _interface_addresses().get(local)
    if interface is None:
        return route
    sysfs = f"/sys/class/net/{interface}"
    speed = _number(_read(f"{sysfs}/speed"))
    route.update(interface=interface, mtu=_number(_read(f"{sysfs}/mtu")),
                 link_type=LINK_TYPES.get(_number(_read(f"{sysfs}/type")) or -1, "other"))
    if speed:
        route["speed_mbps"] = speed
    return route


def endpoint_host(endpoint: str) -> tuple[str, int] | None:
    """(host, port) of a tier's endpoint as its description prints it: ``host:port``, a URL, or None for a
    Unix socket or a cloud default (no address to route)."""
    from urllib.parse import urlsplit

    if endpoint.startswith("unix:"):
        return None
    parts = urlsplit(endpoint if "://" in endpoint else f"tcp://{endpoint}")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None
    return (parts.hostname, port) if parts.hostname else None


def detect_network(endpoints: dict[str, str]) -> dict[str, Any]:
    """Per network tier (its endpoint from its description): the route's interface, MTU, speed and link
    type, and the host's TCP congestion control; a Unix socket is marked as such."""
    congestion = _read("/proc/sys/net/ipv4/tcp_congestion_control")
    network: dict[str, Any] = {}
    for tier, endpoint in endpoints.items():
        target = endpoint_host(endpoint)
        if target is None:
            network[tier] = {"endpoint": endpoint, "link_type": "unix socket" if endpoint.startswith("unix:")
                             else None}
            continue
        network[tier] = {"endpoint": endpoint, **route_to(*target), "tcp_congestion_control": congestion}
    return network
