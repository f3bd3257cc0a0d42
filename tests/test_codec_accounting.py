"""The codec stage's accounting: an entry of several segments is one operation of the entry (every
segment's device commands are taken with it, none left pending), and over a shared tier a segment another
writer committed is stored without a transfer (docs/codecs.md, "Over a shared tier"; docs/metrics.md,
"Stores without a transfer")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_dedup_stores import SIZE, SharedMemoryTier, cache_over, metrics_of
from tiny_spec import history_spec, run_cli

from kvbench_core.builtins.memory import CPUMemoryBackend
from kvbench_core.codecs.general import ZstdCodec
from kvbench_core.codecs.tier import CodecTier, entry_key, segment_key
from kvbench_core.contracts.backend import BackendContext
from kvbench_core.engine.cache_types import Tier
from kvbench_core.engine.cancel import CommandRecorder
from kvbench_core.results.checks import _stored_entries, _written

pytest.importorskip("cramjam", reason="the codecs extra is not installed (pip install 'kvbench-core[codecs]')")

SEGMENT = 1024


def coded(inner: Any) -> CodecTier:
    return CodecTier(inner, ZstdCodec({"level": 1}), chunk_bytes=SEGMENT, segment_bytes=SEGMENT)


def test_segment_keys_map_back_to_their_entry() -> None:
    assert [entry_key(segment_key("u0_c1_turn_1", i)) for i in range(3)] == ["u0_c1_turn_1"] * 3
    assert entry_key("a.kvcx") == "a.kvcx" and entry_key("plain") == "plain"


def test_an_entry_whose_every_segment_was_committed_is_a_store_without_a_transfer() -> None:
    """R1 H1: it was booked as a full write (ops 1, bytes 3000, physical 0, series 3000)."""
    key = "kv_system_a_t3"
    shared = SharedMemoryTier(elsewhere={segment_key(key, i) for i in range(3)})
    cache, telemetry = cache_over([Tier("shared", coded(shared), 1 << 20)])
    cache.put(key, SIZE)
    write = telemetry.tiers["shared"]["write"]
    assert (write.ops, write.bytes, write.physical_bytes, write.commands) == (0, 0, 0, 0)
    assert (write.dedup_stores, write.dedup_bytes) == (1, SIZE)
    assert write.codec.count == 0 and write.total.count == 0  # no operation: no latency, no codec figure
    assert telemetry.close_interval(users=1)["tiers"]["shared"]["write_bytes"] == 0
    assert all(check.passed for check in [*_written(metrics_of(telemetry)), *_stored_entries(metrics_of(telemetry))])


def test_a_partly_committed_entry_is_an_operation_of_the_bytes_it_moved() -> None:
    """Segment 1 of three (1024 of 3000 logical bytes) was committed by another writer: the operation moved
    the other 1976 bytes, the 1024 are deduplicated bytes, and the entry is stored once."""
    key = "u0_c1_turn_1"
    shared = SharedMemoryTier(elsewhere={segment_key(key, 1)})
    cache, telemetry = cache_over([Tier("shared", coded(shared), 1 << 20)])
    cache.put(key, SIZE)
    write = telemetry.tiers["shared"]["write"]
    assert (write.ops, write.bytes, write.dedup_stores, write.dedup_bytes) == (1, SIZE - SEGMENT, 0, SEGMENT)
    assert write.codec_bytes == SIZE - SEGMENT and write.codec.count == 1
    assert 0 < write.physical_bytes < SIZE  # two of three encoded segments reached the device
    # A tier without a command recorder: the series books the operation's device bytes, as tier_bytes checks.
    assert telemetry.close_interval(users=1)["tiers"]["shared"]["write_bytes"] == write.physical_bytes
    checks = [*_written(metrics_of(telemetry)), *_stored_entries(metrics_of(telemetry))]
    assert len(checks) == 2 and all(check.passed for check in checks), [check.line() for check in checks]


def test_every_segment_command_is_taken_with_the_entrys_operation() -> None:
    """R1 M6: commands of segments after the first stayed in the recorder under ``key.kvcN``, never booked."""
    recorder = CommandRecorder("dram", telemetry=None)  # the cache's telemetry, once it exists
    inner = CPUMemoryBackend({}, BackendContext(tier_name="dram", run_id="test", io_log=recorder))
    cache, telemetry = cache_over([Tier("dram", coded(inner), 1 << 20)])
    recorder.telemetry = telemetry
    cache.put("u0_c1_turn_1", SIZE)
    assert recorder._pending == {}
    write = telemetry.tiers["dram"]["write"]
    assert write.ops == 1 and write.commands == write.command.count >= 3
    assert write.command_bytes == write.physical_bytes  # every segment's commands, the encoded bytes
    assert cache.get("u0_c1_turn_1") == "dram"
    assert recorder._pending == {}
    read = telemetry.tiers["dram"]["read"]
    assert read.command.count >= 3 and read.command_bytes == read.physical_bytes


def test_a_multi_segment_codec_run_passes_every_check(tmp_path: Path) -> None:
    """Entries of up to 1.2 MiB through 64 KiB segments on a directory tier (R1 M6: five checks failed)."""
    tier = {"name": "disk", "backend": "nvme", "capacity": "64MiB",
            "codec": {"name": "zstd", "options": {"level": 1}, "chunk": "16KiB", "segment": "64KiB"},
            "options": {"path": str(tmp_path / "cache"), "fsync": False}}
    code, _out, err = run_cli(tmp_path, history_spec([tier], output={"directory": str(tmp_path / "out"),
                                                                     "progress": "off"}))
    assert code == 0, err
    result = json.loads(next((tmp_path / "out").glob("*.json")).read_text())
    failed = [item for item in result["checks"]["items"] if not item["passed"]]
    assert result["checks"]["items"] and failed == []
    disk = result["metrics"]["tiers"]["disk"]
    assert disk["write"]["mean_entry_bytes"] > 64 << 10  # entries really span several segments
    assert disk["read"]["command_bytes"] >= disk["read"]["physical_bytes"] > 0


@pytest.mark.redis
def test_over_a_real_shared_redis_a_second_clients_codec_store_sends_nothing(tmp_path: Path) -> None:
    """Two clients of one shared namespace through the same codec: the second's store of an entry of three
    segments the first committed is a store without a transfer, and both caches' copy checks hold."""
    from redis_servers import require_redis, start_redis

    from kvbench_core.engine.factory import create_backend
    from kvbench_core.spec.codec_choices import codec_choice

    require_redis()
    server = start_redis(tmp_path / "redis")
    try:
        runs = []
        for run_id in ("a", "b"):
            tier = {"name": "redis", "backend": "redis", "codec": codec_choice({"name": "zstd", "chunk": SEGMENT,
                                                                                "segment": SEGMENT}),
                    "options": {"port": server.port, "part_size": SEGMENT, "shared_namespace": "codec"}}
            backend = create_backend(tier, BackendContext(tier_name="redis", run_id=run_id), path="tier")
            backend.open()
            runs.append((backend, *cache_over([Tier("redis", backend, 1 << 20)])))
        try:
            for _backend, cache, _telemetry in runs:
                cache.put("kv_system_a_t3", SIZE)
            (_, _, first), (_, _, second) = runs
            assert (first.tiers["redis"]["write"].ops, first.tiers["redis"]["write"].dedup_stores) == (1, 0)
            write = second.tiers["redis"]["write"]
            assert (write.ops, write.bytes, write.commands, write.dedup_stores, write.dedup_bytes) == (0, 0, 0, 1, SIZE)
            for telemetry in (first, second):
                checks = [*_written(metrics_of(telemetry)), *_stored_entries(metrics_of(telemetry))]
                assert all(check.passed for check in checks), [check.line() for check in checks]
        finally:
            for backend, _cache, _telemetry in runs:
                backend.close()
    finally:
        server.stop()


