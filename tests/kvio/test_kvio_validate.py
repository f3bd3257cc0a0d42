"""kvio validation: exact-match, WAPE and size-distribution TV over a trace joined by trace_id, for
kvbench's own I/O log and the eBPF NVMe tracer's JSONL."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from kvbench_core.cli import main
from kvbench_core.contracts.errors import InputFileError
from kvbench_core.engine.measure.iolog import IOLog
from kvbench_core.kvio.commands import TransferGeometry
from kvbench_core.kvio.manifest import Manifest
from kvbench_core.kvio.projection import build_manifest
from kvbench_core.kvio.semantic import read_semantic
from kvbench_core.kvio.validate import read_trace, tv_distance, validate, validate_expected
from kvbench_core.runspec.geometry import resolve_model

KiB = 1 << 10


@pytest.fixture
def manifest() -> Manifest:
    # tiny-1b fp16, 64-token chunks: 1.5 MiB objects = 12 x 128 KiB commands, 4 KiB store header
    return build_manifest(resolve_model("tiny-1b"), TransferGeometry(), 64, num_chunks=4)


def _log(path, manifest: Manifest, split=None) -> str:
    """Write the I/O log a faithful tier would; ``split(op, commands)`` may rewrite one object's commands."""
    with IOLog(str(path), manifest.trace_ids) as log:
        for index, obj in enumerate(manifest.objects):
            for op, name in (("store", "write"), ("load", "read")):
                sizes = sorted(manifest.geometry.commands(op, obj.nbytes).elements())
                if split and index == 0:
                    sizes = split(op, sizes)
                offset = 0
                for size in sizes:
                    log.record(obj.key, name, offset, size, 0.0, 0.001)
                    offset += size
    return str(path)


def test_identical_trace_scores_perfectly(tmp_path, manifest):
    report = validate(manifest, read_trace(_log(tmp_path / "io.jsonl", manifest)))
    assert report["exact_match"] == {"matched": 8, "total": 8, "fraction": 1.0}
    assert report["size_match"]["fraction"] == 1.0
    assert report["wape"] == 0.0
    assert report["tv_distance"] == 0.0
    assert report["by_op"]["store"]["commands"] == {"planned": 4 * 13, "measured": 4 * 13}
    assert report["mismatches"] == []


def test_a_wrong_split_keeps_volume_but_shows_in_the_size_distribution(tmp_path, manifest):
    def mis_split(op, sizes):  # two 128 KiB commands issued as 64 KiB + 192 KiB: same count, same bytes
        return [64 * KiB, 192 * KiB, *sizes[2:]] if op == "load" else sizes

    report = validate(manifest, read_trace(_log(tmp_path / "io.jsonl", manifest, mis_split)))
    assert report["wape"] == 0.0
    assert report["exact_match"]["fraction"] == 1.0  # count and bytes still agree
    assert report["size_match"]["matched"] == 7
    assert report["tv_distance"] > 0
    assert report["by_op"]["store"]["tv_distance"] == 0.0
    assert report["mismatches"][0]["op"] == "load"


def test_missing_commands_raise_wape_and_break_exact_match(tmp_path, manifest):
    report = validate(manifest, read_trace(_log(tmp_path / "io.jsonl", manifest,
                                                lambda op, sizes: sizes[:-1] if op == "store" else sizes)))
    assert report["exact_match"]["matched"] == 7
    assert report["wape"] == pytest.approx(128 * KiB / (8 * 12 * 128 * KiB + 4 * 4 * KiB - 128 * KiB))


def test_unknown_trace_ids_count_as_mispredicted_and_untagged_are_ignored(tmp_path, manifest):
    path = _log(tmp_path / "io.jsonl", manifest)
    with open(path, "a") as handle:
        handle.write(json.dumps({"trace_id": 99, "op": "read", "offset": 0, "bytes": 4096}) + "\n")
        handle.write(json.dumps({"trace_id": 0, "op": "read", "offset": 0, "bytes": 4096}) + "\n")
    report = validate(manifest, read_trace(path))
    assert report["unattributed"] == {"trace_ids": 1, "commands": 1, "bytes": 4096}
    assert report["untagged_commands"] == 1
    assert report["wape"] > 0
    assert report["exact_match"]["fraction"] == 1.0


