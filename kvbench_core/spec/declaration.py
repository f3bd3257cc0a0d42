"""The infrastructure declaration a result must carry (shared/seeds/infrastructure-variables.txt).

Every checklist item has a place here.  The user declares what only they can
know (fabric, engine, codec); kvbench fills what it can detect or derive
(tier capacities and access mechanisms from the backends, workload statistics
from the run, kernel/CPU/RAM/filesystem from the machine) and marks each value
with its origin, so a reader can tell a measurement from a claim.
"""

from __future__ import annotations

from typing import Any

_SCALAR = {"type": ["string", "number", "boolean", "null"]}
_TEXT = {"type": ["string", "null"]}
_BOOL = {"type": ["boolean", "null"]}
_NUMBER = {"type": ["number", "null"]}

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
        "arrival_process": (_TEXT, "closed loop with think time, Poisson, trace replay"),
        "warmup": (_TEXT, "warm-up procedure"),
    },
    "distributed": {
        "erasure_coding": (_TEXT, "erasure coding scheme"),
        "shard_placement": (_TEXT, "shard placement policy"),
        "gpu_to_shard_placement": (_TEXT, "GPU-to-shard placement strategy"),
        "interface": (_TEXT, "POSIX, S3-compatible or custom"),
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
    a detected value that disagrees is kept beside it as ``detected`` so the
    discrepancy is visible.
    """
    merged: dict[str, Any] = {}
    for section, fields in CHECKLIST.items():
        out: dict[str, Any] = {}
        user = declared.get(section) or {}
        found = detected.get(section) or {}
        for name in fields:
            if user.get(name) is not None:
                entry: dict[str, Any] = {"value": user[name], "source": "declared"}
                if found.get(name) is not None and found[name] != user[name]:
                    entry["detected"] = found[name]
                out[name] = entry
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
