"""The nixl tier passes the conformance suite every tier passes: POSIX on real files, OBJ on moto's S3 server."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, ClassVar

import pytest
from nixl_helpers import bucket_keys, needs_nixl
from s3_servers import MotoServer
from testkit import free_port

from kvbench_core.contracts.backend import BackendContext, StorageBackend
from kvbench_core.contracts.conformance import BackendConformance, FileTierConformance
from kvbench_core.engine.run.factory import create_backend

pytestmark = needs_nixl
POSIX: dict[str, Any] = {"nixl_backend": "POSIX", "path": "{tmp_path}/tier", "transfer_size": "64KiB"}


class TestPosixTier(FileTierConformance):
    backend_name = "nixl"
    backend_options: ClassVar = POSIX


class TestPosixTierQueueDepth4NoFsync(TestPosixTier):
    backend_options: ClassVar = {**POSIX, "queue_depth": 4, "fsync": False, "drop_cache": False}


class TestPosixTierSharedAgent(TestPosixTier):
    backend_options: ClassVar = {**POSIX, "agents": "shared", "queue_depth": 2}


@pytest.mark.s3
class TestObjTier(BackendConformance):
    """Each test gets its own bucket on the session's moto server."""

    backend_name = "nixl"

    @pytest.fixture(autouse=True)
    def _endpoint(self, moto_server: MotoServer, tmp_path: Path) -> None:
        self.endpoint = moto_server.url
        self.bucket = f"kvbn-{tmp_path.name[-20:].lower().replace('_', '-')}"

    def options(self, endpoint: str) -> dict[str, Any]:
        return {"nixl_backend": "OBJ", "endpoint_url": endpoint, "bucket": self.bucket, "create_bucket": True,
                "region": "us-east-1", "transfer_size": "64KiB", "queue_depth": 2}

    def make_backend(self, context: BackendContext, tmp_path: Path) -> StorageBackend:
        return create_backend({"name": "obj", "backend": "nixl", "options": self.options(self.endpoint)}, context)

    def remaining_entries(self, backend: StorageBackend) -> Iterable[str]:
        return [key for key in bucket_keys(self.endpoint, self.bucket) if backend.context.run_id in key]

    def make_dead_backend(self, context: BackendContext, tmp_path: Path) -> StorageBackend:
        dead = f"http://127.0.0.1:{free_port()}"
        return create_backend({"name": "dead", "backend": "nixl", "options": self.options(dead)}, context)
