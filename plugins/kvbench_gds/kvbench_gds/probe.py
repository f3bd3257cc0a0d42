"""What this host can do for GPUDirect Storage, and which I/O path a run really takes.

Two questions, kept apart from the data path so both are testable without a GPU:

1. *Can the tier run at all?*  In the order that names the real blocker first:
   the NVIDIA driver (``libcuda.so.1``), then kvikio, then torch, then a CUDA
   device.  Installing kvikio on a machine without a driver does not help, so
   the driver is reported first — at selection (``requires``, see
   ``DriverAwareRequirements``) and again in ``open()`` (``load_gpu_stack``).
2. *Is it GDS?*  kvikio silently falls back to POSIX I/O through a host bounce
   buffer (its "compatibility mode"), and cuFile has a compatibility mode of
   its own when the nvidia-fs driver is missing or the filesystem is not one
   GDS can DMA to.  ``decide_access`` turns what kvikio reports into the
   mechanism the declaration states; every doubt resolves to "not GDS".
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from kvbench_core.contracts.errors import BackendUnavailable
from kvbench_gds.options import ALIGN

if TYPE_CHECKING:
    from kvbench_gds.staging import Staging

INSTALL_HINT = "pip install 'kvbench-gds[cu12]'  (or [cu13] for a CUDA 13 driver)"

#: Filesystems cuFile can DMA to (NVIDIA GDS documentation); anything else runs cuFile's POSIX fallback.
#: NFS is absent on purpose: only NFS over RDMA qualifies, which mountinfo cannot tell apart.
GDS_FILESYSTEMS = frozenset({"ext4", "xfs", "lustre", "wekafs", "gpfs", "beegfs"})


@cache
def driver_problem() -> str | None:
    """Why the NVIDIA driver is unusable here (``libcuda.so.1`` does not load), or None."""
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError as error:
        return (f"no NVIDIA driver: libcuda.so.1 cannot be loaded ({error}); GPUDirect Storage needs an NVIDIA "
                "GPU with its driver, and the nvidia-fs kernel module for the direct path")
    return None


class DriverAwareRequirements:
    """The backend's ``requires``, computed when the tier is *selected* rather than at import.

    ``require_dependencies`` reports a missing kvikio with this hint.  On a host
    without the NVIDIA driver the hint says so, because installing kvikio there
    would only move the failure to ``open()``.  A descriptor keeps the lookup
    lazy: importing the backend (``kvbench plugins``) loads no driver library.
    """

    def __get__(self, instance: object, owner: type) -> dict[str, str]:
        problem = driver_problem()
        if problem is None:
            return {"kvikio": INSTALL_HINT}
        return {"kvikio": f"{INSTALL_HINT}, on a GPU host; this host has {problem}"}


@dataclass(frozen=True)
class KvikioStatus:
    """kvikio's settings and what it found, after the tier applied its options."""

    version: str
    compat_mode_requested: str  # "on" | "off" | "auto"
    compat_mode_effective: bool  # True: kvikio does POSIX I/O, libcufile is not used
    gds_available: bool | None  # cuFile driver properties; None when kvikio is in compatibility mode
    libcufile_version: str | None
    num_threads: int
    task_size: int
    gds_threshold: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "kvikio_version": self.version, "compat_mode_requested": self.compat_mode_requested,
            "kvikio_compat_mode": self.compat_mode_effective, "cufile_gds_available": self.gds_available,
            "libcufile_version": self.libcufile_version, "num_threads": self.num_threads,
            "task_size": self.task_size, "gds_threshold": self.gds_threshold,
        }


def configure_kvikio(kvikio: Any, *, compat_mode: str, num_threads: int, task_size: int) -> KvikioStatus:
    """Apply the tier's settings (process-wide in kvikio) and read back what kvikio decided.

    ``gds_threshold`` is set to 0: by default kvikio sends transfers under 1 MiB
    through POSIX even in GDS mode, which would mix two paths in one number.
    """
    mode = {"on": kvikio.CompatMode.ON, "off": kvikio.CompatMode.OFF, "auto": kvikio.CompatMode.AUTO}[compat_mode]
    kvikio.defaults.set({"compat_mode": mode, "num_threads": num_threads, "task_size": task_size,
                         "gds_threshold": 0})
    compat = bool(kvikio.defaults.is_compat_mode_preferred())
    gds_available: bool | None = None
    libcufile: str | None = None
    if not compat:
        try:
            gds_available = bool(kvikio.cufile_driver.get("is_gds_available"))
        except (RuntimeError, KeyError, AttributeError):
            gds_available = False
        try:
            major, minor = kvikio.cufile_driver.libcufile_version()
            libcufile = f"{major}.{minor}" if major else None
        except (RuntimeError, AttributeError):
            libcufile = None
    return KvikioStatus(
        version=str(getattr(kvikio, "__version__", "unknown")),
        compat_mode_requested=compat_mode,
        compat_mode_effective=compat,
        gds_available=gds_available,
        libcufile_version=libcufile,
        num_threads=int(kvikio.defaults.get("num_threads")),
        task_size=int(kvikio.defaults.get("task_size")),
        gds_threshold=int(kvikio.defaults.get("gds_threshold")),
    )


