"""The infrastructure declaration: every checklist item of infrastructure-variables.txt has a field, the
storage and host settings a storage engineer asks for first are detected, and a declared value that a
detected one contradicts is a warning in the result and its summary."""

from __future__ import annotations

import json
from pathlib import Path

from tiny_spec import history_spec, run_cli

from kvbench_core.results.environment import detect_host, mount_of
from kvbench_core.runspec.declaration import CHECKLIST, contradictions, detected_system, merge_declaration

#: The seed's checklist (its last section), item by item, and the field that holds each.
SEED_CHECKLIST = {
    "topology and absolute capacity at each level": ("tiers.topology", "tiers.capacities"),
    "eviction policy, admission gate": ("tiers.eviction_policy", "tiers.admission_policy"),
    "working set relative to each tier": ("tiers.working_set_vs_tier",),
    "cold-cache, warm-cache, or steady-state": ("tiers.cache_state",),
    "access mechanism and driver layer": ("access.per_tier",),
    "queue depth and I/O concurrency": ("access.queue_depth", "access.request_concurrency"),
    "synchronous or asynchronous, preloading": ("access.scheduler_integration", "access.preloading"),
    "InfiniBand generation, RoCE, or TCP-Ethernet; link speed": ("network.fabric", "network.link_speed_gbps"),
    "GPUDirect RDMA status, congestion control, NVMe-oF": ("network.gpudirect_rdma", "network.congestion_control",
                                                           "network.nvme_of"),
    "KV data type and compression status": ("tensor.kv_dtype", "tensor.codec"),
    "codec name and version": ("tensor.codec", "tensor.codec_version"),
    "lossy: compression ratio and quality impact": ("tensor.lossless", "tensor.compression_ratio",
                                                    "tensor.quality_impact"),
    "integration point, decompression synchronous or overlapped": ("tensor.integration_point", "tensor.overlapped"),
    "engine version, KV connector name and version": ("engine.name", "engine.version", "engine.kv_connector",
                                                      "engine.kv_connector_version"),
    "disaggregated prefill/decode and KV transfer protocol": ("engine.disaggregated_prefill_decode",
                                                              "engine.transfer_protocol"),
    "input-length mean and tail": ("workload.input_length_mean", "workload.input_length_p99"),
    "prefix reuse rate, prefix-length distribution": ("workload.prefix_reuse_rate",
                                                      "workload.prefix_length_distribution"),
    "concurrent requests, fixed concurrency or arrival process": ("workload.concurrency",
                                                                  "workload.arrival_process"),
    "cache warm-up before measurement": ("workload.warmup",),
    "erasure coding, shard placement, GPU-to-shard placement, interface": (
        "distributed.erasure_coding", "distributed.shard_placement", "distributed.gpu_to_shard_placement",
        "distributed.interface"),
    "checkpoint size, write-bandwidth floor, RTO, shared storage and fabric": (
        "mixed_use.checkpoint_size", "mixed_use.write_bandwidth_floor", "mixed_use.recovery_time_objective",
        "mixed_use.shared_storage_and_fabric"),
}


def test_every_item_of_the_seeds_checklist_has_a_field() -> None:
    fields = {f"{section}.{name}" for section, names in CHECKLIST.items() for name in names}
    missing = {item: [f for f in wanted if f not in fields] for item, wanted in SEED_CHECKLIST.items()}
    assert {item: gone for item, gone in missing.items() if gone} == {}


def test_the_host_settings_are_detected_from_proc_and_sys() -> None:
    host = detect_host()
    assert host["transparent_hugepages"] in ("always", "madvise", "never")
    assert isinstance(host["dirty_ratio"], int) and isinstance(host["numa_nodes"], int) and host["numa_nodes"] >= 1
    assert host["kernel_cmdline"] == Path("/proc/cmdline").read_text().strip()


