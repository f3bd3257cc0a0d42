"""Engine presets for ``kvbench project``: the objects one engine version writes, and how, by its defaults.

A generic projection keeps a partial last chunk and writes a 4 KiB header before every store (the kvio seed's
raw_block figures).  A real engine has its own rules, and a projection that differs from them by one rule
scores 11/12 against that engine's I/O.  A preset holds one version's defaults, each read from its
source (``rules`` names the file and setting), and tests/kvio/test_lmcache_io.py holds them to the engine's
own syscalls: LMCache 0.5.6 run CPU-only, captured with strace, scored exactly.  A flag given with a
preset still wins (a deployment that changed ``chunk_size`` projects with ``--chunk-tokens``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvbench_core.contracts.errors import SpecError
from kvbench_core.kvio.commands import TransferGeometry

#: Linux's MAX_RW_COUNT (INT_MAX & PAGE_MASK): the most one read/write/pread/pwrite moves.  LMCache's
#: local_disk and raw_block (posix engine) issue an object as one call, so this is their largest command.
LINUX_MAX_RW_BYTES = 0x7FFFF000


@dataclass(frozen=True)
class EnginePreset:
    """One engine version and backend's object rules, with where each comes from."""

    engine: str
    backend: str
    chunk_tokens: int
    keep_tail: bool
    geometry: TransferGeometry
    #: MLA KV is the same on every TP rank; an engine that stores it from the first rank only writes one
    #: object per chunk whatever the TP degree
    mla_first_rank_only: bool
    #: raw_block's slot: header + a full chunk, rounded up to this block alignment (None: no slots)
    slot_align: int | None
    #: why the objects' store order is not the prompt's by default (None: it is); ``kvbench score --order``
    #: names it when the object order misses
    store_order_note: str | None
    rules: dict[str, str] = field(default_factory=dict)

    def slot_bytes(self, full_chunk_bytes: int) -> int | None:
        """The slot a full chunk's object takes on the device (raw_block), header included."""
        if self.slot_align is None:
            return None
        used = self.geometry.store_header_bytes + full_chunk_bytes
        return -(-used // self.slot_align) * self.slot_align

    def to_dict(self) -> dict[str, Any]:
        """What a manifest records of the preset: its name, its rules and their sources."""
        return {"name": self.engine, "backend": self.backend, "tail_chunk": "keep" if self.keep_tail else "drop",
                "mla_first_rank_only": self.mla_first_rank_only, "slot_align": self.slot_align,
                "store_order_note": self.store_order_note, "rules": dict(self.rules)}


_LMCACHE = "LMCache 0.5.6, lmcache/v1"
_COMMON_RULES = {
    "chunk_tokens": f"{_LMCACHE}/config.py: chunk_size default 256",
    "tail_chunk": f"{_LMCACHE}/config.py: save_unfull_chunk default False; token_database.py _chunk_tokens "
                  "stops at len(tokens) - len(tokens) % chunk_size, so a partial last chunk is not stored",
    "mla_first_rank_only": f"{_LMCACHE}/cache_engine.py: save_only_first_rank defaults to metadata.use_mla; "
                           "ranks other than the first are passive (_is_passive) and store nothing",
    "max_transfer": "one call per object, so the largest command is Linux's MAX_RW_COUNT (2,147,479,552 B)",
}
LMCACHE_05 = "lmcache-0.5"
PRESETS: dict[tuple[str, str], EnginePreset] = {
    (LMCACHE_05, "local_disk"): EnginePreset(
        engine=LMCACHE_05, backend="local_disk", chunk_tokens=256, keep_tail=False,
        geometry=TransferGeometry(LINUX_MAX_RW_BYTES, align=1, store_header_bytes=0), mla_first_rank_only=True,
        slot_align=None,
        store_order_note="LMCache 0.5 local_disk writes and reads with extra_config disk_io_threads threads "
                         "(default 4), so objects race; their order is the prompt's only with disk_io_threads: 1",
        rules={**_COMMON_RULES,
               "store": f"{_LMCACHE}/storage_backend/local_disk_backend.py write_file: open(path, 'wb').write(buffer), "
                        "one write of the object's bytes into its own file, no header (store_header_bytes 0)",
               "load": "local_disk_backend.py read_file: readinto(buffer), one read of the whole file",
               "align": "buffered I/O (use_odirect default False): no tail rounding (align 1)",
               "store_order": "local_disk_backend.py: _DEFAULT_THREAD_COUNT = 4 (extra_config disk_io_threads)"}),
    (LMCACHE_05, "raw_block"): EnginePreset(
        engine=LMCACHE_05, backend="raw_block", chunk_tokens=256, keep_tail=False,
        geometry=TransferGeometry(LINUX_MAX_RW_BYTES, align=1, store_header_bytes=4096), mla_first_rank_only=True,
        slot_align=4096,
        store_order_note="LMCache 0.5 raw_block (posix engine) stores each object from its own worker thread "
                         "(asyncio.to_thread per key), so objects race, and no setting serialises them",
        rules={**_COMMON_RULES,
               "store": f"{_LMCACHE}/storage_backend/raw_block/core.py _write_one: a header_bytes (default 4096) "
                        "header pwrite at the slot's offset, then one pwrite of the payload at offset + header_bytes",
               "load": "raw_block/core.py load_many_into: one pread of the payload at offset + header_bytes, no header",
               "align": "plugins/rust_raw_block_backend.py: use_odirect default False and io_engine default posix, "
                        "so lengths are not rounded (align 1) and max_data_transfer_size 0 does not split; with "
                        "io_uring_cmd project with --max-transfer (its max_data_transfer_size) and --align 4096",
               "slot": "rust_raw_block_backend.py: slot_bytes = round_up(header_bytes + full chunk bytes, "
                       "block_align 4096): 3,149,824 B for a 3 MiB chunk",
               "store_order": "rust_raw_block_backend.py batched_submit_put_task: one coroutine per key on "
                              "asyncio.to_thread with the posix engine"}),
}
ENGINES = tuple(sorted({engine for engine, _ in PRESETS}))
BACKENDS = tuple(sorted({backend for _, backend in PRESETS}))


def engine_preset(engine: str, backend: str | None) -> EnginePreset:
    """The preset for ``--engine ENGINE --backend BACKEND``; a name it does not know is refused naming the choices."""
    if engine not in ENGINES:
        raise SpecError(f"--engine {engine}: unknown engine; choose one of {', '.join(ENGINES)}")
    backends = sorted(b for e, b in PRESETS if e == engine)
    if backend is None:
        raise SpecError(f"--engine {engine} needs --backend: one of {', '.join(backends)}")
    if backend not in backends:
        raise SpecError(f"--backend {backend}: {engine} has no such backend; choose one of {', '.join(backends)}")
    return PRESETS[(engine, backend)]
