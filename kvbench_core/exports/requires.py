"""The one way an export asks for its optional dependency: imported when the export runs, and when it is
missing a one-line user error naming the extra that installs it (fsspec's registry messages)."""

from __future__ import annotations

import importlib
from types import ModuleType

from kvbench_core.contracts.errors import MissingDependency


def optional_module(module: str, extra: str, purpose: str) -> ModuleType:
    """``import module``, or a ``MissingDependency`` saying ``pip install 'kvbench-core[extra]'`` for ``purpose``."""
    try:
        return importlib.import_module(module)
    except ImportError:
        package = module.split(".")[0]
        raise MissingDependency(f"{purpose} needs {package}: pip install 'kvbench-core[{extra}]'") from None
