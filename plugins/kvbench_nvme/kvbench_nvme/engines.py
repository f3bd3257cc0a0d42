"""The nvme tier's I/O engines by the name its ``engine`` option gives them.

Every engine streams an entry in ``transfer_size`` pieces through reused,
page-aligned buffers (their shared contract and piece helpers:
``kvbench_nvme.engine_contract``); they differ in how commands are kept in
flight, one module each: ``psync`` (``kvbench_nvme.psync``: ``pwrite``/``preadv``
from ``queue_depth`` threads) and ``io_uring`` (``kvbench_nvme.uring_engine``:
``queue_depth`` fixed-buffer commands in flight from one thread's ring).
"""

from __future__ import annotations

from collections.abc import Callable

from kvbench_nvme.engine_contract import Engine, EngineSettings
from kvbench_nvme.psync import PsyncEngine
from kvbench_nvme.uring_engine import UringEngine

ENGINES: dict[str, Callable[[EngineSettings], Engine]] = {"psync": PsyncEngine, "io_uring": UringEngine}


def make_engine(name: str, settings: EngineSettings) -> Engine:
    """The engine the tier's ``engine`` option names."""
    return ENGINES[name](settings)
