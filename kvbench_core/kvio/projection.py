"""Project a model's KV-offload I/O: objects, device commands and their sizes, with no I/O at all.

Storage I/O geometry is content-independent: how many commands a KV store or
load produces, and how big each is, depends only on the object size and the
transfer geometry.  So real model geometry plus a chunk size fully determines
the command stream.  A prompt of ``T`` tokens is cut into ``chunk_tokens``
chunks (LMCache's unit of storage); a shorter last chunk is kept by default,
as LMCache does with ``save_unfull_chunk: true``, and dropped with
``keep_tail=False``, as LMCache 0.5 does by default (kvio/presets.py holds
each engine's rules).  Under tensor parallelism each chunk becomes one object
per rank, holding that rank's share of the KV.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from kvbench_core.codecs.codec_projection import CodecProjection
from kvbench_core.contracts.errors import SpecError
from kvbench_core.kvio.commands import OPS, TransferGeometry, log2_histogram, total_bytes
from kvbench_core.kvio.manifest import KVObject, Manifest
from kvbench_core.kvio.presets import EnginePreset
from kvbench_core.runspec.geometry import ResolvedModel

DEFAULT_CHUNK_TOKENS = 256  # LMCache's default chunk size


def object_key(model_name: str, chunk: int, rank: int) -> str:
    """A deterministic, path-safe key: the same projection always names its objects the same way."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", model_name).strip("._-") or "model"
    return f"kvio-{slug}-c{chunk:06d}-r{rank}"


def chunk_token_counts(chunk_tokens: int, *, tokens: int | None = None, num_chunks: int | None = None,
                       keep_tail: bool = True) -> list[int]:
    """Tokens in each stored chunk, from a prompt length or a number of full chunks (exactly one is given);
    a partial last chunk is stored only with ``keep_tail``."""
    if chunk_tokens < 1:
        raise SpecError(f"--chunk-tokens must be >= 1, got {chunk_tokens}")
    if (tokens is None) == (num_chunks is None):
        raise SpecError("give either a token count (--tokens) or a number of chunks (--num-chunks)")
    if num_chunks is not None:
        if num_chunks < 1:
            raise SpecError(f"--num-chunks must be >= 1, got {num_chunks}")
        return [chunk_tokens] * num_chunks
    assert tokens is not None
    if tokens < 1:
        raise SpecError(f"--tokens must be >= 1, got {tokens}")
    full, rest = divmod(tokens, chunk_tokens)
    if not full and not keep_tail:
        raise SpecError(f"--tokens {tokens} is less than one {chunk_tokens}-token chunk and the tail chunk is "
                        "dropped (--tail-chunk drop, LMCache's save_unfull_chunk: false): nothing would be stored")
    return [chunk_tokens] * full + ([rest] if rest and keep_tail else [])


def build_manifest(model: ResolvedModel, geometry: TransferGeometry, chunk_tokens: int = DEFAULT_CHUNK_TOKENS, *,
                   tokens: int | None = None, num_chunks: int | None = None, keep_tail: bool = True,
                   preset: EnginePreset | None = None) -> Manifest:
    """The object set a prompt produces: one object per (chunk, TP rank), or per chunk for an MLA model
    under an engine that stores MLA from the first rank only (``preset``, which the manifest records)."""
    counts = chunk_token_counts(chunk_tokens, tokens=tokens, num_chunks=num_chunks, keep_tail=keep_tail)
    ranks = 1 if preset is not None and preset.mla_first_rank_only and model.geometry.family == "MLA" else model.tp
    objects = [
        KVObject(object_key(model.geometry.name, chunk, rank), model.kv_bytes(n), chunk, rank, n)
        for chunk, n in enumerate(counts) for rank in range(ranks)
    ]
    chunking: dict[str, Any] = {"chunk_tokens": chunk_tokens, "tokens": sum(counts), "chunks": len(counts),
                                "objects_per_chunk": ranks, "tail_chunk": "keep" if keep_tail else "drop"}
    if tokens is not None and tokens > sum(counts):
        chunking["unstored_tokens"] = tokens - sum(counts)
    engine = None
    if preset is not None:
        engine = preset.to_dict()
        slot = preset.slot_bytes(model.kv_bytes(chunk_tokens))
        if slot is not None:
            engine["slot_bytes"] = slot
    return Manifest.from_objects(objects, model=model.to_dict(), geometry=geometry, chunking=chunking, engine=engine)


def _object_classes(manifest: Manifest) -> list[tuple[tuple[int, int | None], int]]:
    """How many objects share each (payload bytes, tokens), largest first: full chunks are one class,
    a tail chunk another."""
    classes = Counter((obj.nbytes, obj.tokens) for obj in manifest.objects)
    return sorted(classes.items(), key=lambda item: -item[0][0])


def planned_commands(manifest: Manifest) -> dict[str, Counter[int]]:
    """Command sizes (size -> count) of storing, and of loading, every object once."""
    totals: dict[str, Counter[int]] = {op: Counter() for op in OPS}
    for (nbytes, _tokens), count in _object_classes(manifest):
        for op in OPS:
            for size, n in manifest.geometry.commands(op, nbytes).items():
                totals[op][size] += n * count
    return totals


