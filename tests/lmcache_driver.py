"""Drive LMCache's own standalone engine (mock GPU connector, CPU only): store a prompt, load it back.

Run as a script, under strace, by tests/kvio/test_lmcache_io.py: ``python lmcache_driver.py SCENARIOS OUT``.
SCENARIOS is a JSON list; each scenario names a backend (``local_disk`` or ``raw_block``), the store's
path (a directory, or the file raw_block uses as its device), the KV shape a serving engine would hand
LMCache for the model (layers, kv_dim 2 or 1 for MLA, kv heads, head size) and a prompt length, and
optionally LMCache settings to change (``save_unfull_chunk``, ``disk_io_threads``).  Every other setting
is LMCache's default, which is what the presets claim to follow.

The engine's I/O is what strace sees.  This script reports only what strace cannot: which chunk of the
prompt each stored object is, by the engine's own token database (the key of each chunk, in prompt order)
and the engine's own placement of that key (local_disk's file, raw_block's slot offset).  OUT gets one
JSON object per scenario.  Nothing else is measured here.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

# LMCache sends anonymous usage telemetry to its project's server unless told not to; a test talks to
# nothing but this machine.  Both opt-outs, before LMCache is imported (usage_telemetry/identity.py).
os.environ["LMCACHE_TRACK_USAGE"] = "false"
os.environ["DO_NOT_TRACK"] = "1"

import torch
from lmcache.v1.config import LMCacheEngineConfig
from lmcache.v1.metadata import LMCacheMetadata
from lmcache.v1.standalone.__main__ import LayerGroupSpec, LMCacheStandaloneStarter

RAW_BLOCK_PLUGIN = "rust_raw_block"
RAW_BLOCK_MODULE = "lmcache.v1.storage_backend.plugins.rust_raw_block_backend"
#: a prompt's stores are asynchronous: how long to wait for every chunk to be on the store before loading
STORE_WAIT_S = 60.0


def engine_config(scenario: dict[str, Any]) -> LMCacheEngineConfig:
    """LMCache defaults, but for the store's path, no CPU tier holding the chunks (so loads come from the
    store), a small CPU buffer pool and the scenario's own changes."""
    settings: dict[str, Any] = {"local_cpu": False, "max_local_cpu_size": 0.25}
    extra: dict[str, Any] = {}
    if "save_unfull_chunk" in scenario:
        settings["save_unfull_chunk"] = scenario["save_unfull_chunk"]
    if "disk_io_threads" in scenario:
        extra["disk_io_threads"] = scenario["disk_io_threads"]
    if scenario["backend"] == "local_disk":
        settings.update(local_disk=scenario["path"], max_local_disk_size=1.0)
    else:
        # No periodic index checkpoint, so the capture holds the stores, the loads and the one on close.
        extra.update({f"storage_plugin.{RAW_BLOCK_PLUGIN}.module_path": RAW_BLOCK_MODULE,
                      f"storage_plugin.{RAW_BLOCK_PLUGIN}.class_name": "RustRawBlockBackend",
                      "rust_raw_block.device_path": scenario["path"],
                      "rust_raw_block.capacity_bytes": scenario["capacity_bytes"],
                      "rust_raw_block.meta_enable_periodic": False})
        settings["storage_plugins"] = [RAW_BLOCK_PLUGIN]
    if extra:
        settings["extra_config"] = extra
    return LMCacheEngineConfig.from_defaults(**settings)


def start(scenario: dict[str, Any]) -> LMCacheStandaloneStarter:
    shape = (scenario["layers"], scenario["kv_dim"], scenario["chunk_tokens"], scenario["kv_heads"],
             scenario["head_size"])
    dtype = getattr(torch, scenario["dtype"])
    metadata = LMCacheMetadata(model_name=scenario["name"], world_size=1, local_world_size=1, worker_id=0,
                               local_worker_id=0, kv_dtype=dtype, kv_shape=shape,
                               use_mla=scenario["kv_dim"] == 1, role="worker")
    # The starter fills one tensor of the layer group's shape per layer as the "GPU" KV; the mock connector
    # never reads them and the chunks' size comes from ``kv_shape``, so one element per layer will do
    # (DeepSeek-V3's real shape would be 61 tensors of 18 MB each, a gigabyte of noise per start).
    starter = LMCacheStandaloneStarter(engine_config(scenario), metadata,
                                       [LayerGroupSpec(scenario["layers"], (1,), dtype)], "cpu")
    engine = starter.start()
    # The standalone starter's broadcast functions refuse every call, and an MLA load (which LMCache
    # stores from the first rank only) broadcasts what it loaded to the other ranks.  In a world of one
    # rank there is no other rank: sending to none is the broadcast.
    engine.broadcast_fn = engine.broadcast_object_fn = broadcast_to_no_other_rank
    return starter


def broadcast_to_no_other_rank(value: Any, source_rank: int) -> None:
    """A one-rank world's broadcast: nothing to send, nothing to receive."""


def backend_of(engine: Any, backend: str) -> Any:
    backends = engine.storage_manager.storage_backends
    return backends["LocalDiskBackend" if backend == "local_disk" else RAW_BLOCK_PLUGIN]


def placement(store: Any, backend: str, key: Any) -> dict[str, Any]:
    """Where the engine put a chunk's object: its file (local_disk) or its slot offset (raw_block)."""
    if backend == "local_disk":
        return {"path": store._key_to_path(key)}  # the backend's own naming of a key's file
    return {"offset": store.entry_offset(key)}


def wait_stored(store: Any, keys: list[Any]) -> bool:
    deadline = time.monotonic() + STORE_WAIT_S
    while time.monotonic() < deadline:
        if all(store.contains(key) and not store.exists_in_put_tasks(key) for key in keys):
            return True
        time.sleep(0.05)
    return False


def run(scenario: dict[str, Any]) -> dict[str, Any]:
    starter = start(scenario)
    try:
        engine = starter.lmcache_engine
        tokens = torch.arange(scenario["tokens"])
        slots = torch.arange(scenario["tokens"])
        chunks = [(start, end, key) for start, end, key in engine.token_database.process_tokens(tokens)]
        engine.store(tokens, kvcaches=starter.kv_caches, slot_mapping=slots)
        store = backend_of(engine, scenario["backend"])
        stored = wait_stored(store, [key for _, _, key in chunks])
        retrieved = engine.retrieve(tokens, kvcaches=starter.kv_caches, slot_mapping=slots)
        report: dict[str, Any] = {
            "name": scenario["name"], "stored": stored, "retrieved_tokens": int(retrieved.sum()),
            "chunks": [{"chunk": index, "start": start, "end": end, **placement(store, scenario["backend"], key)}
                       for index, (start, end, key) in enumerate(chunks)]}
        if scenario["backend"] == "raw_block":
            report.update(slot_bytes=store.slot_bytes, header_bytes=store.header_bytes,
                          data_base_offset=store.data_base_offset)
        return report
    finally:
        starter.stop()


def main(scenarios_path: str, out_path: str) -> int:
    with open(scenarios_path, encoding="utf-8") as handle:
        scenarios = json.load(handle)
    reports = [run(scenario) for scenario in scenarios]
    with open(out_path, "w", encoding="utf-8") as handle:
        json.dump(reports, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
