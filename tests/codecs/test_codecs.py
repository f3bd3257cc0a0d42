"""KV codecs: exact round trips for every lossless codec on every payload kind, honest ratios, the codec
stage as a tier (conformance suite, demotion, corruption), spec choices and errors, and a vendor codec
registered through the ``kvbench_codecs`` hook."""

from __future__ import annotations

import importlib.util
import itertools
import json
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from testkit import registered
from tiny_spec import assert_valid_result, history_spec, run_cli

from kvbench_core.cli.run_cmd import summarize
from kvbench_core.cli.spec_cmd import DETECTED_AT_RUN, DETECTED_WITH_CODEC, declaration_status, uses_codec
from kvbench_core.codecs.tier import CodecTier
from kvbench_core.contracts.backend import BackendContext, StorageBackend
from kvbench_core.contracts.codec import Codec
from kvbench_core.contracts.conformance import BackendConformance
from kvbench_core.contracts.errors import MissingDependency, SpecError
from kvbench_core.contracts.payload import PAYLOAD_KINDS, ChecksumSink, NoisePool, VerifySink
from kvbench_core.contracts.plugins import hookimpl, registry
from kvbench_core.engine.cache.cache_types import TierSource
from kvbench_core.engine.run.factory import create_backend
from kvbench_core.runspec.codec_choices import codec_choice

pytest.importorskip("cramjam", reason="the codecs extra is not installed (pip install 'kvbench-core[codecs]')")

POOLS = {kind: NoisePool(seed=5, pool_bytes=2 << 20, max_piece=1 << 20, kind=kind) for kind in PAYLOAD_KINDS}
LOSSLESS = sorted(name for name, cls in registry("codec").items() if cls.lossless)
SIZES = [0, 1, 7, 4096, 100_001, 1 << 20, (3 << 20) + 333]
_tier_numbers = itertools.count()


def rendered(pool: NoisePool, key: str, size: int) -> np.ndarray:
    out = np.empty(size, dtype=np.uint8)
    for at in range(0, size, pool.max_piece):
        pool.payload(key, size).fill(at, memoryview(out[at:at + pool.max_piece]))
    return out


def codec_tier(codec: str | dict[str, Any], backend: str = "cpu", options: dict[str, Any] | None = None,
               **choice: Any) -> StorageBackend:
    value = {"name": codec, **choice} if isinstance(codec, str) else codec
    tier = {"name": f"t{next(_tier_numbers)}", "backend": backend, "options": options or {},
            "codec": codec_choice(value)}
    backend_ = create_backend(tier, BackendContext(tier_name=tier["name"], run_id="codectest"), path="tier")
    backend_.open()
    return backend_


def read_back(tier: StorageBackend, key: str, size: int) -> np.ndarray:
    got = np.zeros(size, dtype=np.uint8)

    class Into:
        def consume(self, offset: int, data: memoryview) -> None:
            got[offset:offset + len(data)] = np.frombuffer(data, dtype=np.uint8)

    tier.read(key, size, Into())
    return got


@pytest.mark.parametrize("kind", PAYLOAD_KINDS)
@pytest.mark.parametrize("name", LOSSLESS)
def test_every_lossless_codec_returns_every_payload_kind_exactly(name: str, kind: str) -> None:
    codec = registry("codec")[name]({})
    for size in SIZES[:6]:
        data = rendered(POOLS[kind], f"k{size}", size)
        encoded = np.empty(codec.max_encoded_size(size), dtype=np.uint8)
        written = codec.encode(data, encoded)
        assert written <= codec.max_encoded_size(size)
        decoded = np.full(size, 0xAB, dtype=np.uint8)
        assert codec.decode(encoded[:written], decoded) == size
        assert np.array_equal(decoded, data), f"{name} on {kind}, {size} bytes"


