"""kvio replay on real tiers (cpu, and nvme when installed), the one-pass I/O log, and the diskstats check."""

from __future__ import annotations

import dataclasses
import json
import time
from collections import Counter
from typing import Any, ClassVar

import pytest

from kvbench_core.builtins.memory import CPUMemoryBackend
from kvbench_core.cli import main
from kvbench_core.contracts.backend import ByteSource, IOTiming
from kvbench_core.contracts.errors import InputFileError, SpecError
from kvbench_core.contracts.plugins import registry
from kvbench_core.kvio.commands import TransferGeometry
from kvbench_core.kvio.diskcheck import DiskWindow, expected_requests, max_io_bytes, read_counters
from kvbench_core.kvio.manifest import KVObject, Manifest
from kvbench_core.kvio.projection import build_manifest
from kvbench_core.kvio.replay import ReplaySettings, replay, tier_from_argument
from kvbench_core.kvio.validate import read_trace, validate
from kvbench_core.runspec.geometry import resolve_model

KiB = 1 << 10
needs_nvme = pytest.mark.skipif("nvme" not in registry("backend"), reason="kvbench-nvme plugin not installed")


def _manifest(header: int = 0) -> Manifest:
    # tiny-1b fp16, 16-token chunks: 384 KiB objects; 100 tokens leave a 4-token (96 KiB) tail chunk
    return build_manifest(resolve_model("tiny-1b"), TransferGeometry(store_header_bytes=header), 16, tokens=100)


def test_replay_on_the_cpu_tier_times_every_object(tmp_path):
    manifest = _manifest()
    report = replay(manifest, {"backend": "cpu"}, ReplaySettings(iters=2, warmup=1, concurrency=2,
                                                                 prefill_tokens_per_sec=4000))
    assert [it["iteration"] for it in report["iterations"]] == [1, 2]
    store = report["iterations"][0]["store"]
    assert (store["objects"], store["bytes"]) == (7, 100 * 24_576)
    assert store["latency_ms"].keys() == {"count", "mean", "min", "max", "p50", "p95", "p99", "p99.9"}
    overall = report["overall"]["load"]
    assert overall["objects"] == 14 and overall["bytes"] == 2 * 100 * 24_576
    assert overall["planned_commands_per_pass"] == 6 * 3 + 1
    classes = report["load_vs_recompute"]["classes"]
    assert [(c["tokens"], c["objects"]) for c in classes] == [(16, 6), (4, 1)]
    assert classes[0]["breakeven_bytes_per_s"] == pytest.approx(16 * 24_576 / (16 / 4000))
    assert {c["faster"] for c in classes} <= {"load", "recompute"}
    assert report["warnings"] == []  # a memory tier has no device commands to disagree with the projection


class _CommandLoggingTier(CPUMemoryBackend):
    """Test double: a memory tier that logs one command per transfer-size piece, like a file tier."""

    name = "logging-test"
    volatile = False
    options_schema: ClassVar[dict[str, Any]] = {
        "type": "object", "additionalProperties": False, "properties": {"transfer_size": {"type": "integer"}}}

    def __init__(self, options: dict[str, Any], context: Any) -> None:
        # The memory tier logs its own 4 MiB copies as commands: give it no log, log the planned pieces here.
        super().__init__(options, dataclasses.replace(context, io_log=None))
        self.log = context.io_log
        self.command_bytes = options["transfer_size"]  # the pieces it logs; the memory tier fills its own

    def _log_commands(self, key: str, op: str, size: int) -> None:
        if self.log is not None:
            for offset in range(0, size, self.command_bytes):
                n = min(self.command_bytes, size - offset)
                self.log.record(key, op, offset, n, 0.0, time.perf_counter())

    def write(self, key: str, source: ByteSource) -> IOTiming:
        self._log_commands(key, "write", source.size)
        return super().write(key, source)

    def read(self, key: str, size: int, sink: Any) -> IOTiming:
        self._log_commands(key, "read", size)
        return super().read(key, size, sink)


def test_io_log_holds_exactly_one_pass_and_validates_exactly(tmp_path, monkeypatch):
    monkeypatch.setitem(registry("backend"), "logging-test", _CommandLoggingTier)
    manifest = build_manifest(resolve_model("tiny-1b"), TransferGeometry(align=1, store_header_bytes=0), 16,
                              tokens=64)
    log = tmp_path / "io.jsonl"
    replay(manifest, {"backend": "logging-test"}, ReplaySettings(iters=3, warmup=2, io_log=str(log)))
    assert len(log.read_text().splitlines()) == 2 * 4 * 3  # one pass: 4 objects x 3 commands, stored and loaded
    report = validate(manifest, read_trace(str(log)))
    assert (report["exact_match"]["fraction"], report["wape"], report["tv_distance"]) == (1.0, 0.0, 0.0)


