"""The core's memory tiers pass the same conformance suite every vendor tier must pass."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from pathlib import Path
from typing import ClassVar

import pytest

from kvbench_core.contracts.backend import BackendContext, StorageBackend
from kvbench_core.contracts.conformance import BackendConformance
from kvbench_core.engine.run.factory import create_backend

HAS_TORCH = importlib.util.find_spec("torch") is not None


class TestCPUTier(BackendConformance):
    backend_name = "cpu"

    def remaining_entries(self, backend: StorageBackend) -> Iterable[str]:
        return list(backend._entries)  # a memory tier's store is the process: nothing else to probe


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed (pip install 'kvbench-core[gpu]')")
class TestGPUTierOnCPUDevice(BackendConformance):
    """The gpu tier's logic on torch's CPU device; where CUDA is absent, ``device: cuda`` is the dead endpoint."""

    backend_name = "gpu"
    backend_options: ClassVar = {"device": "cpu"}

    def remaining_entries(self, backend: StorageBackend) -> Iterable[str]:
        return list(backend._entries)

    def make_dead_backend(self, context: BackendContext, tmp_path: Path) -> StorageBackend | None:
        import torch

        if torch.cuda.is_available():
            return None  # CUDA works on this machine: there is no dead endpoint to point at
        return create_backend({"name": "hbm", "backend": "gpu", "options": {"device": "cuda"}}, context)
