"""Starting the tier's NIXL side: the GPU checks before NIXL, the agents, their params, the first round trip.

Each check says in one line what is missing, because NIXL's own answers are
bare ('unsupported backend', 'INVALID_PARAM') and arrive late.
"""

from __future__ import annotations

import contextlib
import ctypes

from kvbench_core.contracts.backend import StorageBackend
from kvbench_core.contracts.errors import BackendUnavailable, SpecError
from kvbench_nixl.arena import ALIGN
from kvbench_nixl.library import Agent, Library
from kvbench_nixl.options import GPU_BACKENDS


def require_gpu(label: str, nixl_backend: str, memory: str) -> None:
    """GDS and VRAM need the NVIDIA driver (and, for VRAM, a CUDA build of torch): say so before NIXL
    starts, since NIXL's own answer on a host without them is a bare 'unsupported backend'."""
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError as error:
        raise BackendUnavailable(f"{label}: nixl_backend {nixl_backend} / memory {memory} needs "
                                 f"an NVIDIA GPU and driver; libcuda.so.1 cannot be loaded ({error})") from None
    if memory == "VRAM":
        try:
            import torch
        except ImportError:
            raise BackendUnavailable(f"{label}: memory: VRAM needs torch (pip install "
                                     "'kvbench-core[gpu]')") from None
        if not torch.cuda.is_available():
            raise BackendUnavailable(f"{label}: memory: VRAM but torch {torch.__version__} sees no CUDA "
                                     "device; check nvidia-smi and CUDA_VISIBLE_DEVICES")


def start_agent(library: Library, name: str, nixl_backend: str, params: dict[str, str], label: str) -> Agent:
    """A NIXL agent called ``name`` with ``nixl_backend``'s plugin started on ``params``."""
    errors = (*library.errors, LookupError)
    try:
        return Agent(library, name, nixl_backend, params)
    except errors as error:
        hint = " (NIXL's GDS plugins need libcufile and an NVIDIA GPU)" if nixl_backend in GPU_BACKENDS else ""
        raise BackendUnavailable(f"{label}: NIXL {library.version} could not start its "
                                 f"{nixl_backend} plugin: {type(error).__name__}: {error}{hint}") from None


def check_params(agent: Agent, params: dict[str, str], nixl_backend: str, where: str) -> None:
    """``params`` a plugin does not declare are refused by name (NIXL itself only says INVALID_PARAM)."""
    declared = agent.plugin_params()
    for key in params:
        if declared and key not in declared:
            raise SpecError(f"{where}.params.{key}: NIXL's {nixl_backend} plugin has no such "
                            f"parameter (it has {', '.join(sorted(declared))})")


def probe(tier: StorageBackend, key: str, failure: str) -> None:
    """One 4 KiB write and read back through the tier, the way entries go, so a path NIXL cannot use
    (read-only directory, an S3 endpoint the SDK cannot talk to) fails here, clearly; ``failure``
    opens the message."""
    from kvbench_core.contracts.payload import NoisePool

    pool = NoisePool(seed=1, pool_bytes=ALIGN, max_piece=ALIGN)
    try:
        tier.write(key, pool.payload(key, ALIGN))
        check = bytearray(ALIGN)
        tier.read_range(key, 0, memoryview(check))
        expected = bytearray(ALIGN)
        pool.payload(key, ALIGN).fill(0, memoryview(expected))
        if check != expected:
            raise OSError("read back different bytes")
    except OSError as error:
        raise BackendUnavailable(f"{failure}: {error}") from None
    finally:
        with contextlib.suppress(OSError):
            tier.delete(key)
