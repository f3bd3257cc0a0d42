"""Fixtures for the nixl tier tests: NIXL present or a clean skip, moto's S3 server, opened backends."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
import s3_servers
from kvbench_nixl.backend import NixlBackend
from s3_servers import MotoServer

from kvbench_core.contracts.conformance import backend_fixtures
from kvbench_core.contracts.payload import NoisePool

#: Fake AWS credentials for every test, and the session's moto server (shared with the other S3 tier's tests).
aws_environment = s3_servers.aws_environment
moto_server = s3_servers.moto_server


@pytest.fixture(scope="session")
def pool() -> NoisePool:
    return NoisePool(seed=21, pool_bytes=1 << 20, max_piece=1 << 20)


@pytest.fixture
def posix_options(tmp_path: Path) -> dict[str, Any]:
    return {"nixl_backend": "POSIX", "path": str(tmp_path / "tier"), "transfer_size": "64KiB", "queue_depth": 4}


@pytest.fixture
def obj_options(moto_server: MotoServer) -> dict[str, Any]:
    """The shared endpoint, a fresh bucket per test, small objects."""
    return {"nixl_backend": "OBJ", "endpoint_url": moto_server.url, "bucket": f"kvbn-{uuid.uuid4().hex[:12]}",
            "create_bucket": True, "region": "us-east-1", "transfer_size": "64KiB", "queue_depth": 4}


#: ``open_backend(options, *, run_id=None, keep=False, concurrency=2)`` and ``verify(backend, key, size)``.
open_backend, verify = backend_fixtures(NixlBackend, "nixl0")
