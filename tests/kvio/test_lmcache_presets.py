"""``kvbench project --engine lmcache-0.5 --backend …``: each rule of the preset, what a flag overrides, and
the hint ``score --order`` gives for an engine whose stores race.  No LMCache needed: the engine itself
holds the presets to its I/O in tests/kvio/test_lmcache_io.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbench_core.cli import main
from kvbench_core.contracts.plugins import registry
from kvbench_core.kvio.manifest import Manifest

QWEN_CHUNK = 256 * 12_288  # Qwen2.5-0.5B bf16: 12,288 B/token, the 3 MiB chunk


def project(capsys: pytest.CaptureFixture[str], *flags: str) -> dict:
    assert main(["project", "--json", *flags]) == 0
    return json.loads(capsys.readouterr().out)


def test_lmcache_drops_the_partial_last_chunk_by_default(capsys: pytest.CaptureFixture[str]) -> None:
    summary = project(capsys, "--model", "qwen2.5-0.5b", "--tokens", "3000", "--engine", "lmcache-0.5",
                      "--backend", "local_disk")["summary"]
    assert summary["totals"]["objects"] == 11  # 3000 // 256; the generic projection keeps a 12th, 184-token object
    assert summary["chunking"]["tail_chunk"] == "drop" and summary["chunking"]["unstored_tokens"] == 3000 - 11 * 256
    kept = project(capsys, "--model", "qwen2.5-0.5b", "--tokens", "3000", "--engine", "lmcache-0.5",
                   "--backend", "local_disk", "--tail-chunk", "keep")["summary"]
    assert kept["totals"]["objects"] == 12 and kept["object_classes"][-1]["tokens"] == 3000 - 11 * 256


def test_local_disk_is_one_headerless_call_per_object_each_way(capsys: pytest.CaptureFixture[str]) -> None:
    summary = project(capsys, "--model", "qwen2.5-0.5b", "--num-chunks", "4", "--engine", "lmcache-0.5",
                      "--backend", "local_disk")["summary"]
    (row,) = summary["object_classes"]
    assert row["payload_bytes"] == QWEN_CHUNK
    assert (row["store_commands"], row["load_commands"]) == (1, 1)
    assert row["store_device_bytes"] == row["load_device_bytes"] == QWEN_CHUNK
    assert summary["geometry"]["store_header_bytes"] == 0 and "slot_bytes" not in summary["engine"]


def test_raw_block_writes_a_4096_byte_header_in_a_block_aligned_slot(capsys: pytest.CaptureFixture[str]) -> None:
    summary = project(capsys, "--model", "qwen2.5-0.5b", "--num-chunks", "4", "--engine", "lmcache-0.5",
                      "--backend", "raw_block")["summary"]
    (row,) = summary["object_classes"]
    assert (row["store_commands"], row["load_commands"]) == (2, 1)
    assert row["store_device_bytes"] == QWEN_CHUNK + 4096 and row["load_device_bytes"] == QWEN_CHUNK
    assert summary["engine"]["slot_bytes"] == 3_149_824  # the slot for a 3 MiB chunk
    assert summary["engine"]["rules"]["store"].startswith("LMCache 0.5.6")  # every rule names its source


def test_a_flag_given_with_a_preset_wins(capsys: pytest.CaptureFixture[str]) -> None:
    summary = project(capsys, "--model", "qwen2.5-0.5b", "--tokens", "1024", "--engine", "lmcache-0.5",
                      "--backend", "raw_block", "--chunk-tokens", "512", "--store-header-bytes", "0",
                      "--max-transfer", "128KiB", "--align", "4096")["summary"]
    assert summary["chunking"]["chunk_tokens"] == 512 and summary["totals"]["objects"] == 2
    assert summary["geometry"] == {"max_transfer": 128 << 10, "align": 4096, "store_header_bytes": 0}
    assert summary["object_classes"][0]["store_commands"] == 512 * 12_288 // (128 << 10)


def test_lmcache_stores_mla_from_the_first_rank_only(capsys: pytest.CaptureFixture[str]) -> None:
    preset = project(capsys, "--model", "deepseek-v3", "--tp", "8", "--num-chunks", "2",
                     "--engine", "lmcache-0.5", "--backend", "raw_block")
    generic = project(capsys, "--model", "deepseek-v3", "--tp", "8", "--num-chunks", "2")
    assert preset["summary"]["totals"]["objects"] == 2 and generic["summary"]["totals"]["objects"] == 16
    assert {obj["rank"] for obj in preset["manifest"]["objects"]} == {0}
    gqa = project(capsys, "--model", "llama3.1-8b", "--tp", "2", "--num-chunks", "2",
                  "--engine", "lmcache-0.5", "--backend", "raw_block")
    assert gqa["summary"]["totals"]["objects"] == 4  # GQA: every rank stores its share


def test_the_manifest_records_the_preset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "projection.json"
    assert main(["project", "--model", "qwen2.5-0.5b", "--tokens", "600", "--engine", "lmcache-0.5", "--backend",
                 "local_disk", "--record", str(path)]) == 0
    manifest = Manifest.read(str(path))
    assert manifest.engine["name"] == "lmcache-0.5" and manifest.engine["backend"] == "local_disk"
    assert Manifest.from_dict(manifest.to_dict(), "again").engine == manifest.engine
    plain = tmp_path / "plain.json"
    assert main(["project", "--model", "qwen2.5-0.5b", "--tokens", "600", "--record", str(plain)]) == 0
    assert "engine" not in json.loads(plain.read_text())  # a projection without a preset reads as before


@pytest.mark.parametrize(("flags", "line"), [
    (["--backend", "raw_block"], "--backend raw_block needs --engine: one of lmcache-0.5"),
    (["--engine", "lmcache-0.5"], "--engine lmcache-0.5 needs --backend: one of local_disk, raw_block"),
    (["--engine", "lmcache-0.5", "--backend", "local_disk", "--tokens", "100"],
     "--tokens 100 is less than one 256-token chunk and the tail chunk is dropped"),
])
def test_an_incomplete_or_empty_preset_projection_is_one_line(capsys: pytest.CaptureFixture[str],
                                                              flags: list[str], line: str) -> None:
    amount = [] if "--tokens" in flags else ["--num-chunks", "1"]
    assert main(["project", "--model", "qwen2.5-0.5b", *amount, *flags]) == 2
    err = capsys.readouterr().err
    assert line in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_score_order_names_the_racing_disk_threads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """LMCache's 4 disk threads store a prompt's chunks in any order: an --order miss on such a projection says so."""
    path = tmp_path / "projection.json"
    assert main(["project", "--model", "qwen2.5-0.5b", "--num-chunks", "3", "--engine", "lmcache-0.5", "--backend",
                 "local_disk", "--record", str(path)]) == 0
    manifest = Manifest.read(str(path))
    log = tmp_path / "io.jsonl"
    objects = list(manifest.objects)
    lines = [{"trace_id": manifest.trace_ids[obj.key], "key": obj.key, "op": op, "offset": 0, "bytes": obj.nbytes}
             for op in ("write", "read") for obj in (objects[1], objects[0], objects[2])]  # chunk 1 raced ahead
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    capsys.readouterr()
    assert main(["score", "--projection", str(path), "--measured", str(log), "--order"]) == 1
    out = capsys.readouterr().out
    assert "objects out of the expected order" in out and "disk_io_threads: 1" in out
    assert main(["score", "--projection", str(path), "--measured", str(log)]) == 0  # sizes are exact all the same


def test_a_one_call_per_object_projection_replays_on_the_nvme_tier_exactly(tmp_path: Path,
                                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """local_disk's projection moves each object in one call (a 2 GiB max transfer): replay gives the nvme tier the
    largest object as its transfer size, not 2 GiB (refused by its schema before), and reissues the projection."""
    if "nvme" not in registry("backend"):
        pytest.skip("kvbench-nvme plugin not installed")
    projected, log = tmp_path / "projection.json", tmp_path / "io.jsonl"
    assert main(["project", "--model", "qwen2.5-0.5b", "--tokens", "600", "--engine", "lmcache-0.5", "--backend",
                 "local_disk", "--record", str(projected)]) == 0
    tier = f"{{backend: nvme, options: {{path: {tmp_path / 'kv'}}}}}"
    assert main(["replay", str(projected), "--tier", tier, "--iters", "1", "--io-log", str(log),
                 "--json", str(tmp_path / "replay.json")]) == 0
    assert json.loads((tmp_path / "replay.json").read_text())["warnings"] == []
    capsys.readouterr()
    assert main(["score", "--projection", str(projected), "--measured", str(log), "--offsets", "--order"]) == 0
    assert "exact-match 4/4" in capsys.readouterr().out
