"""A codec in ``kvbench project``: encoded objects need fewer device bytes and commands, and the load-vs-
recompute break-even counts the decode after each load (declared figures, or a run's measured ones)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from kvbench_core.cli import main
from kvbench_core.codecs.codec_projection import CodecProjection
from kvbench_core.contracts.errors import SpecError
from kvbench_core.kvio.commands import TransferGeometry
from kvbench_core.kvio.projection import build_manifest, summarize
from kvbench_core.runspec.geometry import resolve_model

MiB = 1 << 20
MANIFEST = build_manifest(resolve_model("llama3.1-8b", "bf16", tp=2), TransferGeometry(), 256, num_chunks=1)


def test_the_break_even_adds_decode_time_to_the_smaller_read() -> None:
    codec = CodecProjection(ratio=1.5, decode_bytes_per_s=4e9)
    (row,) = summarize(MANIFEST, 10_000, codec)["load_vs_recompute"]["classes"]
    logical, recompute_s = 16 * MiB, 0.0256
    assert row["decode_s"] == pytest.approx(logical / 4e9)
    expected = math.ceil(logical / 1.5) / (recompute_s - logical / 4e9)
    assert row["breakeven_device_bytes_per_s_with_codec"] == pytest.approx(expected)
    assert row["breakeven_device_bytes_per_s_all_ranks_with_codec"] == pytest.approx(2 * expected)
    assert row["breakeven_bytes_per_s"] == pytest.approx(logical / recompute_s)  # the uncoded figure stays


def test_free_decoding_divides_the_needed_bandwidth_by_the_ratio_and_slow_decoding_never_pays() -> None:
    (free,) = summarize(MANIFEST, 10_000, CodecProjection(ratio=2.0))["load_vs_recompute"]["classes"]
    assert free["breakeven_device_bytes_per_s_with_codec"] == pytest.approx(free["breakeven_bytes_per_s"] / 2)
    slow = CodecProjection(ratio=2.0, decode_bytes_per_s=100 * MiB)  # 160 ms to decode a 25.6 ms recompute
    (never,) = summarize(MANIFEST, 10_000, slow)["load_vs_recompute"]["classes"]
    assert never["breakeven_device_bytes_per_s_with_codec"] is None
    parallel = CodecProjection(ratio=2.0, decode_bytes_per_s=100 * MiB, decode_cores=16)
    (split,) = summarize(MANIFEST, 10_000, parallel)["load_vs_recompute"]["classes"]
    assert split["decode_s"] == pytest.approx(never["decode_s"] / 16)


def test_encoded_objects_issue_fewer_commands_and_device_bytes() -> None:
    plain = summarize(MANIFEST)
    coded = summarize(MANIFEST, codec=CodecProjection(ratio=1.38))
    (row,) = coded["object_classes"]
    assert row["encoded_bytes"] == math.ceil(16 * MiB / 1.38)
    assert row["encoded_load_commands"] < row["load_commands"] == plain["object_classes"][0]["load_commands"]
    assert coded["totals"]["encoded_load_device_bytes"] == row["encoded_load_device_bytes"] * 2
    assert "codec" not in plain and coded["codec"]["ratio"] == 1.38


def fake_result(tmp_path: Path, tiers: dict[str, Any]) -> Path:
    path = tmp_path / "result.json"
    path.write_text(json.dumps({"kvbench_result": 2, "metrics": {"tiers": tiers}}))
    return path


def coded_tier(name: str, ratio: float, decode: float) -> dict[str, Any]:
    return {"codec": {"name": name, "ratio": ratio, "decode_bytes_per_s_per_core": decode,
                      "encode_bytes_per_s_per_core": decode / 4}}


def test_project_takes_the_ratio_and_decode_rate_a_run_measured(tmp_path: Path, capsys: Any) -> None:
    result = fake_result(tmp_path, {"dram": {"codec": {"name": "none"}}, "nvme": coded_tier("zstd", 1.25, 2e9)})
    assert main(["project", "--model", "llama3.1-8b", "--num-chunks", "1", "--prefill-tokens-per-sec", "10000",
                 "--codec-from", str(result), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)["summary"]
    assert summary["codec"]["name"] == "zstd" and summary["codec"]["ratio"] == 1.25
    assert summary["codec"]["decode_bytes_per_s"] == 2e9 and "tier nvme" in summary["codec"]["source"]
    assert summary["load_vs_recompute"]["classes"][0]["decode_s"] == pytest.approx(32 * MiB / 2e9)
    assert main(["project", "--model", "tiny-1b", "--tokens", "300", "--prefill-tokens-per-sec", "5000",
                 "--codec-ratio", "1.4", "--codec-decode-bytes-per-sec", "1e6"]) == 0
    text = capsys.readouterr().out
    assert "objects stored encoded" in text and "never: decoding alone is slower" in text


@pytest.mark.parametrize(("extra", "message"), [
    (["--codec-ratio", "0"], "--codec-ratio: expected a ratio > 0"),
    (["--codec-ratio", "1.2", "--codec-decode-bytes-per-sec", "-1"], "--codec-decode-bytes-per-sec"),
    (["--codec-decode-bytes-per-sec", "1e9"], "need a codec"),
    (["--codec-ratio", "1.2", "--codec-decode-cores", "0"], "--codec-decode-cores"),
    (["--codec-from", "{uncoded}"], "ran no tier through a codec"),
    (["--codec-from", "{coded}", "--codec-tier", "hbm"], "has no tier 'hbm'"),
    (["--codec-from", "{coded}", "--codec-tier", "dram"], "ran without a codec"),
    (["--codec-from", "{coded}", "--codec-ratio", "2"], "not both"),
    (["--codec-from", "{missing}"], "result file not found"),
])
def test_bad_codec_flags_are_one_line_naming_the_flag(tmp_path: Path, capsys: Any, extra: list[str],
                                                       message: str) -> None:
    paths = {"uncoded": str(fake_result(tmp_path, {"dram": {"codec": {"name": "none"}}})),
             "missing": str(tmp_path / "nope.json")}
    coded_dir = tmp_path / "coded"
    coded_dir.mkdir()
    paths["coded"] = str(fake_result(coded_dir, {"dram": {"codec": {"name": "none"}},
                                                 "nvme": coded_tier("lz4", 1.1, 1e9)}))
    argv = ["project", "--model", "tiny-1b", "--tokens", "300", *[arg.format(**paths) for arg in extra]]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_a_projection_refuses_nonsense_directly() -> None:
    with pytest.raises(SpecError):
        CodecProjection(ratio=-1)
