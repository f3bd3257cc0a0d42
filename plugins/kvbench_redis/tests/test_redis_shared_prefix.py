"""Shared-prefix reuse across processes (seed §11.5, "system prompt sharing"): one client writes the
system prompt's KV entry into a shared namespace, two others hit it; only the writer's close removes it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from redis_servers import RedisServer

pytestmark = [pytest.mark.redis, pytest.mark.slow]  # three Python processes

CLIENT = Path(__file__).with_name("shared_prefix_client.py")
SIZE = 3 * 4096 + 5  # four parts


def client(role: str, server: RedisServer, namespace: str, key: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, str(CLIENT), role, str(server.port), namespace, key, str(SIZE)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def test_an_entry_written_by_one_process_is_hit_by_the_others(redis_server: RedisServer) -> None:
    namespace, key = "prefix-test", "kv_system_7f3a"  # a shared (content-named) entry
    stored = redis_server.client()
    writer = client("write", redis_server, namespace, key)
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "written"
        readers = [client("read", redis_server, namespace, key) for _ in range(2)]  # both at once
        outcomes = [json.loads(reader.communicate(timeout=120)[0]) for reader in readers]
        assert outcomes == [{"hit": True, "private_missed": True}] * 2
        # The readers have closed: they wrote nothing, so they removed nothing.
        assert stored.exists(*(f"kvbench:shared:{namespace}:{{{key}}}:s{SIZE}:p{i}" for i in range(4))) == 4
        writer.communicate("close\n", timeout=120)
        assert writer.returncode == 0
    finally:
        if writer.poll() is None:
            writer.kill()
    assert list(stored.scan_iter(match=f"kvbench:shared:{namespace}:*")) == []  # the writer's close removed it