def recompute_breakeven(manifest: Manifest, prefill_tokens_per_sec: float,
                        codec: CodecProjection | None = None) -> list[dict[str, Any]]:
    """Per object class, the storage bandwidth above which loading its KV beats recomputing it.

    Recomputing ``tokens`` tokens takes ``tokens / R`` seconds at a prefill rate of
    ``R`` tokens/s, so loading wins when ``bytes / bandwidth`` is shorter:
    ``bandwidth > bytes * R / tokens``.  Under TP every rank loads its own
    object in parallel, so the per-object figure is what each rank's storage path
    must sustain; ``all_ranks`` is the aggregate.  With a ``codec``, the ``*_with_codec`` figures are the
    device bandwidth needed when the object is stored encoded and decoded after each load
    (kvbench_core.codecs.codec_projection); None where decoding alone is slower than recomputing.
    """
    if prefill_tokens_per_sec <= 0:
        raise SpecError(f"--prefill-tokens-per-sec must be > 0, got {prefill_tokens_per_sec}")
    per_chunk = manifest.chunking.get("objects_per_chunk", 1)
    rows = []
    for (nbytes, tokens), count in _object_classes(manifest):
        if not tokens:
            raise SpecError("the manifest's objects carry no token counts, so recompute time is unknown")
        recompute_s = tokens / prefill_tokens_per_sec
        row = {"payload_bytes": nbytes, "tokens": tokens, "objects": count, "recompute_s": recompute_s,
               "breakeven_bytes_per_s": nbytes / recompute_s,
               "breakeven_bytes_per_s_all_ranks": nbytes * per_chunk / recompute_s}
        if codec is not None:
            device = codec.breakeven_bytes_per_s(nbytes, recompute_s)
            row.update({"encoded_bytes": codec.encoded_bytes(nbytes), "decode_s": codec.decode_s(nbytes),
                        "breakeven_device_bytes_per_s_with_codec": device,
                        "breakeven_device_bytes_per_s_all_ranks_with_codec":
                            None if device is None else device * per_chunk})
        rows.append(row)
    return rows


def _fragmentation(commands: Counter[int], geometry: TransferGeometry, payload: int) -> dict[str, Any]:
    """How far the command stream falls short of full ``max_transfer`` commands, and what padding costs."""
    count = sum(commands.values())
    device = total_bytes(commands)
    partial = count - commands.get(geometry.max_transfer, 0)
    mean = device / count if count else 0.0
    return {"commands": count, "full_commands": count - partial, "partial_commands": partial,
            "partial_fraction": partial / count if count else 0.0, "mean_command_bytes": mean,
            "fill_ratio": mean / geometry.max_transfer, "overhead_bytes": device - payload}


def summarize(manifest: Manifest, prefill_tokens_per_sec: float | None = None,
              codec: CodecProjection | None = None) -> dict[str, Any]:
    """Everything ``kvbench project`` reports, computed from a manifest (fresh or recorded); with a ``codec``,
    each object class also has the commands and device bytes of its encoded form."""
    geometry = manifest.geometry
    classes = []
    for (nbytes, tokens), count in _object_classes(manifest):
        store, load = geometry.store_commands(nbytes), geometry.load_commands(nbytes)
        classes.append({"payload_bytes": nbytes, "tokens": tokens, "objects": count,
                        "store_commands": sum(store.values()), "load_commands": sum(load.values()),
                        "store_device_bytes": total_bytes(store), "load_device_bytes": total_bytes(load)})
        if codec is not None:
            classes[-1].update(_encoded_class(geometry, codec, nbytes))
    commands = planned_commands(manifest)
    payload = sum(obj.nbytes for obj in manifest.objects)
    histograms = {op: log2_histogram(commands[op]) for op in OPS}
    bins = sorted(set(histograms["store"]) | set(histograms["load"]), reverse=True)
    summary: dict[str, Any] = {
        "model": manifest.model,
        "chunking": manifest.chunking,
        **({"engine": manifest.engine} if manifest.engine else {}),
        "geometry": geometry.to_dict(),
        "object_classes": classes,
        "command_sizes": [{"bin_bytes": b, **{op: histograms[op].get(b, 0) for op in OPS}} for b in bins],
        "totals": {"objects": len(manifest.objects), "payload_bytes": payload,
                   **{f"{op}_commands": sum(commands[op].values()) for op in OPS},
                   **{f"{op}_device_bytes": total_bytes(commands[op]) for op in OPS}},
        "fragmentation": {op: _fragmentation(commands[op], geometry, payload) for op in OPS},
    }
    if codec is not None:
        summary["codec"] = codec.to_dict()
        summary["totals"].update({f"encoded_{op}_device_bytes": sum(row[f"encoded_{op}_device_bytes"] * row["objects"]
                                                                    for row in classes) for op in OPS})
    if prefill_tokens_per_sec is not None:
        summary["load_vs_recompute"] = {"prefill_tokens_per_sec": prefill_tokens_per_sec,
                                        "classes": recompute_breakeven(manifest, prefill_tokens_per_sec, codec)}
    return summary


def _encoded_class(geometry: TransferGeometry, codec: CodecProjection, nbytes: int) -> dict[str, Any]:
    """An object class's commands and device bytes when it is stored encoded."""
    encoded = codec.encoded_bytes(nbytes)
    store, load = geometry.store_commands(encoded), geometry.load_commands(encoded)
    return {"encoded_bytes": encoded, "encoded_store_commands": sum(store.values()),
            "encoded_load_commands": sum(load.values()), "encoded_store_device_bytes": total_bytes(store),
            "encoded_load_device_bytes": total_bytes(load)}
