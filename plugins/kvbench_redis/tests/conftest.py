"""Fixtures for the redis tier tests: real redis-server processes on 127.0.0.1, opened backends.

Session-scoped servers are shared (every backend uses its own run id, so tests
never see each other's keys); tests that change server settings or kill the
server start their own.  Everything skips with the install line when
redis-server is missing.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kvbench_redis.backend import RedisBackend
from redis_servers import REDIS_CLI, RedisCluster, RedisServer, free_port, require_redis, start_redis

from kvbench_core.contracts.conformance import backend_fixtures
from kvbench_core.contracts.payload import NoisePool


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """The shared standalone server (TCP and unix socket, no maxmemory)."""
    require_redis()
    server = start_redis(tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[Callable[..., RedisServer]]:
    """Start a private redis-server with extra arguments (stopped after the test)."""
    require_redis()
    started: list[RedisServer] = []

    def start(*args: str, **kwargs: Any) -> RedisServer:
        server = start_redis(tmp_path / f"redis{len(started)}", *args, **kwargs)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    """Three primaries, no replicas, all 16384 slots assigned by ``redis-cli --cluster create``."""
    require_redis(cli=True)
    root = tmp_path_factory.mktemp("cluster")
    nodes: list[RedisServer] = []
    try:
        for index in range(3):
            nodes.append(start_redis(root / f"node{index}", "--cluster-enabled", "yes", "--cluster-config-file",
                                     "nodes.conf", "--cluster-node-timeout", "5000",
                                     port=free_port(with_bus=True)))
        subprocess.run([REDIS_CLI, "--cluster", "create", *(f"127.0.0.1:{node.port}" for node in nodes),
                        "--cluster-replicas", "0", "--cluster-yes"], check=True, capture_output=True, timeout=60)
        deadline = time.monotonic() + 30
        while not all(node.client().cluster("info").get("cluster_state") == "ok" for node in nodes):
            if time.monotonic() > deadline:
                raise RuntimeError("the test cluster did not reach cluster_state:ok")
            time.sleep(0.05)
        yield RedisCluster(nodes)
    finally:
        for node in nodes:
            node.stop()


@pytest.fixture(scope="session")
def pool() -> NoisePool:
    return NoisePool(seed=11, pool_bytes=1 << 20, max_piece=1 << 20)


#: ``open_backend(options, *, run_id=None, keep=False, concurrency=2)``: an opened RedisBackend, closed after
#: the test; ``verify(backend, key, size)``: the entry reads back as exactly the ``pool`` payload.
open_backend, verify = backend_fixtures(RedisBackend, "redis0")


@pytest.fixture
def unused_port() -> int:
    """A port nothing listens on: the endpoint of a server that is down."""
    return free_port()
