"""Build a storage backend: from a plan's tier (its options checked once, by the plan), or from one tier
entry of a spec for a caller that has no plan (``plugins --conformance``, ``replay``, the conformance suite)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvbench_core.codecs.stage import with_codec
from kvbench_core.contracts.backend import BackendContext, StorageBackend
from kvbench_core.contracts.plugins import new_backend, require_dependencies
from kvbench_core.runspec.codec_choices import check_codec
from kvbench_core.runspec.plan import PluginChoice, thaw


def require_backend(choice: PluginChoice) -> None:
    """The backend's optional packages and drivers (its ``requires``), checked before it is built: by the run
    and by ``--dry-run``, which must refuse what the run would (engine/dryrun.check_requirements)."""
    require_dependencies(choice.cls, what=f"{choice.field} (backend '{choice.name}')")


def build_backend(choice: PluginChoice, context: BackendContext, *, codec: Mapping[str, Any] | None = None
                  ) -> StorageBackend:
    """An unopened backend for a chosen plugin (behind its codec stage, if any); no option is checked again."""
    require_backend(choice)
    return with_codec(choice.cls(thaw(choice.options), context), thaw(codec) if codec else None, path=choice.field)


def create_backend(tier: dict[str, Any], context: BackendContext, *, path: str = "tier",
                   options_path: str | None = None) -> StorageBackend:
    """An unopened backend for ``{name, backend, options, codec}`` outside a run plan: its options are
    validated against the backend's schema here; errors name ``path`` (``options_path`` for the options,
    by default ``<path>.options``: a command line names the flag the user wrote them in)."""
    backend = new_backend(tier["backend"], dict(tier.get("options") or {}), context, path=path,
                          options_path=options_path)
    codec = check_codec(tier.get("codec"), path=path)  # any form the spec allows, resolved
    return with_codec(backend, codec, path=path)
