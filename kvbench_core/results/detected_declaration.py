"""The declaration fields a run can tell about itself beyond its tiers and workload: the network to each
endpoint, the storage interfaces, and which fields cannot apply to it (``spec.declaration.NotApplicable``).

Everything comes from the detected environment (``results/environment``: the route to each network
tier's endpoint, each file tier's block device) and from what the run used (its tiers' backends, its
workload source, its codecs).  A field is detected only when the machine or the run shows it; a field
that cannot apply says why (a Redis-only run has no mount options; a run without a codec has no codec
version); everything else stays missing, for the user to declare (the fabric of a remote cluster,
checkpoints sharing the storage).
"""

from __future__ import annotations

from typing import Any

from kvbench_core.runspec.declaration import NotApplicable

#: Backend -> the storage interface it drives (``distributed.interface``).
INTERFACES = {"cpu": "memory (process DRAM)", "gpu": "memory (GPU)", "template-memory": "memory (process)",
              "nvme": "POSIX files", "gds": "POSIX files via cuFile (GPUDirect Storage)",
              "s3": "S3-compatible object store", "redis": "custom (Redis protocol)", "nixl": "NIXL (custom)"}
#: Backends whose store is one process's memory or one machine's files: nothing distributed to place.
LOCAL_BACKENDS = frozenset({"cpu", "gpu", "template-memory", "nvme", "gds"})
NO_NETWORK = "no tier is reached over a network"


def _fabric(route: dict[str, Any]) -> str:
    kind = route.get("link_type")
    if kind == "unix socket":
        return "none (Unix socket on this host)"
    if kind == "loopback":
        return f"loopback ({route.get('interface')}, MTU {route.get('mtu')}): client and server on one host"
    if kind == "infiniband":
        return f"IPoIB ({route.get('interface')}, MTU {route.get('mtu')})"
    if kind == "ethernet":
        return f"TCP/Ethernet ({route.get('interface')}, MTU {route.get('mtu')})"
    return f"TCP ({route.get('interface') or 'interface not found'})"


def _nvme_of(paths: dict[str, Any]) -> Any:
    """NVMe-oF transport of the file tiers' devices: an NVMe controller's ``transport`` (pcie is local),
    else the device's driver (a virtio or SCSI disk is not NVMe-oF)."""
    if not paths:
        return NotApplicable("no tier keeps its entries on a block device")
    seen = set()
    for info in paths.values():
        device = info.get("block_device") or {}
        transport = device.get("transport")
        if transport:
            seen.add("none (local NVMe over PCIe)" if transport == "pcie" else f"NVMe/{transport.upper()}")
        elif device:
            seen.add(f"none ({device.get('driver') or device.get('name')} block device)")
    return ", ".join(sorted(seen)) or None


def network_fields(environment: dict[str, Any]) -> dict[str, Any]:
    """The ``network`` section: the fabric and link of the route to each network tier's endpoint (as
    ``tier: value`` when tiers differ), TCP congestion control, NVMe-oF from the block devices."""
    routes = environment.get("network") or {}
    nvme_of = _nvme_of(environment.get("paths") or {})
    if not routes:
        none = NotApplicable(NO_NETWORK)
        return {"fabric": "none (local: " + NO_NETWORK + ")", "link_speed_gbps": none, "gpudirect_rdma": none,
                "congestion_control": none, "nvme_of": nvme_of}
    tcp = {tier: route for tier, route in routes.items() if route.get("link_type") not in (None, "unix socket")}
    return {"fabric": _one_or_each({tier: _fabric(route) for tier, route in routes.items()}),
            "link_speed_gbps": _link_speed(tcp),
            "gpudirect_rdma": False if tcp and len(tcp) == len(routes) and "nixl" not in routes else None,
            "congestion_control": _congestion_control(tcp),
            "nvme_of": nvme_of}


def _link_speed(tcp: dict[str, dict[str, Any]]) -> Any:
    """The TCP routes' link speed in Gb/s when they all share one known speed; a loopback has no physical
    link to have a speed, and routes of different or unknown speeds leave the field for the user."""
    if not tcp:
        return NotApplicable("no tier is reached over TCP")
    if all(route.get("link_type") == "loopback" for route in tcp.values()):
        return NotApplicable("loopback: no physical link")
    speeds = {route.get("speed_mbps") for route in tcp.values()}
    return speeds.pop() / 1000 if len(speeds) == 1 and None not in speeds else None


def _congestion_control(tcp: dict[str, dict[str, Any]]) -> Any:
    """The TCP routes' congestion control algorithm (``tier: value`` when they differ)."""
    if not tcp:
        return NotApplicable("no tier is reached over TCP")
    return _one_or_each({tier: f"TCP {route.get('tcp_congestion_control')}" for tier, route in tcp.items()})


def _one_or_each(values: dict[str, Any]) -> Any:
    distinct = set(values.values())
    return distinct.pop() if len(distinct) == 1 else ", ".join(f"{tier}: {v}" for tier, v in values.items())


def run_fields(backends: dict[str, str], source: str, tensor: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``distributed``, ``engine`` and the ``tensor`` fields without a codec, from what the run used:
    ``backends`` is tier -> backend name, ``source`` the workload source, ``tensor`` the detected tensor
    section (``codecs.figures.tensor_declaration``)."""
    local = all(backend in LOCAL_BACKENDS for backend in backends.values())
    placed = NotApplicable("no tier is a distributed store: memory and local files only")
    no_engine = NotApplicable(f"no inference engine: kvbench's {source} source drives the storage")
    tensor_fields: dict[str, Any] = {}
    if tensor.get("codec") == "none":
        no_codec = NotApplicable("no codec: KV bytes are stored as they are")
        tensor_fields = {"codec_version": no_codec, "integration_point": no_codec, "overlapped": no_codec,
                         "compression_ratio": 1.0}  # logical bytes = device bytes, exactly
    if tensor.get("lossless") is True:
        tensor_fields["quality_impact"] = NotApplicable("lossless: the KV bytes read are the bytes written")
    return {
        "distributed": {"interface": _one_or_each({tier: INTERFACES.get(backend, f"custom ({backend})")
                                                   for tier, backend in backends.items()}),
                        **({"erasure_coding": placed, "shard_placement": placed, "gpu_to_shard_placement": placed}
                           if local else {})},
        "engine": dict.fromkeys(("name", "version", "kv_connector", "kv_connector_version",
                                 "disaggregated_prefill_decode", "transfer_protocol"), no_engine),
        "tensor": tensor_fields,
    }


def about_the_run(environment: dict[str, Any], backends: dict[str, str], source: str,
                  tensor: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every field this module detects or rules out, by section (``network``, ``distributed``,
    ``engine``, ``tensor``)."""
    return {"network": network_fields(environment), **run_fields(backends, source, tensor)}