def test_a_file_tiers_mount_options_and_device_settings_reach_the_declaration(tmp_path: Path) -> None:
    mount = mount_of(str(tmp_path))
    assert mount is not None and mount["mount_options"].split(",")[0] in ("rw", "ro")
    environment = {"paths": {"nvme": {"path": str(tmp_path), **mount}},
                   "host": {"gpu_pcie_links": [{"pci_address": "0000:17:00.0", "current_link_speed": "32.0 GT/s PCIe",
                                                "current_link_width": "16", "max_link_speed": "32.0 GT/s PCIe",
                                                "max_link_width": "16"}]}}
    detected = detected_system(environment)
    assert detected["storage"]["mount_options"] == {"nvme": mount["mount_options"]}
    device = mount.get("block_device") or {}
    if device.get("read_ahead_kb") is not None:  # a device-backed mount (not tmpfs or overlay)
        assert detected["storage"]["read_ahead_kb"] == {"nvme": int(device["read_ahead_kb"])}
        same = merge_declaration({"storage": {"read_ahead_kb": {"nvme": int(device["read_ahead_kb"])}}}, detected)
        assert contradictions(same) == []  # a declared number equal to sysfs's text is no contradiction
        assert detected["storage"]["volatile_write_cache"]["nvme"] in ("write back", "write through")
    link = detected["host"]["gpu_pcie_link"][0]
    assert (link["generation"], link["width"]) == (5, 16)
    assert detected_system({"host": {}})["host"]["gpu_pcie_link"] is None  # no GPU: no link, not a guess


def test_a_contradicted_declaration_is_a_warning_never_silently_kept() -> None:
    merged = merge_declaration({"host": {"numa_nodes": 4}, "network": {"fabric": "RoCE"}},
                               {"host": {"numa_nodes": 1}, "network": {}})
    assert merged["host"]["numa_nodes"] == {"value": 4, "source": "declared", "detected": 1}
    assert contradictions(merged) == ["declaration host.numa_nodes: declared 4, detected 1"]


def test_a_run_puts_the_contradiction_in_its_result_and_its_summary(tmp_path: Path) -> None:
    # a tier every entry fits: a run whose KV found no room is degraded (exit 6), which is not what this tests
    spec = history_spec([{"name": "more", "backend": "cpu", "capacity": "64MiB"}],
                        output={"directory": str(tmp_path / "out"), "progress": "off"},
                        declaration={"host": {"numa_nodes": 64}, "tensor": {"quality_impact": "none (lossless)"}})
    code, out, _ = run_cli(tmp_path, spec)
    assert code == 0
    result = json.loads(next((tmp_path / "out").glob("*.json")).read_text())
    detected = result["declaration"]["host"]["numa_nodes"]["detected"]
    assert result["warnings"] == [f"declaration host.numa_nodes: declared 64, detected {detected}"]
    assert f"  WARNING: declaration host.numa_nodes: declared 64, detected {detected}" in out.splitlines()
    assert result["declaration"]["tensor"]["quality_impact"] == {"value": "none (lossless)", "source": "declared"}


def _sources(result: dict) -> dict[str, dict]:
    return {f"{section}.{name}": entry for section, fields in result["declaration"].items()
            if isinstance(fields, dict) for name, entry in fields.items()}


def test_a_dram_and_directory_run_fills_at_least_45_of_the_56_fields(tmp_path: Path) -> None:
    """Issue #31 §4: detected where the machine or the run shows it, 'not applicable' with the reason where
    the field cannot apply; only what the user alone knows stays missing."""
    spec = history_spec([{"name": "nvme", "backend": "nvme", "capacity": "64MiB",
                          "options": {"path": str(tmp_path / "cache"), "fsync": False}}],
                        output={"directory": str(tmp_path / "out"), "progress": "off"})
    assert run_cli(tmp_path, spec)[0] == 0
    result = json.loads(next((tmp_path / "out").glob("*.json")).read_text())
    fields = _sources(result)
    assert len(fields) == 56
    filled = [name for name, entry in fields.items() if entry["source"] != "missing"]
    assert len(filled) >= 45, sorted(set(fields) - set(filled))
    for entry in fields.values():
        assert (entry["source"] == "not applicable") == bool(entry.get("reason"))
        assert entry["source"] != "not applicable" or entry["value"] is None
    assert fields["network.fabric"]["value"].startswith("none (local")
    assert fields["network.link_speed_gbps"]["source"] == "not applicable"
    assert fields["storage.read_ahead_kb"]["source"] == "detected"  # a file tier: its device is read
    assert fields["distributed.interface"]["value"] == "dram: memory (process DRAM), nvme: POSIX files"
    assert fields["tensor.compression_ratio"]["value"] == 1.0  # no codec: logical = device bytes
    assert fields["engine.name"]["reason"].startswith("no inference engine")
    assert {name for name, entry in fields.items() if entry["source"] == "missing"} <= {
        f"mixed_use.{name}" for name in CHECKLIST["mixed_use"]} | {"host.gpu_pcie_link"}


