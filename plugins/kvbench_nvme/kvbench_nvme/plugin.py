"""Entry point of the ``kvbench-nvme`` distribution (group ``kvbench``, name ``nvme``).

The backend class is imported inside the hook so ``kvbench plugins`` stays cheap.
"""

from __future__ import annotations

from kvbench_core.contracts.plugins import hookimpl


@hookimpl
def kvbench_storage_backends() -> dict[str, type]:
    from kvbench_nvme.backend import NVMeBackend

    return {"nvme": NVMeBackend}