def _tracer_lines(manifest: Manifest, lba: int = 512) -> list[str]:
    """The eBPF nvme_uring_cmd_monitor's JSONL for a faithful capture (submissions and completions)."""
    lines, counter = [], 0
    for obj in manifest.objects:
        trace_id = manifest.trace_ids[obj.key]
        for op, opcode in (("store", 1), ("load", 2)):
            for size in sorted(manifest.geometry.commands(op, obj.nbytes).elements()):
                counter += 1
                user_data = trace_id << 32 | counter
                lines.append(json.dumps({"event_type": "nvme_cmd", "pid": 1, "nvme_opcode": opcode,
                                         "op_name": "write" if opcode == 1 else "read", "slba": 0,
                                         "nlb": size // lba, "bytes": size, "data_len": size,
                                         "user_data": user_data, "ts": counter}))
                lines.append(json.dumps({"event_type": "nvme_cmp", "user_data": user_data, "ts": counter + 1}))
    return lines


def test_nvme_tracer_jsonl_is_joined_by_the_high_32_bits_of_user_data(tmp_path, manifest):
    lines = _tracer_lines(manifest)
    lines.append(json.dumps({"event_type": "nvme_cmd", "op_name": "flush", "user_data": 0, "nlb": 1}))
    lines.append(json.dumps({"event_type": "nvme_cmd", "op_name": "write", "user_data": 5, "bytes": 4096}))
    lines.append(json.dumps({"op": "store", "trace_id": 1, "bytes": 100, "slot_offset": 0, "ts": 1.0}))
    path = tmp_path / "nvme.jsonl"
    path.write_text("\n".join(lines) + '\n{"event_type": "nvme_cmd", "user_da')  # capture cut mid-line
    report = validate(manifest, read_trace(str(path)))
    assert report["exact_match"]["fraction"] == 1.0
    assert (report["wape"], report["tv_distance"]) == (0.0, 0.0)
    assert report["untagged_commands"] == 1  # user_data 5 >> 32 == 0
    assert report["truncated_last_line"] is True
    assert report["skipped_lines"] == len(lines) // 2 - 1 + 2  # completions, the flush, the semantic record


def test_tracer_bytes_can_be_recomputed_from_nlb_and_hex_user_data_is_read(tmp_path, manifest):
    records = [json.loads(line) for line in _tracer_lines(manifest, lba=4096) if "nvme_cmd" in line]
    for record in records:
        record["bytes"] = record["nlb"] * 512  # captured with the wrong --lba-size
        record["user_data"] = hex(record["user_data"])
        del record["op_name"]
    path = tmp_path / "nvme.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert validate(manifest, read_trace(str(path)))["wape"] > 0
    fixed = validate(manifest, read_trace(str(path), nlb_bytes=4096))
    assert (fixed["exact_match"]["fraction"], fixed["wape"]) == (1.0, 0.0)


def test_a_zero_block_size_is_refused(tmp_path, manifest):
    from kvbench_core.contracts.errors import SpecError

    with pytest.raises(SpecError, match="--nlb-bytes: expected the capture's logical block size"):
        read_trace(_log(tmp_path / "io.jsonl", manifest), nlb_bytes=0)


def test_a_load_only_capture_scores_loads_only(tmp_path, manifest):
    lines = [line for line in _tracer_lines(manifest) if '"op_name": "read"' in line]
    path = tmp_path / "loads.jsonl"
    path.write_text("\n".join(lines) + "\n")
    report = validate(manifest, read_trace(str(path)))
    assert report["ops_scored"] == ["load"]
    assert report["exact_match"] == {"matched": 4, "total": 4, "fraction": 1.0}


def _semantic(path: str) -> Any:
    return read_semantic(path, TransferGeometry())


