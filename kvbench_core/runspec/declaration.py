"""The infrastructure declaration a result must carry (shared/seeds/infrastructure-variables.txt).

Every checklist item has a place here.  The user declares what only they can
know (fabric, engine, codec); kvbench fills what it can detect or derive
(tier capacities and access mechanisms from the backends, workload statistics
from the run, kernel/CPU/RAM/filesystem from the machine) and marks each value
with its origin, so a reader can tell a measurement from a claim.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: A field's source when the run shows it cannot apply (no file tier: no mount options; no codec: no
#: codec version): neither a measurement nor a gap to declare.
NOT_APPLICABLE = "not applicable"


@dataclass(frozen=True)
class NotApplicable:
    """A detected "this field does not apply to this run", with the reason the result states."""

    reason: str


_SCALAR = {"type": ["string", "number", "boolean", "null"]}
_TEXT = {"type": ["string", "null"]}
_BOOL = {"type": ["boolean", "null"]}
_NUMBER = {"type": ["number", "null"]}
_PER_TIER = {"type": ["object", "string", "null"]}
#: PCIe link speed (GT/s) -> generation
_PCIE_GENERATION = {"2.5": 1, "5.0": 2, "8.0": 3, "16.0": 4, "32.0": 5, "64.0": 6}

#: section -> field -> (schema, description).  Field names double as the checklist.
CHECKLIST: dict[str, dict[str, tuple[dict[str, Any], str]]] = {
    "tiers": {
        "topology": (_TEXT, "tier chain, e.g. HBM -> DRAM -> local NVMe -> S3"),
        "capacities": ({"type": ["object", "null"]}, "absolute capacity per tier"),
        "eviction_policy": (_TEXT, "e.g. waterfall LRU"),
        "admission_policy": (_TEXT, "admission gate, e.g. admit-all, large entries skip a tier"),
        "promotion_policy": (_TEXT, "none (one-way waterfall) or on-read"),
        "working_set_vs_tier": ({"type": ["object", "string", "null"]}, "working set relative to each tier"),
        "cache_state": ({"enum": ["cold", "warm", "steady", None]}, "cold, warm or steady-state cache"),
    },
    "access": {
        "per_tier": ({"type": ["object", "null"]}, "access mechanism and driver layer per tier"),
        "queue_depth": (_SCALAR, "I/O queue depth / concurrency per tier"),
        "scheduler_integration": (_TEXT, "synchronous or asynchronous; preloading while queued"),
        "preloading": (_BOOL, "whether reads start while requests are queued"),
        "request_concurrency": (_SCALAR, "requests in flight the workload allows (I/O concurrency above the queue)"),
    },
    "network": {
        "fabric": (_TEXT, "InfiniBand generation, RoCE, TCP/Ethernet, or none (local)"),
        "link_speed_gbps": (_NUMBER, "link speed"),
        "gpudirect_rdma": (_BOOL, "GPUDirect RDMA enabled"),
        "congestion_control": (_TEXT, "congestion control parameters"),
        "nvme_of": (_TEXT, "NVMe-oF transport, or none"),
    },
    "tensor": {
        "kv_dtype": (_TEXT, "KV data type, e.g. bf16, fp8"),
        "codec": (_TEXT, "compression codec name, or none"),
        "codec_version": (_TEXT, "codec version"),
        "lossless": (_BOOL, "lossless (true) or lossy (false)"),
        "compression_ratio": (_NUMBER, "achieved compression ratio"),
        "integration_point": (_TEXT, "CPU or GPU encode/decode"),
        "overlapped": (_BOOL, "decompression overlapped with compute (true) or blocking (false)"),
        "quality_impact": (_TEXT, "a lossy codec's effect on model quality (metric and change, e.g. "
                                  "'MMLU -0.3 pt'); required with lossless: false"),
    },
    "engine": {
        "name": (_TEXT, "inference engine, e.g. vLLM"),
        "version": (_TEXT, "engine version"),
        "kv_connector": (_TEXT, "KV connector, e.g. LMCache"),
        "kv_connector_version": (_TEXT, "connector version"),
        "disaggregated_prefill_decode": (_BOOL, "prefill and decode on separate workers"),
        "transfer_protocol": (_TEXT, "KV transfer protocol between prefill and decode"),
    },
    "workload": {
        "input_length_mean": (_NUMBER, "mean input tokens"),
        "input_length_p99": (_NUMBER, "tail input tokens"),
        "prefix_reuse_rate": (_NUMBER, "share of requests hitting a cached prefix"),
        "prefix_length_distribution": ({"type": ["object", "string", "null"]}, "prefix lengths"),
        "concurrency": (_SCALAR, "users / in-flight requests"),
        "arrival_process": (_TEXT, "closed loop with think time, Poisson, workload trace replay"),
        "warmup": (_TEXT, "warm-up procedure"),
    },
    "distributed": {
        "erasure_coding": (_TEXT, "erasure coding scheme"),
        "shard_placement": (_TEXT, "shard placement policy"),
        "gpu_to_shard_placement": (_TEXT, "GPU-to-shard placement strategy"),
        "interface": (_TEXT, "POSIX, S3-compatible or custom"),
    },
    "storage": {
        "mount_options": (_PER_TIER, "mount options of each file tier's filesystem"),
        "read_ahead_kb": (_PER_TIER, "block device read-ahead per file tier"),
        "logical_block_size": (_PER_TIER, "block device logical block (LBA) size per file tier"),
        "physical_block_size": (_PER_TIER, "block device physical block size per file tier"),
        "volatile_write_cache": (_PER_TIER, "device write cache per file tier: write back (volatile) or through"),
    },
    "host": {
        "transparent_hugepages": (_TEXT, "transparent huge pages mode (always, madvise, never)"),
        "dirty_ratios": ({"type": ["object", "string", "null"]}, "page-cache writeback thresholds (vm.dirty_*)"),
        "numa_nodes": (_NUMBER, "NUMA nodes"),
        "kernel_cmdline": (_TEXT, "kernel command line"),
        "gpu_pcie_link": ({"type": ["array", "string", "null"]}, "each GPU's PCIe link: generation and width"),
    },
    "mixed_use": {
        "checkpoint_size": (_TEXT, "checkpoint size sharing the storage"),
        "write_bandwidth_floor": (_TEXT, "write bandwidth needed without degrading inference"),
        "recovery_time_objective": (_TEXT, "RTO"),
        "shared_storage_and_fabric": (_BOOL, "checkpoint and inference I/O share storage and fabric"),
    },
}


def declaration_schema() -> dict[str, Any]:
    """Schema of the spec's ``declaration`` block: every checklist field, nothing unknown."""
    sections = {}
    for section, fields in CHECKLIST.items():
        properties = {name: {**schema, "description": text} for name, (schema, text) in fields.items()}
        sections[section] = {"type": "object", "additionalProperties": False, "properties": properties}
    sections["notes"] = {"type": "string"}
    return {"type": "object", "additionalProperties": False, "properties": sections}


