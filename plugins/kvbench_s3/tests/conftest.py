"""Fixtures for the s3 tier tests: moto's S3 server as a real HTTP endpoint, fake credentials, backends."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import s3_servers
from kvbench_s3.backend import S3Backend
from s3_servers import MotoServer, require_moto, start_moto

from kvbench_core.contracts.conformance import backend_fixtures
from kvbench_core.contracts.payload import NoisePool

#: Fake AWS credentials for every test, and the session's moto server (shared with the other S3 tier's tests).
aws_environment = s3_servers.aws_environment
moto_server = s3_servers.moto_server


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[Callable[[], MotoServer]]:
    """A private S3 endpoint for tests that kill it (stopped after the test)."""
    require_moto()
    started: list[MotoServer] = []

    def start() -> MotoServer:
        started.append(start_moto(tmp_path / f"moto{len(started)}.log"))
        return started[-1]

    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="session")
def pool() -> NoisePool:
    return NoisePool(seed=13, pool_bytes=1 << 20, max_piece=1 << 20)


@pytest.fixture
def s3_options(moto_server: MotoServer) -> dict[str, Any]:
    """Options for the shared endpoint, a fresh bucket per test, small parts."""
    return {"endpoint_url": moto_server.url, "bucket": f"kvb-{uuid.uuid4().hex[:12]}", "create_bucket": True,
            "region": "us-east-1", "addressing_style": "path", "part_size": 4096, "max_attempts": 1}


#: ``open_backend(options, *, run_id=None, keep=False, concurrency=2)``: an opened S3Backend, closed after
#: the test; ``verify(backend, key, size)``: the entry reads back as exactly the ``pool`` payload.
open_backend, verify = backend_fixtures(S3Backend, "s3")
