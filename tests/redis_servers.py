"""Starting and stopping real redis-server processes on 127.0.0.1 (standalone, TLS, cluster nodes).

Debian's ``redis-server`` runs in the foreground without persistence.  A
module of its own (not conftest) so tests can import the types and helpers
by a name no other plugin's tests use.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis
import testkit
from testkit import ServerProcess

REDIS_SERVER = shutil.which("redis-server")
REDIS_CLI = shutil.which("redis-cli")
MISSING = "redis-server is not installed (apt-get install -y redis-server)"
#: A cluster node also listens on its port + this (the cluster bus).
CLUSTER_BUS_OFFSET = 10000


def free_port(*, with_bus: bool = False) -> int:
    """A TCP port nobody listens on; ``with_bus`` also needs port + 10000 (the cluster bus) free."""
    return testkit.free_port(paired_offset=CLUSTER_BUS_OFFSET if with_bus else None)


@dataclass
class RedisServer(ServerProcess):
    """One redis-server child process."""

    port: int
    directory: Path
    process: subprocess.Popen[bytes]
    client_kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def unix_socket(self) -> str:
        return str(self.directory / "redis.sock")

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, **self.client_kwargs)


def require_redis(*, cli: bool = False) -> None:
    """Skip the calling test, with the install line, when redis-server (or redis-cli) is missing."""
    if REDIS_SERVER is None or (cli and REDIS_CLI is None):
        pytest.skip(MISSING)


def start_redis(directory: Path, *args: str, port: int | None = None, tls: bool = False,
                client_kwargs: dict[str, Any] | None = None) -> RedisServer:
    """Start redis-server in ``directory`` (TCP on ``port`` or a free one, plus a unix socket); wait for PING."""
    directory.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    listen = ["--port", "0", "--tls-port", str(port)] if tls else ["--port", str(port)]
    command = [REDIS_SERVER or "redis-server", *listen, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
               "--daemonize", "no", "--dir", str(directory), "--unixsocket", str(directory / "redis.sock"),
               "--unixsocketperm", "700", *args]
    with open(directory / "redis.log", "wb") as log:  # the child keeps its own copy of the descriptor
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    server = RedisServer(port, directory, process, client_kwargs or {})
    deadline = time.monotonic() + 10
    while True:
        try:
            redis.Redis(unix_socket_path=server.unix_socket, **_auth_only(server.client_kwargs)).ping()
            return server
        except (redis.ConnectionError, FileNotFoundError):
            if process.poll() is not None or time.monotonic() > deadline:
                server.stop()
                log_tail = (directory / "redis.log").read_text()[-2000:]
                raise RuntimeError(f"redis-server did not start: {log_tail}") from None
            time.sleep(0.02)


def _auth_only(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in kwargs.items() if key in ("username", "password")}


@dataclass
class RedisCluster:
    nodes: list[RedisServer]

    @property
    def seed(self) -> RedisServer:
        return self.nodes[0]

    def client(self) -> redis.RedisCluster:
        return redis.RedisCluster(host="127.0.0.1", port=self.seed.port)
