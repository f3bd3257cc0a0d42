"""Entry point of the ``kvbench-nixl`` distribution (group ``kvbench``, name ``nixl``).

The backend module imports NIXL only in ``open()``, so ``kvbench plugins`` and
option validation work where the wheel is not installed.
"""

from __future__ import annotations

from kvbench_core.contracts.plugins import hookimpl


@hookimpl
def kvbench_storage_backends() -> dict[str, type]:
    from kvbench_nixl.backend import NixlBackend

    return {"nixl": NixlBackend}