@pytest.mark.parametrize(("reader", "content", "message"), [
    (read_trace, '{"trace_id": 1, "op": "read", "offset": 0}\n{}\n', "line 1: field 'bytes' is missing"),
    (read_trace, 'not json\n{"a": 1}\n', "line 1: invalid JSON"),
    (read_trace, '{"event_type": "nvme_cmd", "op_name": "read", "bytes": 4096}\n',
     "line 1: field 'user_data' is missing"),
    (read_trace, '{"trace_id": 1, "op": "trim", "offset": 0, "bytes": 1}\n', "field 'op' must be write or read"),
    (read_trace, '[1, 2]\n', "line 1: expected a JSON object"),
    # LMCache's semantic trace
    (_semantic, '{"trace_id": 1, "op": "store", "bytes": -1}\n',
     "line 1: bytes must be a non-negative integer, got -1"),
    (_semantic, '{"trace_id": "x1", "op": "store", "bytes": 4}\n', "line 1: trace_id must be an integer, got 'x1'"),
    (_semantic, '{"op": "load", "bytes": 4}\n', "line 1: trace_id must be a positive integer, got None"),
    (_semantic, "{nope\n", "line 1: invalid JSON"),
    (_semantic, '{"event": "clock"}\n', "no semantic store/load records"),
])
def test_malformed_inputs_name_the_line_and_field(tmp_path, reader, content, message):
    path = tmp_path / "trace.jsonl"
    path.write_text(content)
    with pytest.raises(InputFileError, match=re.escape(message)):
        reader(str(path))


def test_a_trace_without_tagged_commands_cannot_be_scored(tmp_path, manifest):
    path = tmp_path / "empty.jsonl"
    path.write_text(json.dumps({"event_type": "nvme_cmp", "user_data": 1}) + "\n")
    with pytest.raises(InputFileError, match="no tagged store or load commands"):
        validate(manifest, read_trace(str(path)))
    with pytest.raises(InputFileError, match="no such I/O log"):
        read_trace(str(tmp_path / "missing.jsonl"))


def test_a_trace_of_another_projection_is_refused_not_scored(tmp_path, manifest):
    """Every trace id unknown (the projection of another model or seed): a 0-score report would hide the mistake."""
    other = build_manifest(resolve_model("llama3.1-8b"), TransferGeometry(), 64, num_chunks=2)
    trace = read_trace(_log(tmp_path / "other.jsonl", other))
    with pytest.raises(InputFileError, match=r"none of the I/O log's 2 trace ids is in the projection"):
        validate(manifest, trace)


def test_tv_distance():
    assert tv_distance(Counter({1: 2}), Counter({1: 5})) == 0.0
    assert tv_distance(Counter({1: 1, 2: 1}), Counter({2: 2})) == 0.5
    assert tv_distance(Counter(), Counter({1: 1})) == 1.0


def test_validate_cli_prints_and_writes_json(tmp_path, capsys, manifest):
    manifest.write(str(tmp_path / "m.json"))
    trace = _log(tmp_path / "io.jsonl", manifest)
    out = tmp_path / "report.json"
    assert main(["score", "--projection", str(tmp_path / "m.json"), "--measured", trace, "--json", str(out)]) == 0
    assert "exact-match 8/8, WAPE 0.0000%, per-cmd size 8/8, size-dist TV 0.0000" in capsys.readouterr().out
    assert json.loads(out.read_text())["exact_match"]["fraction"] == 1.0


# -- against LMCache's semantic trace (the seed's step 3) ------------------------------------------------


def _semantic_lines(manifest: Manifest) -> list[str]:
    """LMCache's LMCACHE_KVIO_TRACE records for the manifest's objects: a store and a load each."""
    lines = []
    for index, obj in enumerate(manifest.objects):
        part = "k" if index % 2 == 0 else "v"
        for op in ("store", "load"):
            lines.append(json.dumps({"trace_id": manifest.trace_ids[obj.key], "op": op, "bytes": obj.nbytes,
                                     "part": part, "object_id": obj.key,
                                     "components": {part: obj.nbytes - 64, "scale": 64}}))
    return lines


