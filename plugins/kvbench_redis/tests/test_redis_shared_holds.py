"""Reference counting of shared entries (``kvbench_redis.shared``): one client's delete or close never pulls
an entry from under another client that holds it, the last holder deletes, concurrent stores of one entry
never interleave, and nothing is left on the server once every holder is gone."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Any

import pytest
from kvbench_redis.shared import SharedHolds
from redis_servers import RedisServer

from kvbench_core.contracts.backend import DISCARD
from kvbench_core.contracts.errors import BackendUnavailable
from kvbench_core.contracts.payload import NoisePool

pytestmark = pytest.mark.redis

PART = 4096
KEY = "kv_system_5eed"


def namespace_keys(server: RedisServer, namespace: str) -> list[str]:
    return sorted(k.decode() for k in server.client().scan_iter(match=f"kvbench:shared:{namespace}:*"))


def shared_options(server: RedisServer, namespace: str) -> dict[str, Any]:
    return {"port": server.port, "part_size": PART, "shared_namespace": namespace}


def test_holds_remember_the_latest_size_per_key() -> None:
    holds = SharedHolds(token="t")
    holds.hold("k", 10)
    holds.hold("k", 20)
    holds.hold("k", 10)  # held again: now the latest
    assert holds.latest("k") == 10
    assert holds.drop_latest("k") == 10
    assert holds.latest("k") == 20
    assert holds.drop_latest("k") == 20
    assert holds.drop_latest("k") is None and holds.latest("k") is None
    holds.hold("a", 1)
    holds.pending["b", 5] = 2
    assert holds.take_all() == ([("a", 1)], {("b", 5): 2})
    assert holds.held == {} and holds.pending == {}


def test_a_delete_by_one_holder_leaves_the_entry_to_the_others_and_the_last_deletes_it(
        redis_server: RedisServer, open_backend: Callable[..., Any], pool: NoisePool,
        verify: Callable[..., None]) -> None:
    options = shared_options(redis_server, "holds-delete")
    writer, reader = open_backend(options, run_id="a"), open_backend(options, run_id="b")
    size = 3 * PART + 7
    writer.write(KEY, pool.payload(KEY, size))
    assert reader.lookup(KEY) == size  # the reader's cache now indexes it: a hold
    writer.delete(KEY)  # the writer's eviction: the shipped spec's KeyError came from here
    verify(reader, KEY, size)
    reader.delete(KEY)
    with pytest.raises(KeyError):
        reader.read(KEY, size, DISCARD)
    assert namespace_keys(redis_server, "holds-delete") == []
    assert writer.counters()["shared"] == {"stored": 1, "deduplicated": 0, "duplicate": 0, "lookups_held": 0,
                                           "released": 1, "kept_for_others": 1, "deleted_last": 0}
    assert reader.counters()["shared"] == {"stored": 0, "deduplicated": 0, "duplicate": 0, "lookups_held": 1,
                                           "released": 1, "kept_for_others": 0, "deleted_last": 1}


def test_close_releases_this_process_holds_only(redis_server: RedisServer, open_backend: Callable[..., Any],
                                               pool: NoisePool, verify: Callable[..., None]) -> None:
    options = shared_options(redis_server, "holds-close")
    first, second = open_backend(options, run_id="a"), open_backend(options, run_id="b")
    first.write(KEY, pool.payload(KEY, 2 * PART))
    second.write(KEY, pool.payload(KEY, 2 * PART))  # the same entry again: not sent, held by both
    assert second.counters()["shared"]["deduplicated"] == 1
    first.close()
    verify(second, KEY, 2 * PART)
    second.delete("kv_system_never_held")  # holds nothing: touches nothing
    second.close()
    assert namespace_keys(redis_server, "holds-close") == []


def test_sizes_of_one_key_are_separate_entries(redis_server: RedisServer, open_backend: Callable[..., Any],
                                               pool: NoisePool, verify: Callable[..., None]) -> None:
    """The synthetic source cuts a system prompt to a short context: the same key with fewer bytes.  It
    must not overwrite the parts another client reads (that was an OSError size mismatch)."""
    options = shared_options(redis_server, "holds-sizes")
    long, short = open_backend(options, run_id="a"), open_backend(options, run_id="b")
    long.write(KEY, pool.payload(KEY, 5 * PART))
    short.write(KEY, pool.payload(KEY, PART + 1))
    verify(long, KEY, 5 * PART)
    verify(short, KEY, PART + 1)
    third = open_backend(options, run_id="c")
    assert third.lookup(KEY) == 5 * PART  # the largest complete one
    long.delete(KEY)
    short.delete(KEY)
    verify(third, KEY, 5 * PART)
    third.close()
    assert namespace_keys(redis_server, "holds-sizes") == []


def test_concurrent_stores_of_one_entry_commit_one_copy(redis_server: RedisServer,
                                                        open_backend: Callable[..., Any], pool: NoisePool,
                                                        verify: Callable[..., None]) -> None:
    options = shared_options(redis_server, "holds-race")
    backends = [open_backend(options, run_id=f"c{i}") for i in range(3)]
    size = 40 * PART + 3
    start = threading.Barrier(len(backends))

    def store(backend: Any) -> None:
        start.wait()
        backend.write(KEY, pool.payload(KEY, size))

    threads = [threading.Thread(target=store, args=(backend,)) for backend in backends]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    counts = [backend.counters()["shared"] for backend in backends]
    assert sum(c["stored"] for c in counts) == 1
    # each other store either raced the commit (its bytes sent, dropped) or started after it (nothing sent)
    assert sum(c["duplicate"] + c["deduplicated"] for c in counts) == 2
    parts = [k for k in namespace_keys(redis_server, "holds-race") if re.search(r":p\d+$", k)]
    assert len(parts) == 41 and not [k for k in parts if ":w" in k]  # one copy's parts, no temp parts left
    for backend in backends:
        verify(backend, KEY, size)
    for backend in backends:
        backend.delete(KEY)
    assert namespace_keys(redis_server, "holds-race") == []


class _FailingSource:
    """A payload that fails after its first part, like a write cancelled at the drain limit."""

    def __init__(self, pool: NoisePool, size: int) -> None:
        self.inner, self.size = pool.payload(KEY, size), size

    def fill(self, offset: int, out: memoryview) -> None:
        if offset >= PART:
            raise RuntimeError("cut short")
        self.inner.fill(offset, out)


def test_a_store_cut_short_leaves_nothing_even_with_keep(redis_server: RedisServer,
                                                         open_backend: Callable[..., Any],
                                                         pool: NoisePool) -> None:
    backend = open_backend(shared_options(redis_server, "holds-cut"), keep=True)
    with pytest.raises(RuntimeError, match="cut short"):
        backend.write(KEY, _FailingSource(pool, 3 * PART))
    assert backend.lookup(KEY) is None  # never committed: no entry for anyone
    assert namespace_keys(redis_server, "holds-cut") != []  # its first temp part
    backend.close()
    assert namespace_keys(redis_server, "holds-cut") == []


def test_keep_files_leaves_the_entry_and_its_holds(redis_server: RedisServer, open_backend: Callable[..., Any],
                                                   pool: NoisePool, verify: Callable[..., None]) -> None:
    options = shared_options(redis_server, "holds-keep")
    open_backend(options, run_id="a", keep=True).write(KEY, pool.payload(KEY, PART))
    later = open_backend(options, run_id="b")
    assert later.lookup(KEY) == PART
    later.close()  # the kept writer's hold keeps it
    verify(open_backend(options, run_id="c"), KEY, PART)
    client = redis_server.client()
    for key in namespace_keys(redis_server, "holds-keep"):  # the test's own clean-up
        client.unlink(key)


def test_a_server_without_scripting_is_refused_at_open(start_server: Callable[..., RedisServer],
                                                       open_backend: Callable[..., Any], pool: NoisePool) -> None:
    server = start_server("--user", "default", "on", "nopass", "~*", "&*", "+@all", "-@scripting")
    with pytest.raises(BackendUnavailable, match=r"shared_namespace needs Lua scripting \(EVAL\)"):
        open_backend(shared_options(server, "no-lua"))
    open_backend({"port": server.port}).write("entry", pool.payload("entry", 10))  # a private tier needs none
