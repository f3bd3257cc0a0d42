"""kvio projection: the seed's figures, TP/MLA/CLA objects, command splitting and ``kvbench project``."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from kvbench_core.cli import main
from kvbench_core.contracts.errors import SpecError
from kvbench_core.kvio.commands import TransferGeometry, log2_histogram, size_bin
from kvbench_core.kvio.manifest import Manifest
from kvbench_core.kvio.projection import build_manifest, chunk_token_counts, planned_commands, summarize
from kvbench_core.runspec.geometry import resolve_model

KiB, MiB = 1 << 10, 1 << 20


def test_llama31_8b_chunk_is_one_32mib_object_of_256_commands():
    manifest = build_manifest(resolve_model("llama3.1-8b", "bf16"), TransferGeometry(), 256, num_chunks=1)
    (obj,) = manifest.objects
    assert obj.nbytes == 32 * MiB
    assert manifest.geometry.load_commands(obj.nbytes) == Counter({128 * KiB: 256})
    assert manifest.geometry.store_commands(obj.nbytes) == Counter({128 * KiB: 256, 4 * KiB: 1})


def test_llama31_70b_tp4_gives_four_20mib_objects_with_161_store_and_160_load_commands():
    summary = summarize(build_manifest(resolve_model("llama3.1-70b-instruct", "bf16", tp=4), TransferGeometry(),
                                       256, num_chunks=1))
    assert summary["chunking"]["objects_per_chunk"] == 4
    (row,) = summary["object_classes"]
    assert (row["payload_bytes"], row["objects"]) == (20 * MiB, 4)
    assert (row["store_commands"], row["load_commands"]) == (161, 160)


def test_without_a_header_store_and_load_issue_the_same_commands():
    geometry = TransferGeometry(store_header_bytes=0)
    assert geometry.store_commands(20 * MiB) == geometry.load_commands(20 * MiB) == Counter({128 * KiB: 160})


def test_mla_latent_is_replicated_into_every_rank_object():
    manifest = build_manifest(resolve_model("deepseek-v3", "bf16", tp=8), TransferGeometry(), 256, num_chunks=2)
    assert len(manifest.objects) == 16
    assert {obj.nbytes for obj in manifest.objects} == {70_272 * 256}
    # 17,989,632 B = 137 full 128 KiB commands and a 32 KiB tail
    assert manifest.geometry.load_commands(70_272 * 256) == Counter({128 * KiB: 137, 32 * KiB: 1})


def test_cla_model_objects_shrink_by_the_share_factor(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"num_hidden_layers": 64, "hidden_size": 6400, "num_attention_heads": 80,
                                  "num_key_value_heads": 8, "head_dim": 128, "cla_share_factor": 2}))
    manifest = build_manifest(resolve_model("cla", "bf16", config=str(config)), TransferGeometry(), 256, num_chunks=1)
    assert manifest.objects[0].nbytes == 32 * 2 * 8 * 128 * 2 * 256  # 32 KV layers, not 64


def test_tail_commands_round_up_to_the_alignment():
    geometry = TransferGeometry(max_transfer=128 * KiB, align=4096, store_header_bytes=100)
    assert geometry.op_commands(300_000) == Counter({128 * KiB: 2, 40_960: 1})  # 37,856 B tail -> 10 blocks
    assert geometry.op_commands(0) == Counter()
    assert geometry.store_commands(4096) == Counter({4096: 2})  # the 100 B header is one aligned block too
    assert TransferGeometry(max_transfer=512, align=1, store_header_bytes=0).op_commands(1000) == Counter(
        {512: 1, 488: 1})


def test_impossible_transfer_geometry_is_rejected():
    with pytest.raises(SpecError, match="not a multiple of the alignment"):
        TransferGeometry(max_transfer=100_000, align=4096)
    with pytest.raises(SpecError, match="max_transfer >= 1"):
        TransferGeometry(max_transfer=0)


def test_log2_bins():
    assert [size_bin(n) for n in (1, 4096, 4097, 8191, 131_072, 196_608)] == [1, 4096, 4096, 4096, 131_072, 131_072]
    assert log2_histogram(Counter({131_072: 3, 40_960: 1, 32_768: 2})) == Counter({131_072: 3, 32_768: 3})


def test_prompt_is_cut_into_chunks_with_a_short_last_one():
    assert chunk_token_counts(256, tokens=1000) == [256, 256, 256, 232]
    assert chunk_token_counts(256, tokens=512) == [256, 256]
    assert chunk_token_counts(16, num_chunks=3) == [16, 16, 16]
    for kwargs, message in [({}, "either a token count"), ({"tokens": 1, "num_chunks": 1}, "either a token count"),
                            ({"tokens": 0}, "--tokens must be >= 1"), ({"num_chunks": 0}, "--num-chunks")]:
        with pytest.raises(SpecError, match=message):
            chunk_token_counts(256, **kwargs)


def test_tp_objects_per_chunk_and_totals():
    manifest = build_manifest(resolve_model("llama3.1-8b", "bf16", tp=2), TransferGeometry(), 256, tokens=1000)
    assert len(manifest.objects) == 8  # 4 chunks x 2 ranks
    assert [(o.chunk, o.rank, o.tokens) for o in manifest.objects[-2:]] == [(3, 0, 232), (3, 1, 232)]
    summary = summarize(manifest)
    assert [(c["payload_bytes"], c["objects"]) for c in summary["object_classes"]] == [
        (16 * MiB, 6), (232 * 65_536, 2)]
    totals = summary["totals"]
    assert totals["payload_bytes"] == 1000 * 131_072
    assert totals["load_commands"] == 6 * 128 + 2 * 116
    assert totals["store_commands"] == totals["load_commands"] + 8
    assert planned_commands(manifest)["load"] == Counter({128 * KiB: 6 * 128 + 2 * 116})
    assert summary["fragmentation"]["store"]["partial_commands"] == 8  # the headers
    assert summary["fragmentation"]["load"]["fill_ratio"] == 1.0


def test_load_vs_recompute_breakeven_bandwidth():
    manifest = build_manifest(resolve_model("llama3.1-8b", "bf16", tp=2), TransferGeometry(), 256, num_chunks=1)
    (row,) = summarize(manifest, prefill_tokens_per_sec=10_000)["load_vs_recompute"]["classes"]
    assert row["recompute_s"] == pytest.approx(0.0256)
    assert row["breakeven_bytes_per_s"] == pytest.approx(16 * MiB / 0.0256)
    assert row["breakeven_bytes_per_s_all_ranks"] == pytest.approx(2 * 16 * MiB / 0.0256)
    with pytest.raises(SpecError, match="must be > 0"):
        summarize(manifest, prefill_tokens_per_sec=0)


def test_project_cli_json_embeds_a_manifest_and_records_one(tmp_path, capsys):
    record = tmp_path / "kvio_record.json"
    argv = ["project", "--model", "llama3.1-70b", "--tp", "4", "--num-chunks", "2", "--max-transfer", "128KiB",
            "--record", str(record), "--json"]
    assert main(argv) == 0
    output = json.loads(capsys.readouterr().out)
    assert output["format"] == "kvbench-kvio-projection"
    assert output["summary"]["object_classes"][0]["store_commands"] == 161
    recorded = Manifest.read(str(record))
    assert recorded.to_dict() == output["manifest"]
    assert len(recorded.objects) == 8
    assert record.stat().st_size < 4096  # a few KB, no payload


def test_project_cli_table_and_errors(tmp_path, capsys):
    assert main(["project", "--model", "tiny-1b", "--tokens", "300", "--prefill-tokens-per-sec", "5000"]) == 0
    text = capsys.readouterr().out
    assert "command sizes" in text and "load vs recompute" in text
    assert main(["project", "--tokens", "300"]) == 2
    assert "give a model" in capsys.readouterr().err
    assert main(["project", "--model", "tiny-1b", "--tokens", "300", "--max-transfer", "lots"]) == 2
    assert "--max-transfer" in capsys.readouterr().err
    assert main(["project", "--model", "llama3.1-8b", "--tp", "3", "--tokens", "300"]) == 2
    assert "does not divide" in capsys.readouterr().err


def test_the_old_plan_command_writes_the_same_manifest_and_says_it_is_now_project(tmp_path, capsys):
    """``kvbench plan`` runs ``kvbench project`` for one release: the same manifest, byte for byte, the same
    report, and one line on stderr naming the new command; ``project`` itself says nothing."""
    flags = ["--model", "qwen2.5-0.5b", "--tokens", "1000", "--engine", "lmcache-0.5", "--backend", "local_disk"]
    assert main(["project", *flags, "--record", str(tmp_path / "new.json")]) == 0
    new = capsys.readouterr()
    assert main(["plan", *flags, "--record", str(tmp_path / "old.json")]) == 0
    old = capsys.readouterr()
    assert (tmp_path / "old.json").read_bytes() == (tmp_path / "new.json").read_bytes()
    assert len(Manifest.read(str(tmp_path / "new.json")).objects) == 3
    assert new.err == "" and old.err == "kvbench: `plan` is now `project`\n"
    assert old.out.replace("old.json", "new.json") == new.out
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    assert "usage: kvbench project" in capsys.readouterr().out
