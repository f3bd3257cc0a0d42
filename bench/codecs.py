"""Codec throughput and ratio per payload kind, measured in one run on one core.

Needs: the codecs extra: pip install -e '.[codecs]' (cramjam).

For each payload kind (``random``, ``synthetic_kv``) and each built-in codec at a few levels, encode and
decode ``--megabytes`` of payload in the stage's 1 MiB chunks on one thread, into reused buffers (as the
codec stage does), then run the same bytes through the stage itself (``CodecTier`` over a ``cpu`` tier)
to show what the stage adds.  Prints a table and a JSON summary; record the numbers in
docs/PERFORMANCE.md ("Codecs").  Rates are logical (uncompressed) bytes per second of one core.

    .venv/bin/python bench/codecs.py --megabytes 32 --repeats 3
"""

from __future__ import annotations

from needs import need  # bench/needs.py: the line above, checked before the imports that need it

need("the codecs extra: pip install -e '.[codecs]' (cramjam)",
     modules=("cramjam",))

import argparse
import json
import platform
import time
from typing import Any

import numpy as np

from kvbench_core.contracts.backend import DISCARD, BackendContext
from kvbench_core.contracts.payload import PAYLOAD_KINDS, NoisePool
from kvbench_core.contracts.plugins import registry
from kvbench_core.engine.run.factory import create_backend
from kvbench_core.runspec.codec_choices import codec_choice

CHUNK = 1 << 20
CODECS = [("zstd", {"level": 1}), ("zstd", {"level": 3}), ("lz4", {"level": 0}), ("lz4", {"level": 9}),
          ("bf16_planes", {"level": 1}), ("bf16_planes", {"level": 3})]


def chunks(pool: NoisePool, megabytes: int) -> np.ndarray:
    """``megabytes`` MiB of the pool's payload, as one entry would be cut (stamps included)."""
    data = np.empty(megabytes * CHUNK, dtype=np.uint8)
    payload = pool.payload("bench-entry", data.shape[0])
    for at in range(0, data.shape[0], CHUNK):
        payload.fill(at, memoryview(data[at:at + CHUNK]))
    return data


def codec_alone(name: str, options: dict[str, Any], data: np.ndarray, repeats: int) -> dict[str, Any]:
    """Ratio, and the best encode and decode rates of ``repeats`` passes (others share these cores)."""
    passes = [one_pass(registry("codec")[name](options), data) for _ in range(repeats)]
    return {"ratio": passes[0]["ratio"], "encode_bytes_per_s": max(p["encode_bytes_per_s"] for p in passes),
            "decode_bytes_per_s": max(p["decode_bytes_per_s"] for p in passes)}


def one_pass(codec: Any, data: np.ndarray) -> dict[str, Any]:
    encoded = np.empty(codec.max_encoded_size(CHUNK), dtype=np.uint8)
    frames = []
    start = time.perf_counter()
    for at in range(0, data.shape[0], CHUNK):
        n = codec.encode(data[at:at + CHUNK], encoded)
        frames.append(min(n, CHUNK))  # the stage stores a chunk raw when the codec cannot shrink it
    encode_s = time.perf_counter() - start
    physical = sum(frames)
    # Decode timing on real frames: re-encode each chunk once (untimed), then time its decode.
    plain = np.empty(CHUNK, dtype=np.uint8)
    decode_s = 0.0
    for at in range(0, data.shape[0], CHUNK):
        n = codec.encode(data[at:at + CHUNK], encoded)
        if n >= CHUNK:
            t0 = time.perf_counter()
            plain[:] = data[at:at + CHUNK]  # a raw chunk decodes as a copy
            decode_s += time.perf_counter() - t0
            continue
        t0 = time.perf_counter()
        codec.decode(encoded[:n], plain)
        decode_s += time.perf_counter() - t0
    return {"ratio": data.shape[0] / physical, "encode_bytes_per_s": data.shape[0] / encode_s,
            "decode_bytes_per_s": data.shape[0] / decode_s}


def through_stage(name: str, options: dict[str, Any], pool: NoisePool, size: int) -> dict[str, Any]:
    """One entry written and read through ``CodecTier`` over a cpu tier: codec share of the op time."""
    tier = {"name": "bench", "backend": "cpu", "options": {}, "codec": codec_choice({"name": name,
                                                                                      "options": options})}
    backend = create_backend(tier, BackendContext(tier_name="bench", run_id="bench"), path="bench")
    backend.open()
    try:
        write = backend.write("e", pool.payload("e", size))
        read = backend.read("e", size, DISCARD)
    finally:
        backend.close()
    return {"write_codec_share": write.codec / write.total, "read_codec_share": read.codec / read.total,
            "stage_ratio": write.nbytes / write.physical_bytes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=32, help="MiB of payload per codec and kind")
    parser.add_argument("--repeats", type=int, default=3, help="passes per codec; the best rate is kept")
    args = parser.parse_args()
    rows = []
    for kind in PAYLOAD_KINDS:
        pool = NoisePool(seed=42, pool_bytes=32 << 20, max_piece=CHUNK, kind=kind)
        data = chunks(pool, args.megabytes)
        for name, options in CODECS:
            row = {"payload": kind, "codec": name, **options, **codec_alone(name, options, data, args.repeats),
                   **through_stage(name, options, pool, args.megabytes * CHUNK)}
            rows.append(row)
            print(f"{kind:13s} {name:12s} level {options['level']:2d}: ratio {row['ratio']:.3f}  "
                  f"encode {row['encode_bytes_per_s'] / 1e6:7.0f} MB/s  "
                  f"decode {row['decode_bytes_per_s'] / 1e6:7.0f} MB/s  codec share of stage "
                  f"write {row['write_codec_share']:.0%}, read {row['read_codec_share']:.0%}")
    print(json.dumps({"machine": platform.machine(), "python": platform.python_version(),
                      "megabytes": args.megabytes, "repeats": args.repeats, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
