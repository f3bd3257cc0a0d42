"""Stores without a transfer (``IOTiming.dedup_bytes``, docs/metrics.md): a shared tier that finds an entry
already committed by another holder stores it without sending a byte.  The engine books such a write as a
stored entry and nothing else: no written bytes, no operation, no command, no latency; the tier above is
booked the read the store really made of it; written + deduplicated bytes = stored + demoted + promoted.
A partly deduplicated write is an operation of what it moved; a timing that breaks the rules is refused."""

from __future__ import annotations

from typing import Any

from kvbench_core.builtins.memory import CPUMemoryBackend
from kvbench_core.contracts.backend import BackendContext, ByteSource, IOTiming
from kvbench_core.contracts.payload import NoisePool
from kvbench_core.engine.cache.cache_types import Tier
from kvbench_core.engine.cache.waterfall import MultiTierCache
from kvbench_core.engine.measure.opstats import OpStats
from kvbench_core.engine.measure.telemetry import Telemetry
from kvbench_core.results.invariants import _stored_entries, _written

SIZE = 3000


class SharedMemoryTier(CPUMemoryBackend):
    """A memory tier whose ``elsewhere`` keys another client committed already: storing one sends nothing."""

    def __init__(self, elsewhere: set[str]) -> None:
        super().__init__({}, BackendContext(tier_name="shared", run_id="test"))
        self.elsewhere = elsewhere
        self.held: set[str] = set()

    def write(self, key: str, source: ByteSource) -> IOTiming:
        if key in self.elsewhere:
            self.held.add(key)
            return IOTiming.deduplicated(0.001, 0.001, source.size)
        return super().write(key, source)

    def read(self, key: str, size: int, sink: Any) -> IOTiming:
        if key in self.held:
            return IOTiming(0.001, 0.0, 0.001, size)
        return super().read(key, size, sink)

    def delete(self, key: str) -> None:
        self.held.discard(key)
        super().delete(key)


def cache_over(tiers: list[Tier]) -> tuple[MultiTierCache, Telemetry]:
    telemetry = Telemetry(["batch"])
    telemetry.start_measuring()
    pool = NoisePool(seed=3, pool_bytes=1 << 16, max_piece=1 << 16)
    return MultiTierCache(tiers, telemetry, pool.payload), telemetry


def metrics_of(telemetry: Telemetry) -> dict[str, Any]:
    """The sections ``_written`` and ``_stored_entries`` read, from a test cache's telemetry."""
    tiers = {name: {op: stats.to_dict() for op, stats in ops.items()} for name, ops in telemetry.tiers.items()}
    return {"tiers": tiers, "cache": {"counters": dict(telemetry.counters), "promotions": telemetry.promotions,
                                      "demotions_bytes": dict(telemetry.demotions),
                                      "demotions_count": dict(telemetry.demotion_count)}}


def test_a_deduplicated_write_is_a_stored_entry_and_no_operation() -> None:
    stats = OpStats()
    stats.add(IOTiming(0.002, 0.001, 0.001, SIZE, commands=2), 1.0, 1.002)
    stats.add(IOTiming.deduplicated(0.5, 0.5, SIZE), 2.0, 2.5)
    assert (stats.ops, stats.bytes, stats.commands, stats.physical_bytes) == (1, SIZE, 2, SIZE)
    assert (stats.dedup_stores, stats.dedup_bytes) == (1, SIZE)
    assert stats.total.count == stats.device.count == 1 and stats.last_end == 1.002  # no latency, no span
    merged = OpStats.from_dict(stats.to_dict())
    merged.merge(stats)
    assert (merged.ops, merged.dedup_stores, merged.dedup_bytes) == (2, 2, 2 * SIZE)


def test_through_the_cache_written_bytes_are_the_bytes_moved() -> None:
    shared = SharedMemoryTier(elsewhere={"kv_system_a_t3"})
    cache, telemetry = cache_over([Tier("shared", shared, 1 << 20)])
    for key in ("kv_system_a_t3", "u0_c1_turn_1", "u1_c1_turn_1"):
        assert cache.put(key, SIZE) == "shared"
    writes = telemetry.tiers["shared"]["write"]
    assert (writes.ops, writes.bytes, writes.dedup_stores, writes.dedup_bytes) == (2, 2 * SIZE, 1, SIZE)
    assert writes.ops + writes.dedup_stores == 3  # stored entries = transfers + deduplicated
    assert writes.bytes + writes.dedup_bytes == telemetry.counters["stored_entry_bytes"]
    assert cache.occupancy()["shared"] == {"entries": 3, "bytes": 3 * SIZE, "capacity_bytes": 1 << 20}
    point = telemetry.close_interval(users=1)
    assert point["write_bytes"] == 2 * SIZE and point["tiers"]["shared"]["write_bytes"] == 2 * SIZE
    assert cache.get("kv_system_a_t3") == "shared"  # held: this client's entry to read


