"""Test helpers of the gds tier: a stand-in kvikio for the data-path logic, and a real-GPU gate.

The stand-in implements only the slice of kvikio's API the tier calls
(``CuFile`` pread/pwrite futures, ``defaults.get/set``,
``defaults.is_compat_mode_preferred``, ``cufile_driver.get``) on top of
POSIX I/O with host (numpy / torch CPU) buffers.  It lets CI exercise the
tier's staging, timing, GPU-origin rendering and honesty logic on any
machine; it proves nothing about cuFile, which only the real-GPU tests and
``bench/gds_gpu_check.sh`` on a GPU host do.
"""

from __future__ import annotations

import enum
import importlib.machinery
import importlib.util
import os
import types
from typing import Any

import numpy as np

HAS_TORCH = importlib.util.find_spec("torch") is not None


def gpu_host_problem() -> str | None:
    """Why the real-GDS tests cannot run here (None when they can)."""
    from kvbench_gds.probe import driver_problem

    problem = driver_problem()
    if problem is not None:
        return problem
    if importlib.util.find_spec("kvikio") is None:
        return "kvikio is not installed (pip install 'kvbench-gds[cu12]')"
    if not HAS_TORCH:
        return "torch is not installed"
    import torch

    return None if torch.cuda.is_available() else "torch sees no CUDA device"


class _Future:
    def __init__(self, nbytes: int) -> None:
        self._nbytes = nbytes

    def get(self) -> int:
        return self._nbytes


class FakeCuFile:
    """POSIX stand-in for ``kvikio.CuFile`` over host buffers."""

    def __init__(self, path: str, flags: str = "r") -> None:
        mode = {"r": os.O_RDONLY, "w": os.O_WRONLY | os.O_CREAT | os.O_TRUNC}[flags]
        self._fd = os.open(path, mode | os.O_CLOEXEC, 0o644)

    def __enter__(self) -> FakeCuFile:
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self._fd)

    def fileno(self) -> int:
        return self._fd

    def pwrite(self, buf: Any, size: int, file_offset: int = 0, task_size: int | None = None) -> _Future:
        view = memoryview(np.asarray(buf)).cast("B")[:size]
        done = 0
        while done < size:
            done += os.pwrite(self._fd, view[done:], file_offset + done)
        return _Future(done)

    def pread(self, buf: Any, size: int, file_offset: int = 0, task_size: int | None = None) -> _Future:
        view = memoryview(np.asarray(buf)).cast("B")[:size]
        done = 0
        while done < size:
            count = os.preadv(self._fd, [view[done:]], file_offset + done)
            if count == 0:
                raise RuntimeError(f"short read at {file_offset + done}")
            done += count
        return _Future(done)


def make_fake_kvikio(*, compat: bool, gds_available: bool) -> types.ModuleType:
    """A module object standing in for ``kvikio`` that reports the given compat/GDS state."""
    settings: dict[str, Any] = {"num_threads": 1, "task_size": 4 << 20, "gds_threshold": 1 << 20,
                                "compat_mode": None}
    kvikio = types.ModuleType("kvikio")
    kvikio.__spec__ = importlib.machinery.ModuleSpec("kvikio", None)
    kvikio.__version__ = "0.0.0+fake"
    kvikio.CompatMode = enum.Enum("CompatMode", "OFF ON AUTO")
    kvikio.CuFile = FakeCuFile
    kvikio.defaults = types.SimpleNamespace(
        set=settings.update,
        get=settings.__getitem__,
        is_compat_mode_preferred=lambda: compat or settings["compat_mode"] is kvikio.CompatMode.ON,
    )
    kvikio.cufile_driver = types.SimpleNamespace(
        get=lambda name: {"is_gds_available": gds_available}[name],
        libcufile_version=lambda: (1, 13),
    )
    return kvikio