@needs_nvme
def test_replay_on_the_nvme_tier_reissues_the_planned_commands(tmp_path):
    manifest = _manifest()
    log = tmp_path / "io.jsonl"
    tier = {"name": "disk", "backend": "nvme", "options": {"path": str(tmp_path / "kv"), "direct": True}}
    report = replay(manifest, tier, ReplaySettings(iters=1, io_log=str(log), diskstats=True))
    assert report["tier"]["transfer_size"] == 128 * KiB  # the manifest's max transfer, not the tier default
    assert report["iterations"][0]["load"]["tier_commands"] == 6 * 3 + 1
    validation = validate(manifest, read_trace(str(log)))
    assert (validation["exact_match"]["fraction"], validation["wape"], validation["tv_distance"]) == (1.0, 0.0, 0.0)
    disk = report["diskstats"]
    assert disk["available"] is False or disk["read"]["planned_bytes"] == 100 * 24_576
    assert not (tmp_path / "kv").exists() or not any((tmp_path / "kv").iterdir())  # replay leaves no files


@needs_nvme
def test_a_store_header_the_tier_does_not_write_fails_validation(tmp_path):
    manifest = _manifest(header=4096)
    log = tmp_path / "io.jsonl"
    tier = {"backend": "nvme", "options": {"path": str(tmp_path / "kv"), "direct": True}}
    replayed = replay(manifest, tier, ReplaySettings(io_log=str(log)))
    report = validate(manifest, read_trace(str(log)))
    assert report["by_op"]["load"]["exact_match"]["fraction"] == 1.0
    assert report["by_op"]["store"]["exact_match"]["matched"] == 0
    # ... and the replay said so beforehand, with what to do about it
    assert any("4096 B header op before each store" in w and "--store-header-bytes 0" in w
               for w in replayed["warnings"]), replayed["warnings"]


def test_tier_argument_inline_or_from_a_spec(tmp_path):
    assert tier_from_argument('{"backend": "cpu"}') == ({"backend": "cpu"}, "--tier")
    assert tier_from_argument("{backend: nvme, options: {path: /tmp/x, direct: true}}")[0]["options"]["direct"]
    with pytest.raises(SpecError, match="expected a tier mapping"):
        tier_from_argument("spec-that-does-not-exist.yaml")
    spec = tmp_path / "spec.yaml"
    spec.write_text("version: 1\ncache:\n  tiers:\n    - {name: dram, backend: cpu}\n")
    with pytest.raises(InputFileError, match="no persistent"):
        tier_from_argument(str(spec))
    spec.write_text("version: 1\n")
    with pytest.raises(InputFileError, match=r"field 'cache\.tiers' is missing"):
        tier_from_argument(str(spec))