def test_a_demotion_onto_a_committed_entry_reads_nothing_above() -> None:
    dram = CPUMemoryBackend({}, BackendContext(tier_name="dram", run_id="test"))
    cache, telemetry = cache_over([Tier("dram", dram, SIZE * 3 // 2),
                                   Tier("shared", SharedMemoryTier(elsewhere={"kv_system_a_t3"}), 1 << 20)])
    cache.put("kv_system_a_t3", SIZE)
    cache.put("u0_c1_turn_1", SIZE)  # room for one only: the prompt goes down onto the committed entry
    assert cache.location("kv_system_a_t3") == "shared"
    assert (telemetry.tiers["dram"]["read"].ops, telemetry.tiers["dram"]["read"].bytes) == (0, 0)
    assert telemetry.demotions["dram->shared"] == SIZE
    stored_and_demoted = telemetry.counters["stored_entry_bytes"] + SIZE
    written = sum(ops["write"].bytes + ops["write"].dedup_bytes for ops in telemetry.tiers.values())
    assert written == stored_and_demoted


def _metrics(bytes_written: int, dedup_bytes: int, stored: int) -> dict[str, Any]:
    return {"tiers": {"shared": {"write": {"bytes": bytes_written, "dedup_bytes": dedup_bytes}}},
            "cache": {"counters": {"stored_entry_bytes": stored}, "demotions_bytes": {}, "promotions": 0}}


def test_the_written_bytes_check_counts_deduplicated_bytes_apart() -> None:
    (check,) = _written(_metrics(2 * SIZE, SIZE, 3 * SIZE))
    assert check.passed
    (check,) = _written(_metrics(3 * SIZE, SIZE, 3 * SIZE))  # a dedup booked as written as well: caught
    assert not check.passed
    (check,) = _written({"tiers": {"t": {"write": {"bytes": SIZE}}}, "cache": _metrics(0, 0, SIZE)["cache"]})
    assert check.passed  # a result written before dedup_bytes existed


def test_the_stored_entries_check_counts_a_store_without_a_transfer_as_a_stored_entry() -> None:
    cache = {"counters": {"stored_entries": 3}, "demotions_count": {"dram->shared": 1}, "promotions": 0}
    tiers = {"dram": {"write": {"ops": 3}}, "shared": {"write": {"ops": 0, "dedup_stores": 1}}}
    (check,) = _stored_entries({"tiers": tiers, "cache": cache})
    assert check.passed
    tiers["shared"]["write"]["dedup_stores"] = 0  # the demotion onto a committed entry went uncounted
    (check,) = _stored_entries({"tiers": tiers, "cache": cache})
    assert not check.passed
    assert list(_stored_entries({"tiers": tiers, "cache": {"demotions_count": {}}})) == []  # an older result


def test_a_real_run_with_demotions_checks_its_stored_entries_and_they_add_up(tmp_path: Any) -> None:
    import json

    from tiny_spec import history_spec, run_cli

    tier = {"name": "disk", "backend": "nvme", "capacity": "64MiB",
            "options": {"path": str(tmp_path / "cache"), "fsync": False}}
    code, _, err = run_cli(tmp_path, history_spec([tier], output={"directory": str(tmp_path / "out"),
                                                                  "progress": "off"}))
    assert code == 0, err
    result = json.loads(next((tmp_path / "out").glob("*.json")).read_text())
    (check,) = [item for item in result["checks"]["items"] if item["name"] == "stored_entries"]
    assert check["passed"] and check["expected"] > result["metrics"]["cache"]["counters"]["stored_entries"] > 0


def test_the_summary_says_what_was_stored_without_a_transfer() -> None:
    from kvbench_core.cli.run_cmd import dedup_lines

    assert dedup_lines({"write": {"dedup_stores": 0, "dedup_bytes": 0}}) == []
    assert dedup_lines({"write": {}}) == []  # an older result
    (line,) = dedup_lines({"write": {"dedup_stores": 4, "dedup_bytes": 2_500_000_000}})
    assert "stored without a transfer: 4 entries, 2.500 GB" in line and "not in write GB" in line


def test_the_report_tables_show_the_same_stores_without_a_transfer() -> None:
    """The xlsx and HTML tier tables read them through op_figures, the figures the JSON holds."""
    from testkit import document_with

    from kvbench_core.reports.html import _tiers
    from kvbench_core.reports.key_figures import op_figures

    stats = {"ops": 3, "bytes": 9000, "commands": 3, "active_window_s": 1.0, "bandwidth_bytes_per_s": 9000.0}
    tier = {"backend": "redis", "capacity_bytes": 1 << 30, "read": dict(stats),
            "write": {**stats, "dedup_stores": 4, "dedup_bytes": 2_500_000_000}}
    figures = op_figures(tier, "write")
    assert (figures["dedup_stores"], figures["dedup_gb"]) == (4, 2.5)
    assert figures["ops"] == 3 and figures["gb"] == 9000 / 1e9  # kept out of the operations and bytes
    assert op_figures(tier, "read")["dedup_stores"] == 0
    html = _tiers(document_with(metrics={"tiers": {"shared": tier}}))
    assert "<th>stores without a transfer</th><th>deduplicated GB</th>" in html
    assert '<td>write</td>' in html and '<td class="num">4</td><td class="num">2.500</td></tr>' in html
    plain = {**tier, "write": dict(stats)}
    assert "stores without a transfer" not in _tiers(document_with(metrics={"tiers": {"shared": plain}}))


def test_a_partly_deduplicated_write_is_an_operation_of_the_bytes_it_moved() -> None:
    stats = OpStats()
    stats.add(IOTiming(0.002, 0.001, 0.001, 1000, commands=1, dedup_bytes=SIZE - 1000), 1.0, 1.002)
    assert (stats.ops, stats.bytes, stats.commands, stats.physical_bytes) == (1, 1000, 1, 1000)
    assert (stats.dedup_stores, stats.dedup_bytes) == (0, SIZE - 1000)  # stored once: as an operation
    assert stats.bytes + stats.dedup_bytes == SIZE


class HashingSharedTier(SharedMemoryTier):
    """A content-addressed shared tier: it reads the whole source to hash it, then finds it committed."""

    def write(self, key: str, source: ByteSource) -> IOTiming:
        if key in self.elsewhere:
            scratch = memoryview(bytearray(source.size))
            source.fill(0, scratch)
        return super().write(key, source)


def test_a_demotion_onto_a_committed_entry_books_what_the_lower_tier_read_above() -> None:
    """R1 M3: the upper tier's read was skipped because of the flag, not because nothing was read."""
    dram = CPUMemoryBackend({}, BackendContext(tier_name="dram", run_id="test"))
    cache, telemetry = cache_over([Tier("dram", dram, SIZE * 3 // 2),
                                   Tier("shared", HashingSharedTier(elsewhere={"kv_system_a_t3"}), 1 << 20)])
    cache.put("kv_system_a_t3", SIZE)
    cache.put("u0_c1_turn_1", SIZE)  # the prompt goes down; the shared tier hashes all of it, sends nothing
    assert (telemetry.tiers["dram"]["read"].ops, telemetry.tiers["dram"]["read"].bytes) == (1, SIZE)
    assert telemetry.tiers["shared"]["write"].dedup_stores == 1


class BrokenDedupTier(CPUMemoryBackend):
    """A backend that claims a store without a transfer and data commands at once, or dedups a read."""

    def write(self, key: str, source: ByteSource) -> IOTiming:
        return IOTiming(0.001, 0.0, 0.001, 0, commands=2, dedup_bytes=source.size)

    def read(self, key: str, size: int, sink: Any) -> IOTiming:
        return IOTiming(0.001, 0.0, 0.001, 0, commands=0, dedup_bytes=size)


def test_a_timing_that_breaks_the_dedup_contract_is_refused_naming_the_backend() -> None:
    import pytest

    from kvbench_core.contracts.conformance import check_timing
    from kvbench_core.contracts.errors import StorageError
    from kvbench_core.engine.cache.tier_ops import TierOperations

    tier = Tier("odd", BrokenDedupTier({}, BackendContext(tier_name="odd", run_id="test")), 1 << 20)
    telemetry = Telemetry(["batch"])
    telemetry.start_measuring()
    ops = TierOperations(telemetry)
    with pytest.raises(StorageError, match=r"backend 'cpu' \(BrokenDedupTier\).*reports 2 data commands"):
        ops.timed(tier, "write", "k", lambda: tier.backend.write("k", NoisePool(3, 1 << 16, 1 << 16).payload("k", 9)))
    with pytest.raises(StorageError, match="a read reports dedup_bytes 9"):
        ops.timed(tier, "read", "k", lambda: tier.backend.read("k", 9, None))
    write = telemetry.tiers["odd"]["write"]
    assert (write.ops, write.dedup_stores, write.errors) == (0, 0, 1)  # refused: booked as a failure only
    with pytest.raises(AssertionError, match="data commands"):
        check_timing(IOTiming(0.001, 0.0, 0.001, 0, commands=2, dedup_bytes=9), 9, "write")
    check_timing(IOTiming.deduplicated(0.001, 0.001, 9), 9, "write")  # the public suite accepts a true one
    check_timing(IOTiming(0.001, 0.0, 0.001, 4, dedup_bytes=5), 9, "write")


def test_with_promotions_both_copy_checks_are_exact() -> None:
    """R1 M2: with promotions they only checked ``>=`` (writes 125 = stored 69 + demoted 45 + promoted 11)."""
    top = CPUMemoryBackend({}, BackendContext(tier_name="dram", run_id="test"))
    low = CPUMemoryBackend({}, BackendContext(tier_name="dram2", run_id="test"))
    telemetry = Telemetry(["batch"])
    telemetry.start_measuring()
    pool = NoisePool(seed=3, pool_bytes=1 << 16, max_piece=1 << 16)
    cache = MultiTierCache([Tier("dram", top, SIZE * 3 // 2), Tier("dram2", low, 1 << 20)], telemetry,
                           pool.payload, promotion="on_read")
    cache.put("u0_c1_turn_1", SIZE)
    cache.put("u1_c1_turn_1", SIZE)  # the first goes down
    assert cache.get("u0_c1_turn_1") == "dram2" and cache.location("u0_c1_turn_1") == "dram"  # promoted
    assert telemetry.promotions == 1 and telemetry.counters["promoted_bytes"] == SIZE
    metrics = metrics_of(telemetry)
    written, stored = (*_written(metrics), *_stored_entries(metrics))
    assert written.passed and stored.passed, (written.line(), stored.line())
    assert (stored.expected, written.expected) == (5, 5 * SIZE)  # 2 stored + 2 demoted (room for the promoted) + 1
    assert written.detail == "written + deduplicated bytes = stored + demoted + promoted bytes"
    metrics["tiers"]["dram"]["write"]["ops"] += 1  # one write too many: no longer hidden by '>='
    metrics["tiers"]["dram"]["write"]["bytes"] += 1
    assert not any(check.passed for check in (*_written(metrics), *_stored_entries(metrics)))
    del metrics["cache"]["counters"]["promoted_bytes"]  # a result from before the counter: a lower bound
    (older,) = _written(metrics)
    assert older.passed and ">=" in older.detail


def test_the_drain_section_keeps_its_stores_without_a_transfer() -> None:
    """R1 L1: ``metrics.drain`` dropped them."""
    from kvbench_core.engine.measure.records import DrainStats

    drain = DrainStats()
    drain.tiers["shared"]["write"].add(IOTiming.deduplicated(0.001, 0.001, SIZE), 1.0, 1.001)
    drain.tiers["shared"]["write"].add(IOTiming(0.002, 0.001, 0.001, SIZE), 1.0, 1.002)
    write = drain.to_dict()["tiers"]["shared"]["write"]
    assert (write["ops"], write["bytes"], write["dedup_stores"], write["dedup_bytes"]) == (1, SIZE, 1, SIZE)
    assert drain.to_dict()["write_bytes"] == 0  # the drain's bytes are the device's, booked by time
    drain.device["shared"]["write"].add(SIZE, 1, 1.0, 1.002)
    assert drain.to_dict()["write_bytes"] == SIZE  # moved bytes only


class TensorTier(CPUMemoryBackend):
    holds_device_tensors = True

    def tensor(self, key: str) -> Any:
        return key


class TensorWriter(CPUMemoryBackend):
    writes_device_tensors = True

    def write_tensor(self, key: str, tensor: Any) -> IOTiming:
        return IOTiming(0.001, 0.0, 0.001, SIZE)


def test_a_device_tensor_demotion_books_the_whole_entry_read_above() -> None:
    """GPU -> GPUDirect: the DMA reads the tensor itself, not through the source: its read is the entry."""
    upper = TensorTier({}, BackendContext(tier_name="gpu", run_id="test"))
    cache, telemetry = cache_over([Tier("gpu", upper, SIZE * 3 // 2),
                                   Tier("gds", TensorWriter({}, BackendContext(tier_name="gds", run_id="test")),
                                        1 << 20)])
    cache.put("u0_c1_turn_1", SIZE)
    cache.put("u1_c1_turn_1", SIZE)
    assert (telemetry.tiers["gpu"]["read"].ops, telemetry.tiers["gpu"]["read"].bytes) == (1, SIZE)
    assert telemetry.tiers["gds"]["write"].ops == 1
