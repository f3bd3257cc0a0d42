"""The nixl tier's data path on real files and a real S3-protocol server: bytes, pieces, accounting, memory."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from kvbench_nixl.library import Agent
from nixl_helpers import OpenBackend, bucket_keys, needs_nixl

from kvbench_core.contracts.backend import DISCARD
from kvbench_core.contracts.payload import NoisePool
from kvbench_core.engine.measure.iolog import IOLog

pytestmark = needs_nixl
KIB64 = 64 << 10


@pytest.fixture(params=["POSIX", pytest.param("OBJ", marks=pytest.mark.s3)])
def options(request: pytest.FixtureRequest) -> dict[str, Any]:
    """Both storage kinds; OBJ starts (once) moto's server."""
    return request.getfixturevalue("posix_options" if request.param == "POSIX" else "obj_options")


def test_multi_piece_entries_read_back_exactly_in_transfer_size_commands(
        open_backend: OpenBackend, verify: Any, pool: NoisePool, options: dict[str, Any]) -> None:
    backend = open_backend(options)
    for size in (1, 4096, KIB64, 9 * KIB64 + 17):  # 9 pieces + a tail: three requests of queue_depth 4
        written = backend.write(f"e{size}", pool.payload(f"e{size}", size))
        pieces = -(-size // KIB64)
        assert (written.nbytes, written.commands) == (size, pieces)
        verify(backend, f"e{size}", size)
        read = backend.read(f"e{size}", size, DISCARD)
        assert read.commands == pieces
        for timing in (written, read):
            assert timing.host >= 0 and timing.device > 0 and timing.host + timing.device <= timing.total


def test_read_range_crosses_piece_boundaries(open_backend: OpenBackend, pool: NoisePool,
                                             options: dict[str, Any]) -> None:
    backend = open_backend(options)
    size = 5 * KIB64 + 3
    backend.write("rr", pool.payload("rr", size))
    expected = bytearray(size)
    pool.payload("rr", size).fill(0, memoryview(expected))
    for offset, length in ((0, 1), (KIB64 - 5, 10), (3, 4 * KIB64 + 7), (size - 2, 2)):
        out = bytearray(length)
        backend.read_range("rr", offset, memoryview(out))
        assert out == expected[offset:offset + length]


@pytest.mark.parametrize("agents", ["separate", "shared"])
def test_payload_memory_is_registered_once_at_open(open_backend: OpenBackend, pool: NoisePool,
                                                   options: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
                                                   agents: str) -> None:
    registered: list[str] = []
    real = Agent.register

    def spy(self: Agent, descriptors: list[Any], memory: str) -> Any:
        registered.append(memory)
        return real(self, descriptors, memory)

    monkeypatch.setattr(Agent, "register", spy)
    backend = open_backend({**options, "agents": agents}, concurrency=3)
    lanes = backend.lanes
    assert len(lanes.agents) == (3 if agents == "separate" else 1)
    assert registered.count("DRAM") == len(lanes.agents)  # one region per agent
    assert lanes.nbytes == 3 * 4 * KIB64  # concurrency slots x queue_depth pieces, whatever the entries
    for n in range(6):
        backend.write(f"k{n}", pool.payload(f"k{n}", 3 * KIB64 + n))
        backend.read(f"k{n}", 3 * KIB64 + n, DISCARD)
    assert registered.count("DRAM") == len(lanes.agents)  # no per-operation registration of payload memory
    storage = "FILE" if options["nixl_backend"] == "POSIX" else "OBJ"
    assert registered.count(storage) >= 12  # where the bytes go is NIXL bookkeeping per operation


def test_io_log_records_every_piece(open_backend: OpenBackend, pool: NoisePool, tmp_path: Path,
                                    posix_options: dict[str, Any]) -> None:
    from kvbench_nixl.backend import NixlBackend

    from kvbench_core.contracts.backend import BackendContext

    log = IOLog(tmp_path / "io.jsonl")
    backend = NixlBackend(posix_options, BackendContext(tier_name="nixl0", run_id="logged", io_log=log))
    backend.open()
    try:
        backend.write("a", pool.payload("a", 2 * KIB64 + 1))
        backend.read("a", 2 * KIB64 + 1, DISCARD)
    finally:
        backend.close()
        log.close()
    records = [json.loads(line) for line in (tmp_path / "io.jsonl").read_text().splitlines()]
    mine = [(r["op"], r["offset"], r["bytes"]) for r in records if r.get("key") == "a"]
    pieces = [(0, KIB64), (KIB64, KIB64), (2 * KIB64, 1)]
    assert mine == [("write", o, n) for o, n in pieces] + [("read", o, n) for o, n in pieces]


def test_files_follow_the_directory_rules_and_are_removed_at_close(open_backend: OpenBackend, pool: NoisePool,
                                                                   tmp_path: Path,
                                                                   posix_options: dict[str, Any]) -> None:
    backend = open_backend(posix_options, run_id="r1")
    backend.write("x", pool.payload("x", 1000))
    names = sorted(os.listdir(tmp_path / "tier"))
    assert ".kvbench-owner" in names  # the nvme tier's TierDirectory: marked as kvbench's
    assert [name for name in names if not name.startswith(".")] == ["r1-x.kv"]
    assert os.path.getsize(tmp_path / "tier" / "r1-x.kv") == 1000
    backend.close()
    assert not (tmp_path / "tier").exists()


def test_a_foreign_non_empty_directory_is_refused_and_kept(open_backend: OpenBackend, tmp_path: Path,
                                                           posix_options: dict[str, Any]) -> None:
    from kvbench_core.contracts.errors import BackendUnavailable

    (tmp_path / "tier").mkdir()
    (tmp_path / "tier" / "precious.dat").write_text("user data")
    with pytest.raises(BackendUnavailable, match="not empty"):
        open_backend(posix_options)
    assert (tmp_path / "tier" / "precious.dat").read_text() == "user data"


@pytest.mark.s3
def test_objects_are_pieces_under_the_run_prefix_and_go_at_close(open_backend: OpenBackend, pool: NoisePool,
                                                                  obj_options: dict[str, Any]) -> None:
    backend = open_backend(obj_options, run_id="r2")
    backend.write("big", pool.payload("big", 2 * KIB64 + 5))
    backend.write("small", pool.payload("small", 10))
    endpoint, bucket = obj_options["endpoint_url"], obj_options["bucket"]
    assert sorted(bucket_keys(endpoint, bucket)) == [
        "kvbench/r2/big.p0", "kvbench/r2/big.p1", "kvbench/r2/big.p2", "kvbench/r2/small.p0"]
    backend.write("big", pool.payload("big", 10))  # overwrite with fewer pieces drops the surplus objects
    assert sorted(bucket_keys(endpoint, bucket)) == ["kvbench/r2/big.p0", "kvbench/r2/small.p0"]
    backend.delete("small")
    assert bucket_keys(endpoint, bucket) == ["kvbench/r2/big.p0"]
    backend.close()
    assert bucket_keys(endpoint, bucket) == []


@pytest.mark.s3
def test_reading_a_missing_object_entry_is_an_error(open_backend: OpenBackend, obj_options: dict[str, Any]) -> None:
    backend = open_backend(obj_options)
    with pytest.raises(FileNotFoundError):
        backend.read("never-written", 10, DISCARD)


def test_describe_names_nixl_its_version_backend_and_parameters(open_backend: OpenBackend,
                                                                posix_options: dict[str, Any]) -> None:
    import importlib.metadata

    info = open_backend({**posix_options, "params": {"use_aio": True}}).describe()
    assert info["access_mechanism"].startswith("NIXL POSIX")
    assert info["nixl_version"] == importlib.metadata.version("nixl-cu12")
    assert info["driver_layer"].startswith(f"NIXL {info['nixl_version']} ")
    assert info["nixl_params"] == {"use_aio": "true"}
    assert info["io_queue"] == "libaio" and "(io queue: libaio)" in info["access_mechanism"]
    assert (info["queue_depth"], info["transfer_size"], info["registered_bytes"]) == (4, KIB64, 2 * 4 * KIB64)
    json.dumps(info)


@pytest.mark.s3
def test_obj_describe_says_nixl_obj_and_holds_no_credentials(open_backend: OpenBackend, obj_options: dict[str, Any],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDNIXLTESTMARKER")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "nixl-secret-marker-0123456789")
    backend = open_backend(obj_options)
    assert backend.lanes.agents[0].agent.get_backend_params("OBJ")["secret_key"] == "nixl-secret-marker-0123456789"
    info = backend.describe()
    assert info["access_mechanism"].startswith("NIXL OBJ")
    assert info["nixl_params"]["endpoint_override"] == obj_options["endpoint_url"]
    assert info["nixl_params"]["use_virtual_addressing"] == "false"
    assert info["nixl_params"]["num_threads"] == "4"  # queue_depth requests per agent, not half the cores
    text = json.dumps(info)
    assert "nixl-secret-marker" not in text and "AKIDNIXLTESTMARKER" not in text


def test_descriptor_counter_is_the_sum_of_the_operations_commands(open_backend: OpenBackend, pool: NoisePool,
                                                                  options: dict[str, Any]) -> None:
    backend = open_backend(options)
    before = backend.counters()["nixl_descriptors"]
    assert before > 0  # the open probe went through NIXL too
    written = backend.write("c", pool.payload("c", 6 * KIB64 + 1))
    read = backend.read("c", 6 * KIB64 + 1, DISCARD)
    backend.read_range("c", KIB64 - 1, memoryview(bytearray(2)))  # crosses a piece boundary: 2 descriptors
    assert backend.counters()["nixl_descriptors"] - before == written.commands + read.commands + 2


def test_plugins_check_passes_on_real_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kvbench_core.cli import main

    options = json.dumps({"nixl_backend": "POSIX", "path": str(tmp_path / "tier"), "transfer_size": "64KiB"})
    code = main(["plugins", "--conformance", "nixl", "--options", options, "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0, report
    assert {check["status"] for check in report["checks"]} <= {"pass", "skip"}
    assert not (tmp_path / "tier").exists()