def merge_declaration(declared: dict[str, Any], detected: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Combine user values and detected values; each field becomes ``{value, source}``.

    A declared value wins (the user knows their fabric better than we do), but
    a detected value that disagrees is kept beside it as ``detected``, and
    ``contradictions`` turns each such disagreement into a warning for the
    result and its summary: never silently kept.  A field detected as
    ``NotApplicable`` and not declared is ``{value: None, source: "not applicable",
    reason}``; declared, it is the declaration's (nothing to contradict).
    """
    merged: dict[str, Any] = {}
    for section, fields in CHECKLIST.items():
        out: dict[str, Any] = {}
        user = declared.get(section) or {}
        found = detected.get(section) or {}
        for name in fields:
            applies = not isinstance(found.get(name), NotApplicable)
            if user.get(name) is not None:
                entry: dict[str, Any] = {"value": user[name], "source": "declared"}
                if applies and found.get(name) is not None and found[name] != user[name]:
                    entry["detected"] = found[name]
                out[name] = entry
            elif not applies:
                out[name] = {"value": None, "source": NOT_APPLICABLE, "reason": found[name].reason}
            elif found.get(name) is not None:
                out[name] = {"value": found[name], "source": "detected"}
            else:
                out[name] = {"value": None, "source": "missing"}
        merged[section] = out
    if declared.get("notes"):
        merged["notes"] = declared["notes"]
    return merged


def missing_fields(merged: dict[str, Any]) -> list[str]:
    """Dotted names of checklist fields neither declared nor detected."""
    return [
        f"{section}.{name}"
        for section, fields in merged.items()
        if isinstance(fields, dict)
        for name, entry in fields.items()
        if isinstance(entry, dict) and entry.get("source") == "missing"
    ]


def _gpu_link(link: dict[str, Any]) -> dict[str, Any]:
    speed = (link.get("current_link_speed") or "").split(" ")[0]
    width = link.get("current_link_width")
    return {"pci_address": link["pci_address"], "generation": _PCIE_GENERATION.get(speed),
            "width": int(width) if width and width.isdigit() else None,
            "link": f"{link.get('current_link_speed')} x{width}",
            "max_link": f"{link.get('max_link_speed')} x{link.get('max_link_width')}"}


def detected_system(environment: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The ``storage`` and ``host`` checklist sections from the detected environment (results/environment.py):
    per file tier its mount options and block device settings; the host's THP, dirty ratios, NUMA nodes,
    kernel command line and GPU PCIe links (None where there is no GPU)."""
    paths = environment.get("paths") or {}

    def per_tier(get: Any) -> dict[str, Any] | None:
        values = {tier: get(info) for tier, info in paths.items()}
        values = {tier: value for tier, value in values.items() if value is not None}
        return values or None

    def device(key: str) -> Any:
        """A block device setting per tier; sysfs numbers as numbers, so a declared 128 matches a detected 128."""
        def get(info: dict[str, Any]) -> Any:
            value = (info.get("block_device") or {}).get(key)
            return int(value) if isinstance(value, str) and value.isdigit() else value
        return per_tier(get)

    host = environment.get("host") or {}
    ratios = {key: host.get(key) for key in ("dirty_ratio", "dirty_background_ratio", "dirty_bytes",
                                             "dirty_background_bytes") if host.get(key) is not None}
    storage = {"mount_options": per_tier(lambda info: info.get("mount_options")),
               "read_ahead_kb": device("read_ahead_kb"), "logical_block_size": device("logical_block_size"),
               "physical_block_size": device("physical_block_size"),
               "volatile_write_cache": device("volatile_write_cache")}
    if not paths:  # memory and network tiers only: nothing here has a filesystem or a block device
        storage = dict.fromkeys(storage, NotApplicable("no tier keeps its entries in files"))
    gpus = [_gpu_link(link) for link in host.get("gpu_pcie_links") or []]
    no_gpu = NotApplicable("no NVIDIA GPU on the PCI bus") if "gpu_pcie_links" in host else None
    return {
        "storage": storage,
        "host": {"transparent_hugepages": host.get("transparent_hugepages"), "dirty_ratios": ratios or None,
                 "numa_nodes": host.get("numa_nodes"), "kernel_cmdline": host.get("kernel_cmdline"),
                 "gpu_pcie_link": gpus or no_gpu},
    }


def contradictions(merged: dict[str, Any]) -> list[str]:
    """One warning per declared value that a detected value contradicts (``merge_declaration`` keeps both)."""
    return [f"declaration {section}.{name}: declared {entry['value']!r}, detected {entry['detected']!r}"
            for section, fields in merged.items() if isinstance(fields, dict)
            for name, entry in fields.items() if isinstance(entry, dict) and "detected" in entry]
