"""``kvbench project --engine lmcache-0.5`` against LMCache 0.5.6's own I/O: exact, on both backends.

LMCache's standalone engine (its mock GPU connector, CPU only, tests/lmcache_driver.py) stores a prompt
through its real local_disk and raw_block backends and loads it back, under strace.  The capture becomes
a kvbench I/O log (tests/lmcache_strace.py) and ``kvbench score`` must pass with its default, exact gate
(exact-match 100 %, WAPE 0, TV 0, offsets) against the preset's projection: GQA and MLA models, prompts that
end in a partial chunk (LMCache drops it by default, keeps it with save_unfull_chunk), and --order where
the engine serialises its stores (local_disk with one disk thread).  A planted change to a preset rule
must fail the same score.  Skipped, with the reason, where LMCache (`pip install -e '.[lmcache]'` after
torch) or strace is missing.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from lmcache_strace import Objects, strace_command, write_io_log

from kvbench_core.cli import main
from kvbench_core.kvio.manifest import Manifest
from kvbench_core.kvio.presets import LMCACHE_05, PRESETS
from kvbench_core.runspec.geometry import catalog_model

HERE = Path(__file__).resolve().parents[1]
MISSING = [name for name in ("torch", "lmcache", "lmcache_rust_raw_block_io") if importlib.util.find_spec(name) is None]
pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(600),  # the first test starts LMCache under strace: half a minute here, more on a busy machine
    pytest.mark.skipif(bool(MISSING), reason=f"LMCache is not installed ({', '.join(MISSING)} missing): "
                                             "pip install -e '.[lmcache]' after torch (Makefile test-venv)"),
    pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed "
                                                              "(scripts/install-system-deps.sh)"),
]
CAPACITY = 1 << 30  # raw_block's device file: 128 MiB index region + the slots
GQA, MLA = "llama3.2-1b", "deepseek-v3"


@dataclass(frozen=True)
class Scenario:
    """One engine run and the projection that must score it exactly."""

    name: str
    backend: str
    model: str
    tokens: int
    settings: dict[str, Any] = field(default_factory=dict)  # LMCache settings changed from its defaults
    projection_flags: tuple[str, ...] = ()  # the same change, told to the projection
    order: bool = False


SCENARIOS = [
    Scenario("gqa-local-disk", "local_disk", GQA, 1000),
    Scenario("mla-local-disk", "local_disk", MLA, 600),
    Scenario("gqa-raw-block", "raw_block", GQA, 1000),
    Scenario("mla-raw-block", "raw_block", MLA, 600),
    Scenario("gqa-local-disk-one-thread", "local_disk", GQA, 1000, {"disk_io_threads": 1}, order=True),
    Scenario("gqa-raw-block-unfull", "raw_block", GQA, 1000, {"save_unfull_chunk": True}, ("--tail-chunk", "keep")),
]
BY_NAME = {scenario.name: scenario for scenario in SCENARIOS}


def engine_shape(model: str) -> dict[str, Any]:
    """The KV layout a serving engine hands LMCache for the model: (layers, 2, tokens, kv heads, head
    size), or for MLA one latent of kv_lora_rank + qk_rope_head_dim per token and layer."""
    geometry = catalog_model(model)
    if geometry.kv_lora_rank:
        return {"layers": geometry.layers, "kv_dim": 1, "kv_heads": 1,
                "head_size": geometry.kv_lora_rank + geometry.qk_rope_head_dim}
    head_size = geometry.head_dim or geometry.hidden_size // geometry.attention_heads
    return {"layers": geometry.layers, "kv_dim": 2, "kv_heads": geometry.kv_heads, "head_size": head_size}


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every scenario run once by one LMCache process under strace (one start-up of torch and LMCache)."""
    work = tmp_path_factory.mktemp("lmcache")
    scenarios = []
    for scenario in SCENARIOS:
        store = work / scenario.name
        if scenario.backend == "local_disk":
            store.mkdir()
        else:
            with open(store, "wb") as device:
                device.truncate(CAPACITY)
        scenarios.append({"name": scenario.name, "backend": scenario.backend, "path": str(store),
                          "capacity_bytes": CAPACITY, "tokens": scenario.tokens, "chunk_tokens": 256,
                          "dtype": "bfloat16", **engine_shape(scenario.model), **scenario.settings})
    (work / "scenarios.json").write_text(json.dumps(scenarios))
    trace = work / "strace.txt"
    command = [*strace_command(trace), sys.executable, str(HERE / "lmcache_driver.py"),
               str(work / "scenarios.json"), str(work / "placements.json")]
    quiet = {**os.environ, "LMCACHE_TRACK_USAGE": "false", "DO_NOT_TRACK": "1"}  # no telemetry leaves the machine
    done = subprocess.run(command, capture_output=True, text=True, timeout=540, cwd=work, env=quiet)
    if "PTRACE" in done.stderr.upper() and "not permitted" in done.stderr:
        pytest.skip(f"strace cannot trace here: {done.stderr.strip().splitlines()[-1]}")
    assert done.returncode == 0, done.stderr[-4000:]
    placements = {report["name"]: report for report in json.loads((work / "placements.json").read_text())}
    return {"work": work, "trace": trace, "placements": placements}


