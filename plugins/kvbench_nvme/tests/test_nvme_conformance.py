"""The nvme tier passes the backend conformance suite every tier must pass, in each access mode."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, ClassVar

from kvbench_core.contracts.backend import BackendContext, StorageBackend
from kvbench_core.contracts.conformance import BackendConformance, remaining_files
from kvbench_core.engine.factory import create_backend

OPTIONS: dict[str, Any] = {"path": "{tmp_path}/tier", "transfer_size": "64KiB"}


class TestBufferedTier(BackendConformance):
    backend_name = "nvme"
    backend_options: ClassVar = OPTIONS

    def remaining_entries(self, backend: StorageBackend) -> Iterable[str]:
        return remaining_files(backend.directory.path)

    def make_dead_backend(self, context: BackendContext, tmp_path: Path) -> StorageBackend:
        (tmp_path / "plain-file").write_text("not a directory")
        return create_backend({"name": "dead", "backend": "nvme",
                               "options": {"path": str(tmp_path / "plain-file" / "tier")}}, context)


class TestDirectTierQueueDepth4(TestBufferedTier):
    backend_options: ClassVar = {**OPTIONS, "direct": True, "queue_depth": 4}


class TestNoFsyncTier(TestBufferedTier):
    backend_options: ClassVar = {**OPTIONS, "fsync": False, "drop_cache": False, "queue_depth": 2}
