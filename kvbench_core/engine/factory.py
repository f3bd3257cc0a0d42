"""Build a storage backend from one tier entry of a spec: lookup, dependency check, options check."""

from __future__ import annotations

from typing import Any

from kvbench_core.codecs.stage import with_codec
from kvbench_core.contracts.backend import BackendContext, StorageBackend
from kvbench_core.contracts.plugins import lookup, require_dependencies
from kvbench_core.contracts.validation import validate_or_raise


def create_backend(tier: dict[str, Any], context: BackendContext, *, path: str = "tier") -> StorageBackend:
    """An unopened backend for ``{name, backend, options, codec}`` (behind its codec stage, if any); errors
    name ``path``."""
    cls = lookup("backend", tier["backend"], path=f"{path}.backend")
    options = dict(tier.get("options") or {})
    validate_or_raise(options, cls.options_schema, root=f"{path}.options")
    require_dependencies(cls, what=f"{path} (backend '{tier['backend']}')")
    return with_codec(cls(options, context), tier.get("codec"), path=path)