@dataclass(frozen=True)
class AccessPath:
    """The I/O path a run takes: ``gds`` is True only for cuFile DMA, never for a fallback."""

    gds: bool
    mechanism: str
    reason: str  # why it is not GDS ("" when it is)


def decide_access(*, device_is_cuda: bool, status: KvikioStatus, filesystem: str | None) -> AccessPath:
    """The honest access mechanism from the device, kvikio's status and the filesystem type."""
    if not device_is_cuda:
        return AccessPath(False, "kvikio POSIX I/O from host memory (test device, not GDS)", "device: cpu")
    if status.compat_mode_effective:
        reason = ("compat_mode: on" if status.compat_mode_requested == "on" else
                  "kvikio chose its compatibility mode (libcufile not found, WSL, or /run/udev not readable)")
        return AccessPath(False, "kvikio compatibility mode: POSIX pread/pwrite through a host bounce buffer "
                                 "(not GDS)", reason)
    if not status.gds_available:
        return AccessPath(False, "cuFile compatibility mode: cuFile's POSIX fallback through host memory "
                                 "(not GDS)", "cuFile reports GDS unavailable (nvidia-fs not loaded?)")
    if filesystem not in GDS_FILESYSTEMS:
        return AccessPath(False, "cuFile on a filesystem without GDS support: cuFile's POSIX fallback "
                                 "(not GDS)", f"filesystem {filesystem or 'unknown'} is not one GDS can DMA to "
                                              f"({', '.join(sorted(GDS_FILESYSTEMS))})")
    return AccessPath(True, "GPUDirect Storage: cuFile DMA between GPU memory and the device", "")


@dataclass(frozen=True)
class GpuStack:
    """The imported kvikio and torch, and the torch device the tier stages on."""

    kvikio: Any
    torch: Any
    device: Any


def load_gpu_stack(label: str, device_name: str) -> GpuStack:
    """Check driver → kvikio → torch → device, the order that names the real blocker, and load them.

    Every failure is a one-line ``BackendUnavailable`` opening with ``label``.
    """
    cuda = device_name.startswith("cuda")
    problem = driver_problem() if cuda else None
    if problem is not None:
        raise BackendUnavailable(f"{label}: {problem}")
    try:
        import kvikio
    except ImportError as error:
        raise BackendUnavailable(f"{label}: kvikio is not installed ({error}): {INSTALL_HINT}") from None
    except Exception as error:
        raise BackendUnavailable(f"{label}: kvikio failed to load: {error}") from None
    try:
        import torch
    except ImportError:
        raise BackendUnavailable(f"{label}: torch is needed for GPU buffers: {INSTALL_HINT}") from None
    if cuda and not torch.cuda.is_available():
        raise BackendUnavailable(f"{label}: no CUDA device visible to torch {torch.__version__} "
                                 f"(built for CUDA {torch.version.cuda or 'none'}); check nvidia-smi and "
                                 "CUDA_VISIBLE_DEVICES, or install a CUDA build of torch")
    device = torch.device(device_name)
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        raise BackendUnavailable(f"{label}: {device_name} does not exist ({torch.cuda.device_count()} CUDA devices)")
    return GpuStack(kvikio, torch, device)


def round_trip(stack: GpuStack, staging: Staging, path: str, *, label: str, mechanism: str) -> None:
    """Write and read back one 4 KiB block at ``path`` through CuFile, so compat_mode: off on an unsuitable
    system or a read-only filesystem fails at open, clearly, not in the middle of the run."""
    torch, where = stack.torch, os.path.dirname(path)
    block = staging.device_buffer()[:ALIGN]
    with staging.gpu_work():
        block.fill_(0xA5)
        check = torch.zeros(ALIGN, dtype=torch.uint8, device=stack.device)
    try:
        with stack.kvikio.CuFile(path, "w") as handle:
            handle.pwrite(block, ALIGN, 0).get()
        with stack.kvikio.CuFile(path, "r") as handle:
            handle.pread(check, ALIGN, 0).get()
    except (OSError, RuntimeError) as error:
        raise BackendUnavailable(f"{label}: kvikio cannot do I/O in {where} ({mechanism}): {error}") from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
    if not bool(torch.equal(block, check)):
        raise BackendUnavailable(f"{label}: a 4 KiB probe read back different bytes in {where}")
