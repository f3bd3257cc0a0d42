"""The kvio record manifest and the per-command I/O log: round trips, trace ids, and clear errors."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import pytest

from kvbench_core.contracts.errors import InputFileError, SpecError
from kvbench_core.engine.measure.iolog import IOLog, trace_id_for
from kvbench_core.kvio import manifest as manifest_module
from kvbench_core.kvio.commands import TransferGeometry
from kvbench_core.kvio.manifest import KVObject, Manifest
from kvbench_core.kvio.projection import build_manifest
from kvbench_core.runspec.geometry import resolve_model
from kvbench_core.runspec.jsonfile import write_json


def _manifest() -> Manifest:
    return build_manifest(resolve_model("llama3.1-8b", "bf16", tp=2), TransferGeometry(), 256, tokens=600)


def test_manifest_round_trips_through_a_file(tmp_path):
    original = _manifest()
    path = tmp_path / "record.json"
    original.write(str(path))
    loaded = Manifest.read(str(path))
    assert loaded == original
    assert loaded.trace_ids == {obj.key: trace_id_for(obj.key) for obj in original.objects}
    assert json.loads(path.read_text())["version"] == 1


def test_a_run_can_record_objects_it_knows_only_by_key_and_size(tmp_path):
    manifest = Manifest.from_objects([KVObject("user1_turn_0", 4096), KVObject("user2_turn_0", 8192)],
                                     model={"name": "llama3.1-8b"}, geometry=TransferGeometry())
    manifest.write(str(tmp_path / "m.json"))
    loaded = Manifest.read(str(tmp_path / "m.json"))
    assert [(o.key, o.nbytes, o.tokens) for o in loaded.objects] == [("user1_turn_0", 4096, None),
                                                                      ("user2_turn_0", 8192, None)]


def test_colliding_trace_ids_are_moved_to_the_next_free_one(monkeypatch):
    monkeypatch.setattr(manifest_module, "trace_id_for", lambda key: 0xFFFF_FFFF)
    manifest = Manifest.from_objects([KVObject("a", 1), KVObject("b", 1), KVObject("c", 1)], model={},
                                     geometry=TransferGeometry())
    assert list(manifest.trace_ids.values()) == [0xFFFF_FFFF, 1, 2]  # wraps past the 32-bit maximum, skipping 0
    with pytest.raises(SpecError, match="duplicate KV object key 'a'"):
        Manifest.from_objects([KVObject("a", 1), KVObject("a", 2)], model={}, geometry=TransferGeometry())


def _broken(tmp_path, mutate) -> str:
    data = _manifest().to_dict()
    mutate(data)
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(data))
    return str(path)


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda d: d["objects"][1].__setitem__("bytes", -1), "objects[1].bytes: expected a value >= 0, got -1"),
    (lambda d: d["objects"][0].pop("trace_id"), "objects[0].trace_id: required field is missing"),
    (lambda d: d["objects"][0].__setitem__("key", "../etc"), "objects[0].key: invalid cache key"),
    (lambda d: d["objects"][1].__setitem__("trace_id", d["objects"][0]["trace_id"]), "objects[1].trace_id"),
    (lambda d: d["objects"][1].__setitem__("key", d["objects"][0]["key"]), "objects[1].key: duplicate key"),
    (lambda d: d.__setitem__("version", 2), "version: expected 1, got 2"),
    (lambda d: d.pop("geometry"), "geometry: required field is missing"),
    (lambda d: d["geometry"].__setitem__("align", 3000), "geometry: max transfer 131072 B is not a multiple"),
    (lambda d: d["objects"][0].__setitem__("extra", 1), "objects[0].extra: unknown field"),
])
def test_malformed_manifest_names_the_file_and_field(tmp_path, mutate, message):
    path = _broken(tmp_path, mutate)
    with pytest.raises(InputFileError) as error:
        Manifest.read(path)
    assert re.match(rf"{re.escape(path)}(:1)?: ", str(error.value))  # the line, where the field is (all on 1)
    assert message in str(error.value)


def test_a_manifest_error_names_the_line_of_the_field(tmp_path):
    text = _manifest().to_json()
    lines = text.splitlines()
    bad = next(i for i, line in enumerate(lines) if '"key":' in line and i > 2)  # the second object's line
    lines[bad] = lines[bad].replace('"bytes":', '"bytes":-1,"was":')
    path = tmp_path / "manifest.json"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputFileError) as error:
        Manifest.read(str(path))
    assert str(error.value).startswith(f"{path}:{bad + 1}: objects[")


def test_unreadable_manifests_are_clear(tmp_path):
    with pytest.raises(InputFileError, match="no such manifest file"):
        Manifest.read(str(tmp_path / "missing.json"))
    (tmp_path / "bad.json").write_text('{"format": "kvbench-kvio-manifest",\n')
    with pytest.raises(InputFileError, match="line 2: invalid JSON"):
        Manifest.read(str(tmp_path / "bad.json"))
    # the wrong kind of file, given by mistake: say what it is and where it goes
    (tmp_path / "io.jsonl").write_text('{"trace_id": 1, "op": "write"}\n{"trace_id": 1, "op": "read"}\n')
    with pytest.raises(InputFileError, match=r"not a kvio manifest; an I/O log goes to --measured"):
        Manifest.read(str(tmp_path / "io.jsonl"))
    (tmp_path / "result.json").write_text('{"kvbench_result": 1, "run": {}}')
    with pytest.raises(InputFileError, match="a kvbench result, not a kvio manifest"):
        Manifest.read(str(tmp_path / "result.json"))


@pytest.mark.parametrize("format_id", ["kvbench-kvio-projection", "kvbench-kvio-plan"])
def test_a_projection_json_is_read_through_its_embedded_manifest(tmp_path, format_id):
    """``kvbench project --json`` output, and the same output as ``kvbench plan --json`` wrote it before the
    rename (its old format id), are both read; any other format id is not a projection."""
    manifest = _manifest()
    path = tmp_path / "projection.json"
    path.write_text(json.dumps({"format": format_id, "version": 1, "summary": {}, "manifest": manifest.to_dict()}))
    assert Manifest.read(str(path)) == manifest
    path.write_text(json.dumps({"format": format_id, "manifest": {"format": "kvbench-kvio-manifest"}}))
    with pytest.raises(InputFileError, match=r"manifest\.version: required field is missing"):
        Manifest.read(str(path))
    path.write_text(json.dumps({"format": "kvbench-kvio-forecast", "version": 1, "manifest": manifest.to_dict()}))
    with pytest.raises(InputFileError, match=r"projection\.json:1: model: required field is missing"):
        Manifest.read(str(path))  # read as a bare manifest, which it is not


def test_trace_ids_are_stable_32_bit_and_never_zero():
    ids = {trace_id_for(f"key-{i}") for i in range(2000)}
    assert all(0 < tid < 1 << 32 for tid in ids)
    assert trace_id_for("key-1") == 0x1B9B3CA0  # the same in every process and version: tracers match on it


def test_io_log_writes_one_line_per_command_from_many_threads(tmp_path):
    path = tmp_path / "io.jsonl"
    with IOLog(str(path), {"mapped": 7}) as log:
        def worker(n: int) -> None:
            for i in range(500):
                log.record("mapped" if n == 0 else f"key-{n}", "write", i * 4096, 4096, 1.0, 1.5)
        threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(records) == 4000
    assert {r["trace_id"] for r in records if r["key"] == "mapped"} == {7}
    assert {r["trace_id"] for r in records if r["key"] == "key-3"} == {trace_id_for("key-3")}
    assert records[0].keys() == {"trace_id", "key", "op", "offset", "bytes", "start_s", "end_s"}


def test_a_json_output_never_writes_over_an_existing_file(tmp_path: Path) -> None:

    foreign = tmp_path / "notes.json"
    foreign.write_text("mine")
    link = tmp_path / "link.json"
    link.symlink_to(foreign)
    for target in (foreign, link):
        with pytest.raises(InputFileError, match="already exists; kvbench does not overwrite files"):
            write_json(str(target), {"a": 1}, "report")
    assert foreign.read_text() == "mine"
