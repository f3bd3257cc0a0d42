"""One client process of the shared-prefix test (run by ``test_redis_shared_prefix.py``, not collected).

``write``: store the system-prompt entry in the shared namespace, print
``written``, then keep owning it until a line arrives on stdin, and close.
``read``: read the entry (hit = found and byte-exact) plus a key nobody
wrote (must miss), print the outcome as JSON, and close.

Usage: ``python shared_prefix_client.py write|read PORT NAMESPACE KEY SIZE``
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
from kvbench_redis.backend import RedisBackend

from kvbench_core.contracts.backend import DISCARD, BackendContext
from kvbench_core.contracts.payload import NoisePool, VerifySink


def main(role: str, port: str, namespace: str, key: str, size: str) -> None:
    context = BackendContext(tier_name="shared", run_id=f"{role}-{os.getpid()}")
    backend = RedisBackend({"port": int(port), "shared_namespace": namespace, "part_size": 4096}, context)
    backend.open()
    pool = NoisePool(seed=11, pool_bytes=1 << 20, max_piece=1 << 20)  # same seed: same bytes in every client
    try:
        if role == "write":
            backend.write(key, pool.payload(key, int(size)))
            print("written", flush=True)
            sys.stdin.readline()
            return
        sink = VerifySink(pool, key, np.empty(1 << 20, dtype=np.uint8))
        try:
            backend.read(key, int(size), sink)
            hit = sink.mismatches == 0
        except KeyError:
            hit = False
        try:
            backend.read(f"{key}-private-{os.getpid()}", 1, DISCARD)
            private_missed = False
        except KeyError:
            private_missed = True
        print(json.dumps({"hit": hit, "private_missed": private_missed}), flush=True)
    finally:
        backend.close()


if __name__ == "__main__":
    main(*sys.argv[1:])
