"""The redis tier on the backend kit (issue #30 §2) does what it did before the port, command for command.

The tier as it was before the port (commit ``BEFORE``, read from this checkout's git history) and the tier as
it is run the same operations against one real redis-server: private entries of one and several parts, an
empty one, an overwrite with fewer parts (its stale parts unlinked), reads, range reads across parts,
deletes of known and unknown entries, a missing entry, and a shared namespace's store, deduplicated store,
claim and release.  Per operation they must report the same bytes, command counts and deduplicated bytes,
the same I/O-log records (key, op, offset, bytes: one per piece command), the same error; after the
operations the same keys with the same values on the server, and the same number of calls of every Redis
command (``INFO commandstats``).  Only the timings may differ.
"""

from __future__ import annotations

import hashlib
import importlib
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from kvbench_redis.backend import RedisBackend
from redis_servers import RedisServer
from testkit import CommandLog

from kvbench_core.contracts.backend import BackendContext
from kvbench_core.contracts.payload import ChecksumSink, NoisePool

pytestmark = pytest.mark.redis

#: The last commit with the redis tier's own data path (``kvbench_redis/parts.py`` sending and receiving).
BEFORE = "c390a84"
PACKAGE = "plugins/kvbench_redis/kvbench_redis"
ROOT = Path(__file__).resolve().parents[3]


def tier_before(tmp_path: Path) -> type:
    """``RedisBackend`` as it was at ``BEFORE``, imported as the package ``kvbench_redis_before``."""
    try:
        names = subprocess.run(["git", "-C", str(ROOT), "ls-tree", "--name-only", f"{BEFORE}:{PACKAGE}"],
                               check=True, capture_output=True, text=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip(f"the tier before the port needs this checkout's git history (commit {BEFORE})")
    package = tmp_path / "before" / "kvbench_redis_before"
    package.mkdir(parents=True)
    for name in names:
        text = subprocess.run(["git", "-C", str(ROOT), "show", f"{BEFORE}:{PACKAGE}/{name}"], check=True,
                              capture_output=True, text=True).stdout
        (package / name).write_text(text.replace("kvbench_redis.", "kvbench_redis_before.")
                                    .replace("from kvbench_redis import", "from kvbench_redis_before import"))
    sys.path.insert(0, str(package.parent))
    try:
        return importlib.import_module("kvbench_redis_before.backend").RedisBackend
    except ImportError as error:  # the core moved on under it: the comparison has done its job
        pytest.skip(f"the tier before the port no longer imports against this core: {error}")
    finally:
        sys.path.remove(str(package.parent))


def observe(cls: type, server: RedisServer, pool: NoisePool) -> dict[str, Any]:
    """Run the operations on a fresh tier of class ``cls``; what each reported and what the server saw."""
    client = server.client()
    client.flushall()
    client.config_resetstat()
    log = CommandLog()

    def tier(run_id: str, **options: Any) -> Any:
        backend = cls({"port": server.port, "part_size": "64KiB", **options},
                      BackendContext(tier_name="redis0", run_id=run_id, concurrency=1, io_log=log))
        backend.open()
        return backend

    private = tier("kit-port")
    shared = [tier(f"kit-port-{i}", shared_namespace="ns", shared_keys=["sh_"]) for i in range(2)]
    steps: list[tuple[str, Any]] = []

    def step(name: str, call: Any) -> None:
        before = len(log.seen)
        try:
            outcome = call()
        except Exception as error:  # the same error, by type and message
            outcome = (type(error).__name__, str(error))
        if hasattr(outcome, "commands"):
            outcome = (outcome.nbytes, outcome.commands, outcome.dedup_bytes)
        steps.append((name, outcome, log.seen[before:]))

    def read(backend: Any, key: str, size: int) -> tuple[Any, ...]:
        sink = ChecksumSink()
        timing = backend.read(key, size, sink)
        return timing.nbytes, timing.commands, sink.digest, sink.nbytes

    def read_range(backend: Any, key: str, offset: int, size: int) -> str:
        out = memoryview(bytearray(size))
        backend.read_range(key, offset, out)
        return hashlib.sha256(out).hexdigest()

    sizes = {"empty": 0, "small": 1000, "one": 64 << 10, "multi": 200_003}
    for key, size in sizes.items():
        step(f"write {key}", lambda key=key, size=size: private.write(key, pool.payload(key, size)))
    for key, size in sizes.items():
        step(f"read {key}", lambda key=key, size=size: read(private, key, size))
    step("overwrite multi, fewer parts", lambda: private.write("multi", pool.payload("multi2", 70_000)))
    step("read multi", lambda: read(private, "multi", 70_000))
    step("read_range across parts", lambda: read_range(private, "multi", 60_000, 10_000))
    step("read_range inside a part", lambda: read_range(private, "small", 10, 500))
    step("read missing", lambda: read(private, "never", 10))
    step("read_range missing", lambda: read_range(private, "never", 0, 10))
    step("delete small", lambda: private.delete("small"))
    step("delete unknown", lambda: private.delete("unknown"))
    step("shared write", lambda: shared[0].write("sh_1", pool.payload("sh_1", 150_000)))
    step("shared lookup", lambda: shared[1].lookup("sh_1"))
    step("shared dedup write", lambda: shared[1].write("sh_1", pool.payload("sh_1", 150_000)))
    step("shared read", lambda: read(shared[1], "sh_1", 150_000))
    step("shared read_range", lambda: read_range(shared[1], "sh_1", 65_000, 70_000))
    step("shared delete", lambda: shared[0].delete("sh_1"))
    stats = {name: int(value["calls"]) for name, value in client.info("commandstats").items()
             if name not in ("cmdstat_info", "cmdstat_config", "cmdstat_flushall")}
    keys = {key.decode(): value(client, key) for key in client.scan_iter("*")}
    for backend in (private, *shared):
        backend.close()
    return {"steps": steps, "commands": stats, "keys": keys}


def value(client: Any, key: bytes) -> tuple[str, Any]:
    """What a key holds: a string's digest; of a shared entry's bookkeeping its type and size (the holders
    in it are named by random tokens, one per backend instance)."""
    kind = client.type(key).decode()
    if kind == "string":
        return kind, hashlib.sha256(client.get(key)).hexdigest()
    return kind, {"hash": client.hlen, "zset": client.zcard, "set": client.scard}[kind](key)


def test_the_tier_on_the_kit_issues_the_same_commands_and_stores_the_same_bytes_as_before(
        redis_server: RedisServer, pool: NoisePool, tmp_path: Path) -> None:
    before = observe(tier_before(tmp_path), redis_server, pool)
    now = observe(RedisBackend, redis_server, pool)
    for (name, was, records_were), (_, is_now, records_now) in zip(before["steps"], now["steps"], strict=True):
        assert is_now == was, name
        assert records_now == records_were, name
    assert now["keys"] == before["keys"]
    assert now["commands"] == before["commands"]
    assert any(name == "cmdstat_unlink" for name in now["commands"])  # the stale parts' UNLINK was issued
