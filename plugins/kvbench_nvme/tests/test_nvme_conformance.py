"""The nvme tier passes the backend conformance suite every tier must pass, in each access mode."""

from __future__ import annotations

from typing import Any, ClassVar

from kvbench_core.contracts.conformance import FileTierConformance

OPTIONS: dict[str, Any] = {"path": "{tmp_path}/tier", "transfer_size": "64KiB"}


class TestBufferedTier(FileTierConformance):
    backend_name = "nvme"
    backend_options: ClassVar = OPTIONS


class TestDirectTierQueueDepth4(TestBufferedTier):
    backend_options: ClassVar = {**OPTIONS, "direct": True, "queue_depth": 4}


class TestNoFsyncTier(TestBufferedTier):
    backend_options: ClassVar = {**OPTIONS, "fsync": False, "drop_cache": False, "queue_depth": 2}