class ReadsThenFails(CPUMemoryBackend):
    """A lower tier whose write pulls the whole source from the tier above, then fails."""

    def write(self, key: str, source: Any) -> Any:
        source.fill(0, memoryview(bytearray(source.size)))
        raise OSError(28, "No space left on device")


def test_a_failed_demotion_leaves_no_read_command_pending_above() -> None:
    """The upper tier's read commands of a copy that failed are booked nowhere, and not kept either."""
    from kvbench_core.contracts.errors import StorageError

    recorder = CommandRecorder("dram", telemetry=None)
    dram = CPUMemoryBackend({}, BackendContext(tier_name="dram", run_id="test", io_log=recorder))
    lower = ReadsThenFails({}, BackendContext(tier_name="disk", run_id="test"))
    cache, telemetry = cache_over([Tier("dram", dram, SIZE * 3 // 2), Tier("disk", lower, 1 << 20)])
    recorder.telemetry = telemetry
    cache.put("u0_c1_turn_1", SIZE)
    with pytest.raises(StorageError, match="No space left"):
        cache.put("u1_c1_turn_1", SIZE)  # the demotion of the first read it from dram, then failed
    assert recorder._pending == {}
    assert telemetry.tiers["dram"]["read"].ops == 0  # a failed copy books no read either