@needs_nvme
def test_a_spec_file_supplies_its_first_persistent_tier(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text("version: 1\ncache:\n  tiers:\n    - {name: dram, backend: cpu}\n"
                    f"    - {{name: disk, backend: nvme, options: {{path: {tmp_path}/kv}}}}\n")
    tier, where = tier_from_argument(str(spec))
    assert tier["name"] == "disk" and where.endswith("cache.tiers[1]")


def test_replay_rejects_bad_settings_before_any_io():
    with pytest.raises(SpecError, match="--iters"):
        replay(_manifest(), {"backend": "cpu"}, ReplaySettings(iters=0))
    with pytest.raises(SpecError, match="must be > 0"):
        replay(_manifest(), {"backend": "cpu"}, ReplaySettings(prefill_tokens_per_sec=-1))


def test_replay_cli_writes_a_json_report(tmp_path, capsys):
    _manifest().write(str(tmp_path / "m.json"))
    out = tmp_path / "replay.json"
    assert main(["replay", str(tmp_path / "m.json"), "--tier", "{backend: cpu}", "--diskstats",
                 "--prefill-tokens-per-sec", "1000", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "store all, then load all" in text and "load vs recompute" in text and "diskstats: not available" in text
    report = json.loads(out.read_text())
    assert report["format"] == "kvbench-kvio-replay" and report["diskstats"]["available"] is False
    assert main(["replay", str(tmp_path / "missing.json"), "--tier", "{backend: cpu}"]) == 2
    assert "no such manifest file" in capsys.readouterr().err


DISKSTATS = (" 259       0 nvme0n1 {r} {rm} {rs} 10 {w} {wm} {ws} 20 0 30 40 0 0 0 0 0 0\n"
             "   7       0 loop0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n")


def _diskstats(path, r=0, rm=0, rs=0, w=0, wm=0, ws=0) -> str:
    path.write_text(DISKSTATS.format(r=r, rm=rm, rs=rs, w=w, wm=wm, ws=ws))
    return str(path)


def test_diskstats_counters_and_max_request_size(tmp_path):
    counters = read_counters("259:0", _diskstats(tmp_path / "diskstats", 5, 1, 2048, 7, 2, 4096))
    assert (counters.reads, counters.read_merges, counters.read_bytes) == (5, 1, 2048 * 512)
    assert (counters.writes, counters.write_merges, counters.write_bytes) == (7, 2, 4096 * 512)
    with pytest.raises(LookupError):
        read_counters("8:0", str(tmp_path / "diskstats"))
    (tmp_path / "block" / "nvme0n1" / "queue").mkdir(parents=True)
    (tmp_path / "block" / "nvme0n1" / "queue" / "max_sectors_kb").write_text("512\n")
    assert max_io_bytes("nvme0n1", str(tmp_path / "block")) == 512 * KiB
    assert max_io_bytes("sda", str(tmp_path / "block")) is None
    assert expected_requests(Counter({1024 * KiB: 2, 4 * KiB: 1}), 512 * KiB) == 5
    assert expected_requests(Counter({1024 * KiB: 2}), None) == 2


def test_disk_window_compares_deltas_with_the_projection(tmp_path):
    stats = tmp_path / "diskstats"
    (tmp_path / "block" / "nvme0n1" / "queue").mkdir(parents=True)
    (tmp_path / "block" / "nvme0n1" / "queue" / "max_sectors_kb").write_text("128\n")
    description = {"direct": True, "block_device": {"name": "nvme0n1p1", "disk": "nvme0n1", "major_minor": "259:0"}}
    window = DiskWindow(description, str(_diskstats(stats, 100, 0, 1000, 100, 0, 1000)), str(tmp_path / "block"))
    window.start()
    planned = Counter({128 * KiB: 16, 4 * KiB: 1})  # 2 MiB + 4 KiB
    _diskstats(stats, 100 + 17, 0, 1000 + 4104, 100 + 10, 7, 1000 + 4104 + 16)  # writes: 8 KiB of journal
    report = window.report(planned, planned)
    assert report["read"] == {"planned_bytes": 2101248, "device_bytes": 2101248, "bytes_ratio": 1.0,
                              "bytes_agree": True, "planned_commands": 17, "expected_requests": 17,
                              "device_requests": 17, "device_merges": 0, "requests_agree": True}
    assert report["write"]["bytes_agree"] is True and report["write"]["requests_agree"] is True
    assert report["max_io_bytes"] == 128 * KiB


def test_disk_window_explains_when_it_cannot_check():
    assert DiskWindow({"backend": "cpu"}).report(Counter(), Counter())["available"] is False
    window = DiskWindow({"direct": False, "block_device": {"name": "x", "major_minor": "1:2"}}, "/nonexistent")
    window.start()
    assert "cannot read" in window.report(Counter(), Counter())["reason"]


@needs_nvme
def test_an_odd_sized_object_replayed_with_o_direct_logs_what_the_kernel_returned(tmp_path):
    """Issue 17: the log used to hold a computed aligned length for the short tail read.  Now a tail logs
    the bytes preadv returned, the length asked and the alignment; validation scores the command issued."""
    odd = 128 * KiB + 23_552  # a tail that is 512-byte but not 4 KiB aligned
    manifest = Manifest.from_objects([KVObject("odd-0", odd), KVObject("odd-1", odd)], model={"name": "test"},
                                     geometry=TransferGeometry(store_header_bytes=0))
    log = tmp_path / "io.jsonl"
    tier = {"backend": "nvme", "options": {"path": str(tmp_path / "kv"), "direct": True}}
    replay(manifest, tier, ReplaySettings(io_log=str(log)))
    tails = [json.loads(line) for line in log.read_text().splitlines() if '"requested"' in line]
    assert sorted((t["op"], t["bytes"], t["requested"], t["align"]) for t in tails) == [
        ("read", 23_552, 24_576, 4096), ("read", 23_552, 24_576, 4096),
        ("write", 24_576, 24_576, 4096), ("write", 24_576, 24_576, 4096)]
    report = validate(manifest, read_trace(str(log)))
    assert (report["exact_match"]["fraction"], report["wape"], report["tv_distance"]) == (1.0, 0.0, 0.0)


def test_a_codec_tiers_segments_are_scored_against_their_object(tmp_path):
    """R3 M2: through a codec of small segments every segment's commands join their manifest object (none
    unattributed; only segment 0 did), and every measured byte of an object is on it."""
    pytest.importorskip("cramjam", reason="the codecs extra is not installed (pip install 'kvbench-core[codecs]')")
    manifest = _manifest()
    log = tmp_path / "io.jsonl"
    tier = {"backend": "cpu", "codec": {"name": "zstd", "chunk": "32KiB", "segment": "128KiB"}}
    replay(manifest, tier, ReplaySettings(io_log=str(log)))
    keys = {json.loads(line)["key"] for line in log.read_text().splitlines()}
    assert any(".kvc" in key for key in keys)  # objects of 384 KiB really span several segments
    report = validate(manifest, read_trace(str(log)))
    assert report["unattributed"] == {"trace_ids": 0, "commands": 0, "bytes": 0}
    logged = sum(json.loads(line)["bytes"] for line in log.read_text().splitlines())
    assert report["bytes"]["measured"] == logged