@pytest.mark.parametrize("kind", PAYLOAD_KINDS)
@pytest.mark.parametrize("name", [n for n in LOSSLESS if n != "none"])
def test_the_codec_stage_round_trips_whole_entries_and_ranges(name: str, kind: str) -> None:
    tier = codec_tier(name, chunk=64 << 10, segment=256 << 10)  # several segments and chunks per entry
    assert isinstance(tier, CodecTier)
    try:
        for size in SIZES:
            key = f"e{size}"
            data = rendered(POOLS[kind], key, size)
            timing = tier.write(key, POOLS[kind].payload(key, size))
            assert timing.nbytes == size and timing.physical_bytes is not None
            assert np.array_equal(read_back(tier, key, size), data)
            for offset, length in ((0, min(size, 10)), (size // 3, min(size - size // 3, 70_000)), (size, 0)):
                out = np.empty(length, dtype=np.uint8)
                tier.read_range(key, offset, memoryview(out))
                assert np.array_equal(out, data[offset:offset + length])
    finally:
        tier.close()


@pytest.mark.parametrize("name", [n for n in LOSSLESS if n != "none"])
def test_a_codec_on_incompressible_payload_reports_a_ratio_of_about_one(name: str) -> None:
    tier = codec_tier(name)
    try:
        size = 3 << 20
        timing = tier.write("r", POOLS["random"].payload("r", size))
        ratio = timing.nbytes / timing.physical_bytes
        # Never better than the data allows, and only the chunk table costs anything (raw chunks).
        assert 0.999 < ratio <= 1.0
        assert timing.codec > 0 and timing.host >= timing.codec
    finally:
        tier.close()


def test_synthetic_kv_compresses_and_the_byte_planes_beat_plain_zstd() -> None:
    ratios = {}
    for name in ("zstd", "bf16_planes"):
        tier = codec_tier(name)
        try:
            timing = tier.write("s", POOLS["synthetic_kv"].payload("s", 2 << 20))
            ratios[name] = timing.nbytes / timing.physical_bytes
        finally:
            tier.close()
    assert ratios["zstd"] > 1.1
    assert ratios["bf16_planes"] > ratios["zstd"]


def test_none_puts_no_stage_in_front_of_the_tier() -> None:
    tier = codec_tier("none")
    assert not isinstance(tier, CodecTier)
    tier.close()


def test_demotion_between_tiers_with_the_same_codec_moves_the_encoded_bytes() -> None:
    upper, lower = codec_tier("zstd"), codec_tier("zstd")
    other = codec_tier("lz4")
    try:
        size = (2 << 20) + 5
        data = rendered(POOLS["synthetic_kv"], "d", size)
        stored = upper.write("d", POOLS["synthetic_kv"].payload("d", size))
        source = TierSource(upper, "d", size)
        copied = lower.write("d", source)
        assert copied.codec == 0.0  # nothing decoded or re-encoded
        assert copied.physical_bytes == stored.physical_bytes == upper.stored_bytes("d")
        assert source.read_seconds > 0  # the cache books it as the upper tier's read
        assert np.array_equal(read_back(lower, "d", size), data)
        recoded = other.write("d", TierSource(upper, "d", size))  # another codec: decode, then encode
        assert recoded.codec > 0
        assert np.array_equal(read_back(other, "d", size), data)
    finally:
        for tier in (upper, lower, other):
            tier.close()


def test_a_rewrite_with_fewer_segments_removes_the_old_ones_and_delete_removes_all() -> None:
    tier = codec_tier("zstd", chunk=64 << 10, segment=128 << 10)
    try:
        tier.write("k", POOLS["random"].payload("k", 600 << 10))
        inner = tier.inner
        assert len(inner._entries) == 5
        tier.write("k", POOLS["random"].payload("k", 100 << 10))
        assert list(inner._entries) == ["k"]
        tier.delete("k")
        tier.delete("never-written")
        assert not inner._entries
    finally:
        tier.close()


def corrupt_stored_byte(tier: CodecTier, key: str, at: int) -> None:
    blocks = tier.inner._entries[key]
    flat = np.concatenate([np.asarray(b).reshape(-1) for b in blocks])
    flat[at] ^= 0xFF
    tier.inner.write(key, _Bytes(flat))


class _Bytes:
    def __init__(self, data: np.ndarray) -> None:
        self.data, self.size = data, int(data.shape[0])

    def fill(self, offset: int, out: memoryview) -> None:
        np.frombuffer(out, dtype=np.uint8)[:] = self.data[offset:offset + len(out)]


def test_a_flipped_byte_in_a_raw_chunk_is_caught_by_verify() -> None:
    tier = codec_tier("zstd")
    try:
        size = 1 << 20
        physical = tier.write("v", POOLS["random"].payload("v", size)).physical_bytes
        corrupt_stored_byte(tier, "v", physical - 100)  # inside the (raw) chunk, not the header
        sink = VerifySink(POOLS["random"], "v", np.empty(1 << 20, dtype=np.uint8))
        tier.read("v", size, sink)
        assert sink.mismatches == 1
    finally:
        tier.close()


def test_a_damaged_frame_is_never_good_data_and_a_foreign_header_is_an_error() -> None:
    tier = codec_tier("zstd")
    try:
        size = 1 << 20
        physical = tier.write("z", POOLS["synthetic_kv"].payload("z", size)).physical_bytes
        corrupt_stored_byte(tier, "z", physical // 2)  # inside a compressed frame (zstd keeps no checksum)
        sink = VerifySink(POOLS["synthetic_kv"], "z", np.empty(1 << 20, dtype=np.uint8))
        try:
            tier.read("z", size, sink)
        except OSError as error:  # the frame no longer parses
            assert "'z'" in str(error)
        else:  # it parses, into other bytes: verify sees them
            assert sink.mismatches > 0
        tier.write("h", POOLS["random"].payload("h", 4096))
        corrupt_stored_byte(tier, "h", 5)  # the codec tag
        with pytest.raises(OSError, match="another codec"):
            tier.read("h", 4096, ChecksumSink())
    finally:
        tier.close()


def test_the_stage_reports_codec_time_inside_host_time_and_the_device_bytes() -> None:
    tier = codec_tier("bf16_planes")
    try:
        write = tier.write("t", POOLS["synthetic_kv"].payload("t", 1 << 20))
        read = tier.read("t", 1 << 20, ChecksumSink())
        for timing in (write, read):
            assert 0 < timing.codec <= timing.host <= timing.total
            assert timing.physical_bytes < timing.nbytes == 1 << 20
        assert read.physical_bytes == write.physical_bytes
        assert tier.describe()["codec"]["name"] == "bf16_planes"
    finally:
        tier.close()


class TestZstdStageOverCPUTier(BackendConformance):
    """The codec stage is a tier like any other: the whole vendor conformance suite, through zstd."""

    backend_name = "cpu"

    def make_backend(self, context: BackendContext, tmp_path: Path) -> StorageBackend:
        tier = {"name": f"conformance-zstd{next(_tier_numbers)}", "backend": "cpu", "options": {},
                "codec": codec_choice({"name": "zstd", "chunk": 256 << 10})}
        return create_backend(tier, context, path="tier")


class TestBytePlaneStageOverDirectoryTier(BackendConformance):
    """The same on the nvme (directory) tier, through the BF16 byte-plane codec."""

    backend_name = "nvme"
    backend_options: ClassVar = {"path": "{tmp_path}/cache", "fsync": False, "drop_cache": False}

    def make_backend(self, context: BackendContext, tmp_path: Path) -> StorageBackend:
        tier = {"name": f"conformance-bf16{next(_tier_numbers)}", "backend": "nvme",
                "options": {"path": str(tmp_path / "cache"), "fsync": False, "drop_cache": False},
                "codec": codec_choice("bf16_planes")}
        return create_backend(tier, context, path="tier")


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed (kvbench-core[gpu])")
class TestZstdStageOverGPUTierOnCPUDevice(BackendConformance):
    """The gpu tier's logic (torch's CPU device) behind a codec: the stage hides its tensor path."""

    backend_name = "gpu"

    def make_backend(self, context: BackendContext, tmp_path: Path) -> StorageBackend:
        tier = {"name": f"conformance-gpu{next(_tier_numbers)}", "backend": "gpu", "options": {"device": "cpu"},
                "codec": codec_choice({"name": "zstd", "chunk": 512 << 10})}
        backend = create_backend(tier, context, path="tier")
        assert not backend.holds_device_tensors  # a demotion must not copy encoded bytes as if they were KV
        return backend


# -- a vendor's codec, registered from outside the core --------------------------------------------------
class VendorZlibCodec(Codec):
    """A vendor's codec as a plugin would ship it: zlib at a level (a copy out of zlib's bytes: a toy)."""

    name = "vendor_zlib"
    options_schema: ClassVar = {"type": "object", "additionalProperties": False,
                                "properties": {"level": {"type": "integer", "minimum": 1, "maximum": 9}}}

    def max_encoded_size(self, nbytes: int) -> int:
        return nbytes + nbytes // 1000 + 64

    def encode(self, data: np.ndarray, out: np.ndarray) -> int:
        packed = zlib.compress(data, self.options.get("level", 6))
        out[: len(packed)] = np.frombuffer(packed, dtype=np.uint8)
        return len(packed)

    def decode(self, data: np.ndarray, out: np.ndarray) -> int:
        unpacked = zlib.decompress(data)
        out[: len(unpacked)] = np.frombuffer(unpacked, dtype=np.uint8)
        return len(unpacked)


class NeedsMissingLibrary(VendorZlibCodec):
    name = "needs-missing"
    requires: ClassVar = {"kvbench_no_such_module": "pip install kvbench-no-such-codec"}


class VendorCodecs:
    @hookimpl
    def kvbench_codecs(self) -> dict[str, type]:
        return {"vendor_zlib": VendorZlibCodec, "needs-missing": NeedsMissingLibrary}


@pytest.fixture
def vendor_codecs() -> Iterator[None]:
    with registered(VendorCodecs(), "test-vendor-codecs"):
        yield


def codec_run_spec(tmp_path: Path, codec: Any, **top: Any) -> dict[str, Any]:
    """A 1 s DRAM -> directory run of synthetic KV through ``codec`` on both tiers, verify on."""
    spec = history_spec([{"name": "nvme", "backend": "nvme", "capacity": "64MiB",
                          "options": {"path": str(tmp_path / "cache"), "fsync": False, "drop_cache": False}}],
                        payload="synthetic_kv", verify=True,
                        output={"directory": str(tmp_path / "out"), "progress": "off"})
    spec["cache"]["codec"] = codec
    spec.update(top)
    return spec


def run_result(tmp_path: Path, spec: dict[str, Any]) -> dict[str, Any]:
    code, _out, err = run_cli(tmp_path, spec)
    assert code == 0, err
    (path,) = (tmp_path / "out").glob("*.json")
    return json.loads(path.read_text())


def test_a_vendor_codec_from_a_plugin_runs_a_whole_verified_run(vendor_codecs: None, tmp_path: Path) -> None:
    result = run_result(tmp_path, codec_run_spec(tmp_path, {"name": "vendor_zlib", "options": {"level": 1}}))
    metrics = result["metrics"]
    assert metrics["verify"]["bytes_verified"] > 0 and metrics["verify"]["integrity_errors"] == 0
    for tier in metrics["tiers"].values():
        codec = tier["codec"]
        assert codec["name"] == "vendor_zlib"
        assert codec["ratio"] == round(tier["write"]["bytes"] / tier["write"]["physical_bytes"], 4)
        assert codec["ratio"] > 1.05  # synthetic KV is compressible
    assert result["declaration"]["tensor"]["codec"]["value"] == "vendor_zlib"


def test_verify_through_the_built_in_codecs_finds_nothing_wrong_and_fills_the_declaration(tmp_path: Path) -> None:
    spec = codec_run_spec(tmp_path, "bf16_planes")
    spec["cache"]["tiers"][0]["codec"] = {"name": "zstd", "options": {"level": 1}}  # a tier's own codec wins
    result = run_result(tmp_path, spec)
    assert_valid_result(result)
    metrics = result["metrics"]
    assert metrics["verify"]["bytes_verified"] > 0 and metrics["verify"]["integrity_errors"] == 0
    tiers = metrics["tiers"]
    assert tiers["dram"]["codec"]["name"] == "zstd" and tiers["nvme"]["codec"]["name"] == "bf16_planes"
    for tier in tiers.values():
        codec = tier["codec"]
        assert codec["physical_bytes_written"] < codec["logical_bytes_written"] == tier["write"]["bytes"]
        assert codec["encode_bytes_per_s_per_core"] > 0
        assert tier["write"]["latency_ms"]["codec"]["count"] > 0
    tensor = {name: field["value"] for name, field in result["declaration"]["tensor"].items()}
    assert tensor["codec"] == "bf16_planes, zstd" and tensor["lossless"] is True
    assert tensor["overlapped"] is False and "cramjam" in tensor["codec_version"]
    assert tensor["compression_ratio"] > 1
    detected = {f"{section}.{name}" for section, fields in result["declaration"].items()
                for name, field in fields.items() if field["source"] == "detected"}
    summary = summarize(result)  # the printed summary says the same as the JSON
    assert f"codec bf16_planes: ratio {tiers['nvme']['codec']['ratio']:.3f}" in summary
    assert f"codec zstd: ratio {tiers['dram']['codec']['ratio']:.3f}" in summary
    promised = {name for name, state in declaration_status({}, coded=uses_codec(spec)).items()
                if state == "detected at run"}  # what `kvbench spec declare` tells the user
    tensor = {name for name in detected | promised if name.startswith("tensor.")}
    assert {name for name in detected if name in tensor} == {name for name in promised if name in tensor}
    assert tensor >= DETECTED_WITH_CODEC and not DETECTED_WITH_CODEC & DETECTED_AT_RUN


def test_without_a_codec_every_tier_reports_logical_equal_to_physical(tmp_path: Path) -> None:
    spec = codec_run_spec(tmp_path, None, verify=False)
    del spec["cache"]["codec"]
    result = run_result(tmp_path, spec)
    for tier in result["metrics"]["tiers"].values():
        assert tier["codec"]["name"] == "none" and tier["codec"]["ratio"] in (1.0, None)
        assert tier["write"]["physical_bytes"] == tier["write"]["bytes"]
    assert result["declaration"]["tensor"]["codec"]["value"] == "none"
    assert not uses_codec(spec)
    assert "codec " not in summarize(result)
    assert not uses_codec({"cache": {"codec": "zstd", "tiers": [{"name": "a", "codec": "none"}]}})
    assert uses_codec({"cache": {"codec": "zstd", "tiers": [{"name": "a", "codec": "none"}, {"name": "b"}]}})


@pytest.mark.parametrize(("codec", "message"), [
    ("brotli-9000", "cache.codec: unknown codec 'brotli-9000'"),
    ({"name": "zstd", "options": {"level": 99}}, "cache.codec.options.level"),
    ({"name": "zstd", "chunk": "1MiB", "segment": "1536KiB"}, "cache.codec.segment: must be a multiple of chunk"),
    ({"name": "zstd", "chunk": "128MiB"}, "cache.codec.chunk"),
])
def test_a_bad_codec_choice_is_one_line_naming_the_field(tmp_path: Path, codec: Any, message: str) -> None:
    code, _out, err = run_cli(tmp_path, codec_run_spec(tmp_path, codec))
    assert code == 2
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "cache").exists() and not (tmp_path / "out").exists()


def test_a_codec_whose_library_is_missing_names_what_to_install(vendor_codecs: None) -> None:
    tier = {"name": "t", "backend": "cpu", "options": {}, "codec": codec_choice("needs-missing")}
    with pytest.raises(MissingDependency, match="pip install kvbench-no-such-codec"):
        create_backend(tier, BackendContext(tier_name="t", run_id="x"), path="cache.tiers[0]")


def test_a_payload_kind_outside_the_list_is_refused(tmp_path: Path) -> None:
    code, _out, err = run_cli(tmp_path, codec_run_spec(tmp_path, "zstd", payload="zeros"))
    assert code == 2 and "payload" in err


def test_codec_plugins_are_listed_with_what_they_provide(vendor_codecs: None) -> None:
    assert {"none", "zstd", "lz4", "bf16_planes", "vendor_zlib"} <= set(registry("codec"))
    with pytest.raises(SpecError):
        from kvbench_core.contracts.plugins import lookup
        lookup("codec", "nope", path="cache.codec")


def test_the_stage_holds_one_segment_per_worker_not_the_entry(tmp_path: Path) -> None:
    """A 96 MiB entry through an 8 MiB segment: Python-side memory peaks near one encoded segment."""
    import tracemalloc

    tier = codec_tier("lz4", backend="nvme", segment="8MiB",
                      options={"path": str(tmp_path / "cache"), "fsync": False, "drop_cache": False})
    try:
        tracemalloc.start()
        try:
            tier.write("big", POOLS["random"].payload("big", 96 << 20))
            tier.read("big", 96 << 20, ChecksumSink())
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 3 * (8 << 20)  # one encoded segment, one chunk, the inner tier's own buffers
        assert len(list((tmp_path / "cache").rglob("*kvc*"))) == 11  # segments 1..11 beside segment 0
    finally:
        tier.close()


def test_a_tier_codec_wins_over_the_cache_codec_and_sizes_resolve(tmp_path: Path) -> None:
    import yaml

    from kvbench_core.runspec.loader import load_spec

    spec = codec_run_spec(tmp_path, {"name": "zstd", "chunk": "256KiB", "segment": "1MiB"})
    spec["cache"]["tiers"][0]["codec"] = "none"
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    _, resolved = load_spec(path)
    dram, nvme = resolved["cache"]["tiers"]
    assert dram["codec"]["name"] == "none"
    assert nvme["codec"] == {"name": "zstd", "options": {}, "chunk": 256 << 10, "segment": 1 << 20}
    _, overridden = load_spec(path, ["cache.codec=lz4"])
    assert overridden["cache"]["tiers"][1]["codec"]["name"] == "lz4"
    assert overridden["payload"] == "synthetic_kv"


@pytest.mark.slow
def test_a_multi_client_result_merges_physical_bytes_and_recomputes_the_codec_figures(tmp_path: Path) -> None:
    spec = codec_run_spec(tmp_path, "zstd", clients=2, verify=False)
    result = run_result(tmp_path, spec)
    assert len(result["clients"]) == 2
    for tier in result["metrics"]["tiers"].values():
        codec, write = tier["codec"], tier["write"]
        assert codec["physical_bytes_written"] == write["physical_bytes"] < write["bytes"]
        assert codec["ratio"] == round(write["bytes"] / write["physical_bytes"], 4)
    assert result["declaration"]["tensor"]["compression_ratio"]["value"] > 1


def test_lz4_levels_are_honoured_as_the_lz4_library_means_them() -> None:
    """0-2 are LZ4's fast mode (one output), 3..12 HC: each HC level shrinks compressible bytes further
    than fast mode, and 12 no less than 9 (before, cramjam's block call ignored the level: level 9's
    output was byte-identical to level 0's)."""
    lz4 = registry("codec")["lz4"]
    rng = np.random.default_rng(3)
    words = np.frombuffer(b"key value cache token attention layer head ", dtype=np.uint8)
    data = np.ascontiguousarray(words[rng.integers(0, words.shape[0], 1 << 20) // 4 * 4])  # runs of 4 bytes

    def encoded(level: int) -> bytes:
        codec = lz4({"level": level})
        out = np.empty(codec.max_encoded_size(data.shape[0]), dtype=np.uint8)
        written = codec.encode(data, out)
        back = np.empty(data.shape[0], dtype=np.uint8)
        assert codec.decode(out[:written], back) == data.shape[0] and np.array_equal(back, data)
        return bytes(out[:written])

    fast = {level: encoded(level) for level in (0, 1, 2)}
    assert fast[0] == fast[1] == fast[2]
    hc3, hc9, hc12 = encoded(3), encoded(9), encoded(12)
    assert len(hc3) < len(fast[0]) and len(hc9) < len(fast[0])
    assert len(hc12) <= len(hc9) and hc9 != hc3