def objects_of(manifest: Manifest, report: dict[str, Any], store: Path) -> Objects:
    """The engine's chunk -> placement, joined to the projection's chunk -> trace id.  A chunk the engine
    stored that the projection lacks gets a trace id of its own, so its bytes count against it (unattributed)."""
    by_chunk = {obj.chunk: (manifest.trace_ids[obj.key], obj.key) for obj in manifest.objects}
    spare = max(manifest.trace_ids.values(), default=0) + 1
    objects = Objects(device=str(store) if report.get("slot_bytes") else None)
    for placed in report["chunks"]:
        owner = by_chunk.get(placed["chunk"]) or (spare + placed["chunk"], f"unplanned-{placed['chunk']}")
        if "path" in placed:
            objects.files[placed["path"]] = owner
        else:
            objects.slots.append((placed["offset"], placed["offset"] + report["slot_bytes"], *owner))
    objects.slots.sort()
    return objects


def project_and_score(capture: dict[str, Any], scenario: Scenario, tag: str = "") -> tuple[int, dict[str, Any]]:
    """``kvbench project --engine lmcache-0.5`` for the scenario, its capture as an I/O log, ``kvbench score``."""
    work, report = capture["work"], capture["placements"][scenario.name]
    manifest_path, io_log, score = (work / f"{scenario.name}{tag}.{ext}" for ext in ("projection.json", "io.jsonl",
                                                                                      "score.json"))
    assert main(["project", "--model", scenario.model, "--tokens", str(scenario.tokens), "--engine", LMCACHE_05,
                 "--backend", scenario.backend, *scenario.projection_flags, "--record", str(manifest_path)]) == 0
    manifest = Manifest.read(str(manifest_path))
    write_io_log(capture["trace"], objects_of(manifest, report, work / scenario.name), io_log)
    code = main(["score", "--projection", str(manifest_path), "--measured", str(io_log), "--offsets",
                 *(["--order"] if scenario.order else []), "--json", str(score)])
    return code, json.loads(score.read_text())


def projected_slot(capture: dict[str, Any], scenario: Scenario, tag: str) -> int | None:
    """The device slot per object the preset's projection says (raw_block), from the recorded projection."""
    manifest_path = capture["work"] / f"{scenario.name}{tag}.slot.projection.json"
    assert main(["project", "--model", scenario.model, "--tokens", str(scenario.tokens), "--engine", LMCACHE_05,
                 "--backend", scenario.backend, *scenario.projection_flags, "--record", str(manifest_path)]) == 0
    return Manifest.read(str(manifest_path)).engine.get("slot_bytes")


@pytest.mark.parametrize("name", [scenario.name for scenario in SCENARIOS])
def test_the_presets_projection_scores_lmcaches_own_io_exactly(capture: dict[str, Any], name: str) -> None:
    scenario = BY_NAME[name]
    report = capture["placements"][name]
    assert report["stored"], "LMCache did not finish storing the prompt"
    stored_tokens = report["chunks"][-1]["end"] if report["chunks"] else 0
    assert report["retrieved_tokens"] == stored_tokens > 0  # every stored chunk was loaded back
    code, score = project_and_score(capture, scenario)
    assert code == 0, score["gate"]["missed"]
    assert score["objects"] == len(report["chunks"])
    assert score["ops_scored"] == ["store", "load"] and not score["ops_missing"]
    assert score["exact_match"]["matched"] == score["exact_match"]["total"] == 2 * len(report["chunks"])
    assert score["wape"] == 0 and score["tv_distance"] == 0 and score["unattributed"]["commands"] == 0
    assert all(check["matched"] == check["total"] for name, check in score["offsets"].items() if name != "examples")
    if scenario.order:
        assert not any(info["inversions"] for info in score["order"]["objects"].values())
    # the score places raw_block's commands by the slots LMCache reports; the projection's slot rule must agree
    assert projected_slot(capture, scenario, "") == report.get("slot_bytes")


def _tail_kept(preset: Any) -> Any:
    return replace(preset, keep_tail=True)


def _header_flipped(preset: Any) -> Any:
    header = 0 if preset.geometry.store_header_bytes else 4096
    return replace(preset, geometry=replace(preset.geometry, store_header_bytes=header))


@pytest.mark.parametrize(("name", "planted", "missed"), [
    ("gqa-local-disk", _tail_kept, "exact-match"), ("mla-raw-block", _tail_kept, "exact-match"),
    ("gqa-raw-block", _header_flipped, "store"), ("mla-local-disk", _header_flipped, "store"),
])
def test_a_planted_change_to_a_preset_rule_fails_the_score(capture: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
                                                           name: str, planted: Any, missed: str) -> None:
    scenario = BY_NAME[name]
    key = (LMCACHE_05, scenario.backend)
    monkeypatch.setitem(PRESETS, key, planted(PRESETS[key]))
    code, score = project_and_score(capture, scenario, tag=f".{planted.__name__}")
    assert code == 1 and not score["gate"]["passed"]
    assert any(missed in line for line in score["gate"]["missed"]), score["gate"]["missed"]
    assert score["exact_match"]["matched"] < score["exact_match"]["total"]


def _slot_misaligned(preset: Any) -> Any:
    return replace(preset, slot_align=8192)


@pytest.mark.parametrize("name", ["gqa-raw-block", "mla-raw-block"])
def test_a_planted_change_to_the_slot_rule_misses_the_engines_slot(capture: dict[str, Any],
                                                                  monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """The score cannot see a wrong slot size (commands are placed by LMCache's own slots), so the
    projection's slot is compared with the engine's: a planted slot alignment must not pass (review R1 of issue #34)."""
    scenario = BY_NAME[name]
    key = (LMCACHE_05, scenario.backend)
    monkeypatch.setitem(PRESETS, key, _slot_misaligned(PRESETS[key]))
    assert projected_slot(capture, scenario, ".slot_misaligned") != capture["placements"][name]["slot_bytes"]
