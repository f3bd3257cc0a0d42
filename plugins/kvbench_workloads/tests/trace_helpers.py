"""Helpers the trace-source tests share (a uniquely named module: plugins' conftest.py files would collide)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvbench_core.contracts.workload import Request, WorkloadContext, WorkloadSource

DATA = Path(__file__).parent / "data"


def make_context(**overrides: Any) -> WorkloadContext:
    settings: dict[str, Any] = {"seed": 42, "users": 4, "bytes_per_token": 1, "spec_dir": str(DATA)}
    settings.update(overrides)
    return WorkloadContext(**settings)


def drain_open(source: WorkloadSource, limit: int = 100_000) -> list[Request]:
    """Every request of an open-loop source, in arrival order."""
    requests = []
    while (request := source.next_request(0)) is not None:
        requests.append(request)
        assert len(requests) <= limit, "stream did not end"
    return requests


def drain_user(source: WorkloadSource, user: int, limit: int = 100_000) -> list[Request]:
    """Every request one closed-loop user gets."""
    requests = []
    while (request := source.next_request(user)) is not None:
        requests.append(request)
        assert len(requests) <= limit, "stream did not end"
    return requests