def test_a_redis_only_run_says_storage_is_not_applicable_and_detects_the_route(tmp_path: Path) -> None:
    from redis_servers import require_redis, start_redis

    require_redis()
    server = start_redis(tmp_path / "redis")
    try:
        spec = history_spec([{"name": "redis", "backend": "redis", "capacity": "64MiB",
                              "options": {"host": "127.0.0.1", "port": server.port}}],
                            output={"directory": str(tmp_path / "out"), "progress": "off"})
        assert run_cli(tmp_path, spec)[0] == 0
    finally:
        server.stop()
    result = json.loads(next((tmp_path / "out").glob("*.json")).read_text())
    fields = _sources(result)
    for name in CHECKLIST["storage"]:
        assert fields[f"storage.{name}"] == {"value": None, "source": "not applicable",
                                             "reason": "no tier keeps its entries in files"}
    route = result["environment"]["network"]["redis"]
    mtu = int(Path("/sys/class/net/lo/mtu").read_text())
    assert (route["interface"], route["link_type"], route["mtu"]) == ("lo", "loopback", mtu)
    assert fields["network.fabric"]["value"] == f"loopback (lo, MTU {mtu}): client and server on one host"
    assert fields["network.gpudirect_rdma"] == {"value": False, "source": "detected"}
    congestion = Path("/proc/sys/net/ipv4/tcp_congestion_control").read_text().strip()
    assert fields["network.congestion_control"]["value"] == f"TCP {congestion}"
    assert fields["distributed.interface"]["value"] == "dram: memory (process DRAM), redis: custom (Redis protocol)"
    assert fields["distributed.shard_placement"]["source"] == "missing"  # a server: only the user knows its layout


def test_a_declared_fabric_the_route_contradicts_is_a_warning(tmp_path: Path) -> None:
    spec = history_spec([{"name": "more", "backend": "cpu", "capacity": "64MiB"}],
                        output={"directory": str(tmp_path / "out"), "progress": "off"},
                        declaration={"network": {"fabric": "InfiniBand NDR"}, "engine": {"name": "vLLM"}})
    assert run_cli(tmp_path, spec)[0] == 0
    result = json.loads(next((tmp_path / "out").glob("*.json")).read_text())
    assert "declaration network.fabric: declared 'InfiniBand NDR', detected 'none (local: no tier is reached " \
           "over a network)'" in result["warnings"]
    assert result["declaration"]["engine"]["name"] == {"value": "vLLM", "source": "declared"}  # n/a yields


def test_the_block_device_placement_comes_from_sysfs(tmp_path: Path) -> None:
    device = (mount_of(str(tmp_path)) or {}).get("block_device")
    if device is None:
        import pytest

        pytest.skip("no block device under the temporary directory (tmpfs or a container without /sys)")
    sysfs = Path("/sys/block") / device["disk"]
    assert device["max_sectors_kb"] == (sysfs / "queue/max_sectors_kb").read_text().strip()
    assert device["scheduler"] == (sysfs / "queue/scheduler").read_text().strip()
    numa = [p for p in [(sysfs / "device").resolve(), *(sysfs / "device").resolve().parents]
            if (p / "numa_node").exists() and (p / "numa_node").read_text().strip() != "-1"]
    assert device.get("numa_node") == (int((numa[0] / "numa_node").read_text()) if numa else None)
