"""Entry point of the ``kvbench-gds`` distribution (group ``kvbench``, name ``gds``).

The backend is imported inside the hook; it imports neither kvikio nor torch
until ``open()``, so ``kvbench plugins`` and option validation work on hosts
without a GPU.
"""

from __future__ import annotations

from kvbench_core.contracts.plugins import hookimpl


@hookimpl
def kvbench_storage_backends() -> dict[str, type]:
    from kvbench_gds.backend import GDSBackend

    return {"gds": GDSBackend}
