"""Fixtures for the nixl tier tests: NIXL present or a clean skip, moto's S3 server, opened backends."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(REPO / "plugins/kvbench_s3/tests")]  # moto's server helpers, shared with the s3 tier

from kvbench_nixl.backend import NixlBackend  # noqa: E402
from s3_servers import MotoServer, fake_aws_environment, require_moto, start_moto  # noqa: E402

from kvbench_core.contracts.conformance import backend_fixtures  # noqa: E402
from kvbench_core.engine.payload import NoisePool  # noqa: E402


@pytest.fixture(autouse=True)
def aws_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_aws_environment(monkeypatch, tmp_path)


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    require_moto()
    server = start_moto(tmp_path_factory.mktemp("moto") / "moto.log")
    yield server
    server.stop()


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