def test_a_faithful_capture_matches_the_semantic_trace_per_kv_part(tmp_path, capsys, manifest):
    semantic, measured = tmp_path / "sem.jsonl", tmp_path / "nvme.jsonl"
    semantic.write_text("\n".join([json.dumps({"event": "clock", "ts": 1}), *_semantic_lines(manifest)]) + "\n")
    measured.write_text("\n".join(_tracer_lines(manifest)) + "\n")
    out = tmp_path / "report.json"
    assert main(["score", "--semantic", str(semantic), "--measured", str(measured), "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "exact-match 8/8, WAPE 0.0000%" in printed and "part k: exact-match 4/4" in printed
    report = json.loads(out.read_text())
    assert set(report["by_part"]) == {"k", "v"} and report["by_part"]["v"]["wape"] == 0.0
    stored = sum(obj.nbytes for obj in manifest.objects)
    assert report["components_bytes"] == {"k": stored // 2 - 128, "v": stored // 2 - 128, "scale": 4 * 64}


def test_a_semantic_store_the_wire_split_differently_is_caught(tmp_path, manifest):
    semantic = tmp_path / "sem.jsonl"
    semantic.write_text("\n".join(_semantic_lines(manifest)) + "\n")
    measured = tmp_path / "nvme.jsonl"
    measured.write_text("\n".join(_tracer_lines(manifest)) + "\n")
    # validated with a 64 KiB transfer geometry: same bytes, twice the commands, half the size
    trace = read_semantic(str(semantic), TransferGeometry(max_transfer=64 * KiB))
    report = validate_expected(trace.expected, read_trace(str(measured)), source="semantic trace")
    assert report["exact_match"]["fraction"] == 0.0 and report["tv_distance"] > 0.5


# -- gating, the seed's spellings, K/V records, separate ops, offsets and order (issue 17) ----------------


def _cli(tmp_path, *args):
    out = tmp_path / "gate.json"
    out.unlink(missing_ok=True)  # --json writes a new file only
    code = main(["score", *args, "--json", str(out)])
    return code, json.loads(out.read_text())


def test_validate_exits_1_when_a_threshold_is_missed_and_the_thresholds_relax(tmp_path, capsys, manifest):
    manifest.write(str(tmp_path / "m.json"))
    trace = _log(tmp_path / "io.jsonl", manifest, lambda op, sizes: sizes[:-1] if op == "store" else sizes)
    code, report = _cli(tmp_path, "--projection", str(tmp_path / "m.json"), "--measured", trace)
    assert code == 1 and report["gate"]["passed"] is False
    assert any(line.startswith("store: exact-match 75.00% < 100.00%") for line in report["gate"]["missed"])
    assert "FAIL store: exact-match" in capsys.readouterr().out
    assert _cli(tmp_path, "--projection", str(tmp_path / "m.json"), "--measured", trace,
                "--min-exact", "75", "--max-wape", "5", "--max-tv", "0.05")[0] == 0


def test_the_seeds_command_line_on_a_512_byte_capture_validates_exactly(tmp_path, manifest):
    """``kvio_validate.py --tracer … --semantic … --lba-bytes 4096 --mdts-bytes 131072``: the seed's
    --lba-bytes is raw_block's block_align.  It used to recompute the tracer's bytes as nlb × 4096, which
    on a 512-byte capture gave exact-match 0 and WAPE 87.5 %."""
    semantic, measured = tmp_path / "sem.jsonl", tmp_path / "nvme.jsonl"
    semantic.write_text("\n".join(_semantic_lines(manifest)) + "\n")
    measured.write_text("\n".join(_tracer_lines(manifest, lba=512)) + "\n")
    code, report = _cli(tmp_path, "--tracer", str(measured), "--semantic", str(semantic),
                        "--lba-bytes", "4096", "--mdts-bytes", "131072", "--store-header-bytes", "4096")
    assert code == 0
    assert report["exact_match"] == {"matched": 8, "total": 8, "fraction": 1.0} and report["wape"] == 0.0


def test_a_projection_refuses_geometry_flags_that_contradict_it(tmp_path, capsys, manifest):
    manifest.write(str(tmp_path / "m.json"))
    trace = _log(tmp_path / "io.jsonl", manifest)
    assert main(["score", "--projection", str(tmp_path / "m.json"), "--measured", trace, "--lba-bytes", "512"]) == 2
    assert "--align 512: the projection was made with align 4096" in capsys.readouterr().err


def test_separate_k_and_v_records_sharing_a_trace_id_are_attributed_to_each_part(tmp_path, manifest):
    """One object stored as a K record and a V record with the object's trace id: all bytes used to be
    credited to V (the last record's part)."""
    half = {obj.key: obj.nbytes // 2 for obj in manifest.objects}
    lines = [json.dumps({"trace_id": manifest.trace_ids[obj.key], "op": op, "bytes": half[obj.key], "part": part,
                         "object_id": obj.key})
             for obj in manifest.objects for op in ("store", "load") for part in ("k", "v")]
    semantic = tmp_path / "sem.jsonl"
    semantic.write_text("\n".join(lines) + "\n")
    geometry = TransferGeometry(store_header_bytes=0)
    expected = read_semantic(str(semantic), geometry).expected
    with IOLog(str(tmp_path / "io.jsonl"), manifest.trace_ids) as log:
        for obj in manifest.objects:
            for op, name in (("store", "write"), ("load", "read")):
                offset = 0
                for _ in ("k", "v"):
                    for size in sorted(geometry.commands(op, half[obj.key]).elements()):
                        log.record(obj.key, name, offset, size, 0.0, 0.0)
                        offset += size
    report = validate_expected(expected, read_trace(str(tmp_path / "io.jsonl")), source="semantic trace")
    assert report["exact_match"]["fraction"] == 1.0
    part_bytes = {part: scores["bytes"]["measured"] for part, scores in report["by_part"].items()}
    assert part_bytes == {"k": sum(half.values()) * 2, "v": sum(half.values()) * 2}  # store + load each
    assert report["by_part"]["k"]["exact_match"]["fraction"] == report["by_part"]["v"]["exact_match"]["fraction"] == 1.0


def test_a_capture_that_lost_its_stores_fails_unless_it_is_declared_load_only(tmp_path, capsys, manifest):
    manifest.write(str(tmp_path / "m.json"))
    lines = [line for line in _tracer_lines(manifest) if '"op_name": "read"' in line]
    path = tmp_path / "loads.jsonl"
    path.write_text("\n".join(lines) + "\n")
    code, report = _cli(tmp_path, "--projection", str(tmp_path / "m.json"), "--measured", str(path))
    assert code == 1 and report["ops_missing"] == ["store"]
    assert "stores: planned for 4 objects, none in the I/O log" in report["gate"]["missed"][0]
    assert "store: none in the I/O log" in capsys.readouterr().out
    assert _cli(tmp_path, "--projection", str(tmp_path / "m.json"), "--measured", str(path), "--ops", "load")[0] == 0
    declared_both = _cli(tmp_path, "--projection", str(tmp_path / "m.json"), "--measured", str(path),
                         "--ops", "store,load")
    assert declared_both[0] == 1 and declared_both[1]["by_op"]["store"]["exact_match"]["matched"] == 0


def test_offsets_and_order_are_checked_on_request(tmp_path, manifest):
    manifest.write(str(tmp_path / "m.json"))
    good = _log(tmp_path / "io.jsonl", manifest)
    assert _cli(tmp_path, "--projection", str(tmp_path / "m.json"), "--measured", good, "--offsets",
                "--order")[0] == 0
    records = [json.loads(line) for line in Path(good).read_text().splitlines()]
    records[1]["offset"] += 4096  # a gap in object 0's store
    loads = [r for r in records if r["op"] == "read"]
    reordered = [r for r in records if r["op"] == "write"] + loads[12:] + loads[:12]  # object 0 loaded last
    shuffled = tmp_path / "shuffled.jsonl"
    shuffled.write_text("".join(json.dumps(r) + "\n" for r in reordered))
    plain = _cli(tmp_path, "--projection", str(tmp_path / "m.json"), "--measured", str(shuffled))
    assert plain[0] == 0  # sizes alone cannot see either
    code, report = _cli(tmp_path, "--projection", str(tmp_path / "m.json"), "--measured", str(shuffled),
                        "--offsets", "--order")
    assert code == 1
    assert report["offsets"]["contiguous"]["matched"] == 7
    assert report["order"]["objects"]["load"]["inversions"] == 1
    assert report["order"]["objects"]["load"]["first_out_of_order"] == manifest.objects[0].key


def test_the_io_log_records_what_the_syscall_returned_and_validates_the_length_asked(tmp_path, manifest):
    """On a 512-byte-sector device an O_DIRECT tail read returns 23,552 B of a 24,576 B request: the log
    says both and the alignment; validation scores the command issued (the requested length)."""
    with IOLog(str(tmp_path / "io.jsonl"), {"k": 7}) as log:
        log.record("k", "read", 0, 23552, 0.0, 0.001, 24576, 4096)
        log.record("k", "read", 24576, 4096, 0.0, 0.001)
    first, second = (json.loads(line) for line in (tmp_path / "io.jsonl").read_text().splitlines())
    assert (first["bytes"], first["requested"], first["align"]) == (23552, 24576, 4096)
    assert "requested" not in second
    assert read_trace(str(tmp_path / "io.jsonl")).commands[(7, "load")] == Counter({24576: 1, 4096: 1})


def test_a_runs_command_recorder_forwards_the_request_and_alignment(tmp_path):
    """A run's tiers log through the engine's per-tier recorder: it must pass the request fields on."""
    from types import SimpleNamespace

    from kvbench_core.engine.measure.cancel import CommandRecorder

    telemetry = SimpleNamespace(measuring=False, record_command_outside=lambda *args: None)
    with IOLog(str(tmp_path / "io.jsonl"), {"k": 7}) as log:
        CommandRecorder("nvme", telemetry, io_log=log).record("k", "read", 0, 23552, 0.0, 0.001, 24576, 4096)
    (line,) = (tmp_path / "io.jsonl").read_text().splitlines()
    assert (json.loads(line)["bytes"], json.loads(line)["requested"]) == (23552, 24576)


def test_the_old_spellings_score_the_same_and_each_says_what_it_is_now(tmp_path, capsys, manifest):
    """``kvbench validate``, ``--plan`` and ``--check-offsets``/``--check-order`` still work for one release
    (docs/cli.md): the same report as ``kvbench score --projection --offsets --order``, after one line per old
    spelling."""
    manifest.write(str(tmp_path / "m.json"))
    args = [str(tmp_path / "m.json"), "--measured", _log(tmp_path / "io.jsonl", manifest)]
    assert main(["score", "--projection", *args, "--offsets", "--order", "--json", str(tmp_path / "new.json")]) == 0
    new = capsys.readouterr()
    assert "kvbench: `" not in new.err
    assert main(["validate", "--plan", *args, "--check-offsets", "--check-order",
                 "--json", str(tmp_path / "old.json")]) == 0
    old = capsys.readouterr()
    assert old.err.splitlines() == ["kvbench: `validate` is now `score`",
                                    "kvbench: `score --plan` is now `score --projection`",
                                    "kvbench: `score --check-offsets` is now `score --offsets`",
                                    "kvbench: `score --check-order` is now `score --order`"]
    assert old.out == new.out
    old_report, new_report = (json.loads((tmp_path / name).read_text()) for name in ("old.json", "new.json"))
    assert old_report == new_report and new_report["offsets"] and new_report["order"]


def test_a_kvbench_replay_of_a_projection_with_a_store_header_gets_the_hint_that_explains_it(tmp_path, capsys):
    """A new user's first project -> replay -> score: the default projection expects LMCache's 4 KiB header write
    before each store, kvbench's tiers write none, and six thresholds fail; score says why and what to do."""
    pytest.importorskip("kvbench_nvme")
    projected, log = tmp_path / "m.json", tmp_path / "io.jsonl"
    assert main(["project", "--model", "qwen2.5-0.5b", "--tokens", "1024", "--record", str(projected)]) == 0
    tier = f"{{backend: nvme, options: {{path: {tmp_path / 'tier'}, fsync: false}}}}"
    assert main(["replay", str(projected), "--tier", tier, "--io-log", str(log)]) == 0
    capsys.readouterr()
    assert main(["score", "--projection", str(projected), "--measured", str(log)]) == 1
    assert ("hint: every mismatching store is exactly the projection's 4096 B header command short"
            in capsys.readouterr().out)
    header_free = tmp_path / "m0.json"
    assert main(["project", "--model", "qwen2.5-0.5b", "--tokens", "1024", "--store-header-bytes", "0",
                 "--record", str(header_free)]) == 0
    log.unlink()
    assert main(["replay", str(header_free), "--tier", tier, "--io-log", str(log)]) == 0
    capsys.readouterr()
    assert main(["score", "--projection", str(header_free), "--measured", str(log)]) == 0
    assert "hint:" not in capsys.readouterr().out
