"""Plugin discovery (pluggy over the ``kvbench`` entry-point group) and name -> class lookup.

The core's own tiers, workload source and autoscalers are registered through
the same entry-point group (``kvbench_core.builtins``), so a vendor plugin is
never a second-class citizen.  Optional heavy dependencies are checked when a
class is *selected*, fsspec-style, so ``kvbench plugins`` works without them.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from dataclasses import dataclass
from functools import cache
from typing import Any

import pluggy

from kvbench_core import hookspecs
from kvbench_core.errors import MissingDependency, SpecError

hookimpl = pluggy.HookimplMarker("kvbench")

KINDS = {
    "backend": "kvbench_storage_backends",
    "source": "kvbench_workload_sources",
    "autoscaler": "kvbench_autoscalers",
}


@dataclass(frozen=True)
class PluginInfo:
    """One installed plugin as ``kvbench plugins`` shows it."""

    name: str
    distribution: str
    version: str
    provides: dict[str, list[str]]


@cache
def get_plugin_manager() -> pluggy.PluginManager:
    """The process-wide manager with every installed ``kvbench`` entry point loaded."""
    manager = pluggy.PluginManager("kvbench")
    manager.add_hookspecs(hookspecs)
    manager.load_setuptools_entrypoints("kvbench")
    return manager


def _collect(hook_name: str) -> dict[str, type]:
    manager = get_plugin_manager()
    found: dict[str, type] = {}
    for provided in getattr(manager.hook, hook_name)():
        found.update(provided or {})
    return found


@cache
def registry(kind: str) -> dict[str, type]:
    """All installed implementations of one kind ("backend", "source", "autoscaler")."""
    return _collect(KINDS[kind])


def lookup(kind: str, name: str, *, path: str) -> type:
    """The class registered as ``name``; unknown names list the installed ones (error at ``path``)."""
    available = registry(kind)
    if name not in available:
        names = ", ".join(sorted(available)) or "none"
        raise SpecError(f"{path}: unknown {kind} {name!r}; installed: {names}")
    return available[name]


def require_dependencies(cls: type, *, what: str) -> None:
    """Fail at selection time with the install hint when an optional import is missing."""
    for module, hint in getattr(cls, "requires", {}).items():
        if importlib.util.find_spec(module) is None:
            raise MissingDependency(f"{what} needs the Python package '{module}': {hint}")


def extra_schema() -> dict[str, Any]:
    """Top-level spec properties contributed by plugins (kvbench_spec_schema hook)."""
    merged: dict[str, Any] = {}
    for fragment in get_plugin_manager().hook.kvbench_spec_schema():
        merged.update(fragment or {})
    return merged


def installed_plugins() -> list[PluginInfo]:
    """Installed plugins with their distribution, version and what they provide."""
    manager = get_plugin_manager()
    dists = {id(plugin): dist for plugin, dist in manager.list_plugin_distinfo()}
    infos = []
    for name, plugin in manager.list_name_plugin():
        if plugin is None:
            continue
        provides: dict[str, list[str]] = {}
        for kind, hook_name in KINDS.items():
            impl = getattr(plugin, hook_name, None)
            if impl is not None:
                provides[kind] = sorted(impl() or {})
        dist = dists.get(id(plugin))
        dist_name = dist.metadata["Name"] if dist else name
        version = dist.version if dist else _version_of(dist_name)
        infos.append(PluginInfo(name=name, distribution=dist_name, version=version, provides=provides))
    return sorted(infos, key=lambda info: info.name)


def _version_of(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def plugin_versions() -> dict[str, str]:
    """``{distribution: version}`` of every installed plugin, for the result header."""
    return {info.distribution: info.version for info in installed_plugins()}
