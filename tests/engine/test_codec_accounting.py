"""The codec stage's accounting: an entry of several segments is one operation of the entry (every
segment's device commands are taken with it, none left pending), and over a shared tier a segment another
writer committed is stored without a transfer (docs/codecs.md, "Over a shared tier"; docs/metrics.md,
"Stores without a transfer")."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from test_dedup_stores import SIZE, SharedMemoryTier, cache_over, metrics_of
from tiny_spec import history_spec, run_cli

from kvbench_core.builtins.memory import CPUMemoryBackend
from kvbench_core.codecs.general import ZstdCodec
from kvbench_core.codecs.tier import CodecTier, entry_key, segment_key
from kvbench_core.contracts.backend import BackendContext
from kvbench_core.engine.cache.cache_types import Tier
from kvbench_core.engine.cache.waterfall import MultiTierCache
from kvbench_core.engine.measure.cancel import CommandRecorder
from kvbench_core.engine.measure.telemetry import Telemetry
from kvbench_core.results.invariants import _stored_entries, _written

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
    assert telemetry.close_interval(users=1)["tiers"].get("shared", {}).get("write_bytes", 0) == 0
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


@pytest.mark.parametrize("promotion", ["none", "on_read"])
def test_a_multi_segment_codec_run_passes_every_check(tmp_path: Path, promotion: str) -> None:
    """Entries of up to 1.2 MiB through 64 KiB segments on a directory tier (R1 M6: five checks failed), with a
    plain tier below it: demotions out of the codec tier (and, on_read, promotions) pull the entry through
    ``read_range``, which reads the chunks and not the headers (R3 H1: tier_bytes and command_bytes failed)."""
    tier = {"name": "disk", "backend": "nvme", "capacity": "3MiB",
            "codec": {"name": "zstd", "options": {"level": 1}, "chunk": "16KiB", "segment": "64KiB"},
            "options": {"path": str(tmp_path / "cache"), "fsync": False}}
    below = {"name": "disk2", "backend": "nvme", "capacity": "64MiB",
             "options": {"path": str(tmp_path / "cache2"), "fsync": False}}
    spec = history_spec([tier, below], output={"directory": str(tmp_path / "out"), "progress": "off"})
    spec["cache"]["promotion"] = promotion
    code, _out, err = run_cli(tmp_path, spec)
    assert code == 0, err
    result = json.loads(next((tmp_path / "out").glob("*.json")).read_text())
    failed = [item for item in result["checks"]["items"] if not item["passed"]]
    assert result["checks"]["items"] and failed == []
    disk = result["metrics"]["tiers"]["disk"]
    assert disk["write"]["mean_entry_bytes"] > 64 << 10  # entries really span several segments
    assert disk["read"]["command_bytes"] == disk["read"]["physical_bytes"] > 0
    cache = result["metrics"]["cache"]
    assert cache["demotions_count"].get("disk->disk2", 0) > 0  # copies out of the codec tier really ran
    if promotion == "on_read":
        assert cache["promotions"] > 0


def test_a_copy_out_of_a_codec_tier_books_the_bytes_it_read() -> None:
    """R3 H1: a demotion to a tier without the codec pulls through ``read_range``, which reads only the chunks;
    its read was booked with the stored bytes (headers and chunk tables too), more than its commands moved."""
    recorder = CommandRecorder("upper", telemetry=None)
    upper = coded(CPUMemoryBackend({}, BackendContext(tier_name="upper", run_id="t", io_log=recorder)))
    lower = CPUMemoryBackend({}, BackendContext(tier_name="lower", run_id="t"))
    cache, telemetry = cache_over([Tier("upper", upper, SIZE * 3 // 2), Tier("lower", lower, 1 << 20)])
    recorder.telemetry = telemetry
    cache.put("u0_c1_turn_1", SIZE)
    stored = upper.stored_bytes("u0_c1_turn_1")
    chunks = sum(int(s.starts[-1] - s.starts[0]) for s in upper.layout("u0_c1_turn_1") or [])
    cache.put("u1_c1_turn_1", SIZE)  # demotes the first through upper.read_range
    read = telemetry.tiers["upper"]["read"]
    series = telemetry.close_interval(users=1)["tiers"]["upper"]["read_bytes"]
    assert read.ops == 1 and stored is not None and chunks < stored
    assert read.physical_bytes == read.command_bytes == series == chunks


class SlowDecode(ZstdCodec):
    def decode(self, src: Any, out: Any) -> int:
        time.sleep(0.005)  # decode is host work, however long it takes
        return super().decode(src, out)


class Zeros:
    """A compressible payload: every chunk is a zstd frame, so the copy really decodes."""

    def __init__(self, key: str, size: int) -> None:
        self.size = size

    def fill(self, offset: int, out: memoryview) -> None:
        out[:] = bytes(len(out))


class Persistent(CPUMemoryBackend):
    volatile = False  # stands for a disk: its range reads are device time


def test_decoding_in_a_copy_out_of_a_codec_tier_is_host_time() -> None:
    """R3 M1: ``TierSource.fill`` timed the decode with the range reads and a persistent tier booked it all
    as device time (device 0.03 s, host 0, no codec layer)."""
    upper = CodecTier(Persistent({}, BackendContext(tier_name="upper", run_id="t")), SlowDecode({"level": 1}),
                      chunk_bytes=SEGMENT, segment_bytes=SEGMENT)
    lower = CPUMemoryBackend({}, BackendContext(tier_name="lower", run_id="t"))
    telemetry = Telemetry(["batch"])
    telemetry.start_measuring()
    cache = MultiTierCache([Tier("upper", upper, SIZE * 3 // 2), Tier("lower", lower, 1 << 20)], telemetry, Zeros)
    cache.put("u0_c1_turn_1", SIZE)
    decoded = sum(int((~s.raw).sum()) for s in upper.layout("u0_c1_turn_1") or [])
    cache.put("u1_c1_turn_1", SIZE)
    read = telemetry.tiers["upper"]["read"]
    assert read.ops == 1 and read.codec.count == 1 and decoded > 0
    assert read.host.total >= read.codec.total >= 0.005 * decoded
    assert read.device.total < read.codec.total
    assert read.host.total + read.device.total == pytest.approx(read.total.total)


def test_every_segments_io_log_line_carries_its_entrys_trace_id(tmp_path: Path) -> None:
    """R3 M2: segment commands were logged under ``key.kvcN`` with that key's trace id, so ``kvbench score``
    joined only segment 0 to the entry; the logged key stays the object's, the trace id is the entry's."""
    from kvbench_core.engine.measure.iolog import IOLog, trace_id_for

    with IOLog(str(tmp_path / "io.jsonl")) as log:
        recorder = CommandRecorder("dram", telemetry=None, io_log=log)
        inner = CPUMemoryBackend({}, BackendContext(tier_name="dram", run_id="test", io_log=recorder))
        cache, telemetry = cache_over([Tier("dram", coded(inner), 1 << 20)])
        recorder.telemetry = telemetry
        cache.put("u0_c1_turn_1", SIZE)
    lines = [json.loads(line) for line in (tmp_path / "io.jsonl").read_text().splitlines()]
    assert {line["key"] for line in lines} == {segment_key("u0_c1_turn_1", i) for i in range(3)}
    assert {line["trace_id"] for line in lines} == {trace_id_for("u0_c1_turn_1")}


def test_a_replays_io_log_joins_every_segment_to_its_manifest_entry(tmp_path: Path) -> None:
    """The replay's one-pass log: the codec stage sets its ``owner_of``, so the manifest's trace id is used."""
    from kvbench_core.contracts.payload import NoisePool
    from kvbench_core.engine.measure.iolog import IOLog
    from kvbench_core.kvio.replay import _OnePassLog

    with IOLog(str(tmp_path / "io.jsonl"), {"obj": 77}) as log:
        gate = _OnePassLog(log)
        gate.active = True
        tier = coded(CPUMemoryBackend({}, BackendContext(tier_name="dram", run_id="test", io_log=gate)))
        tier.write("obj", NoisePool(seed=1, pool_bytes=1 << 16, max_piece=1 << 16).payload("obj", SIZE))
    lines = [json.loads(line) for line in (tmp_path / "io.jsonl").read_text().splitlines()]
    assert len({line["key"] for line in lines}) == 3 and {line["trace_id"] for line in lines} == {77}


@pytest.mark.redis
def test_over_a_real_shared_redis_a_second_clients_codec_store_sends_nothing(tmp_path: Path) -> None:
    """Two clients of one shared namespace through the same codec: the second's store of an entry of three
    segments the first committed is a store without a transfer, and both caches' copy checks hold."""
    from redis_servers import require_redis, start_redis

    from kvbench_core.engine.run.factory import create_backend
    from kvbench_core.runspec.codec_choices import codec_choice

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
