"""Fixtures for the s3 tier tests: moto's S3 server as a real HTTP endpoint, fake credentials, backends.

Credentials come from the environment only, exactly as in production (the
boto3 chain); the user's own AWS config files and the instance metadata
service are switched off so a developer's real credentials never take part.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kvbench_s3.backend import S3Backend
from s3_servers import HAS_MOTO_SERVER, MISSING, MotoServer, start_moto

from kvbench_core.payload import NoisePool
from kvbench_core.testing import backend_fixtures

#: The fake credentials every test runs with (the secrets test uses its own, distinctive ones).
FAKE_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


@pytest.fixture(autouse=True)
def aws_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name, value in FAKE_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    """The shared S3 endpoint (tests use their own buckets or run ids)."""
    if not HAS_MOTO_SERVER:
        pytest.skip(MISSING)
    server = start_moto(tmp_path_factory.mktemp("moto") / "moto.log")
    yield server
    server.stop()


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[Callable[[], MotoServer]]:
    """A private S3 endpoint for tests that kill it (stopped after the test)."""
    if not HAS_MOTO_SERVER:
        pytest.skip(MISSING)
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
