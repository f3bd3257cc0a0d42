"""Plugin discovery (pluggy over the ``kvbench`` entry-point group) and name -> class lookup.

The core's own tiers, workload source and autoscalers are registered through
the same entry-point group (``kvbench_core.builtins``), so a vendor plugin is
never a second-class citizen.  Optional heavy dependencies are checked when a
class is *selected*, fsspec-style, so ``kvbench plugins`` works without them.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import importlib.util
import sys
from dataclasses import dataclass
from functools import cache
from typing import Any

import pluggy

from kvbench_core.contracts import hookspecs
from kvbench_core.contracts.backend import BackendContext, StorageBackend
from kvbench_core.contracts.errors import MissingDependency, SpecError
from kvbench_core.contracts.validation import validate_or_raise

hookimpl = pluggy.HookimplMarker("kvbench")

KINDS = {
    "backend": "kvbench_storage_backends",
    "source": "kvbench_workload_sources",
    "autoscaler": "kvbench_autoscalers",
    "codec": "kvbench_codecs",
}


@dataclass(frozen=True)
class PluginInfo:
    """One installed plugin as ``kvbench plugins`` shows it."""

    name: str
    distribution: str
    version: str
    provides: dict[str, list[str]]


#: Plugins whose entry point failed to import: ``{entry point name: reason}`` (shown by ``kvbench plugins``).
BROKEN_PLUGINS: dict[str, str] = {}
#: The distribution that registered each plugin (name and version for ``kvbench plugins`` and results).
PLUGIN_DISTRIBUTIONS: dict[str, importlib.metadata.Distribution] = {}


@cache
def get_plugin_manager() -> pluggy.PluginManager:
    """The process-wide manager with every installed ``kvbench`` entry point loaded.

    Like ``PluginManager.load_setuptools_entrypoints("kvbench")``, except that one
    broken plugin is reported (``kvbench plugins``, a warning on stderr) instead of
    taking every command down with it.
    """
    manager = pluggy.PluginManager("kvbench")
    manager.add_hookspecs(hookspecs)
    for dist in list(importlib.metadata.distributions()):
        for entry_point in dist.entry_points:
            if entry_point.group != "kvbench" or manager.get_plugin(entry_point.name) is not None:
                continue
            try:
                plugin = entry_point.load()
            except Exception as error:  # a plugin's import error must not break kvbench itself
                BROKEN_PLUGINS[entry_point.name] = f"{dist.metadata['Name']}: {type(error).__name__}: {error}"
                print(f"kvbench: warning: plugin '{entry_point.name}' failed to load: {error}", file=sys.stderr)
                continue
            manager.register(plugin, name=entry_point.name)
            PLUGIN_DISTRIBUTIONS[entry_point.name] = dist
    return manager


def _distribution_name(plugin_name: str) -> str:
    dist = PLUGIN_DISTRIBUTIONS.get(plugin_name)
    return dist.metadata["Name"] if dist else plugin_name


def _collect(hook_name: str) -> tuple[dict[str, type], dict[str, list[str]]]:
    """Every ``{name: class}`` the plugins provide, and the names that more than one provides.

    A name two distributions both provide is left out of the registry instead of letting
    pluggy's call order pick one silently: the spec that names it gets an error naming both.
    """
    manager = get_plugin_manager()
    found: dict[str, type] = {}
    providers: dict[str, list[str]] = {}
    for impl in getattr(manager.hook, hook_name).get_hookimpls():
        for name, cls in (impl.function() or {}).items():
            providers.setdefault(name, []).append(_distribution_name(impl.plugin_name))
            found[name] = cls
    clashes = {name: sorted(dists) for name, dists in providers.items() if len(dists) > 1}
    for name in clashes:
        del found[name]
    return found, clashes


@cache
def registry(kind: str) -> dict[str, type]:
    """All installed implementations of one kind ("backend", "source", "autoscaler", "codec")."""
    return _collect(KINDS[kind])[0]


def clashes(kind: str) -> dict[str, list[str]]:
    """``{name: [distributions]}`` for names of one kind that several plugins provide."""
    return _collect(KINDS[kind])[1]


def lookup(kind: str, name: str, *, path: str) -> type:
    """The class registered as ``name``; unknown names list the installed ones (error at ``path``)."""
    available = registry(kind)
    if name not in available and name in (clashed := clashes(kind)):
        raise SpecError(f"{path}: {kind} {name!r} is provided by more than one plugin "
                        f"({' and '.join(clashed[name])}); uninstall one of them")
    if name not in available:
        names = ", ".join(sorted(available)) or "none"
        raise SpecError(f"{path}: unknown {kind} {name!r}; installed: {names}")
    return available[name]


def require_dependencies(cls: type, *, what: str) -> None:
    """Fail at selection time with the install hint when an optional import is missing."""
    for module, hint in getattr(cls, "requires", {}).items():
        if importlib.util.find_spec(module) is None:
            raise MissingDependency(f"{what} needs the Python package '{module}': {hint}")


def new_backend(name: str, options: dict[str, Any], context: BackendContext, *, path: str,
                options_path: str | None = None) -> StorageBackend:
    """An unopened backend of the registered ``name``, its options judged as a spec's tier options are
    (schema, ``check_options``, ``requires``): what a caller with no run plan builds a tier through (the
    conformance suite, ``plugins --conformance``, a vendor's own tests).  Errors name ``path``
    (``options_path`` for the options, by default ``<path>.options``: a command line names its flag)."""
    cls = lookup("backend", name, path=f"{path}.backend")
    options_path = options_path or f"{path}.options"
    validate_or_raise(options, cls.options_schema, root=options_path)
    cls.check_options(options, options_path)  # what the schema cannot say, as spec validation asks it
    require_dependencies(cls, what=f"{path} (backend '{name}')")
    return cls(dict(options), dataclasses.replace(context, options_path=options_path))


def extra_schema() -> dict[str, Any]:
    """Top-level spec properties contributed by plugins (kvbench_spec_schema hook)."""
    merged: dict[str, Any] = {}
    for fragment in get_plugin_manager().hook.kvbench_spec_schema():
        merged.update(fragment or {})
    return merged


def installed_plugins() -> list[PluginInfo]:
    """Installed plugins with their distribution, version and what they provide."""
    manager = get_plugin_manager()
    infos = []
    for name, plugin in manager.list_name_plugin():
        if plugin is None:
            continue
        provides: dict[str, list[str]] = {}
        for kind, hook_name in KINDS.items():
            impl = getattr(plugin, hook_name, None)
            if impl is not None:
                provides[kind] = sorted(impl() or {})
        # Plugins that act through lifecycle/schema hooks only (block tracing, say) list those hooks.
        other_hooks = sorted(caller.name for caller in manager.get_hookcallers(plugin) or []
                             if caller.name not in KINDS.values())
        if other_hooks:
            provides["hooks"] = other_hooks
        dist = PLUGIN_DISTRIBUTIONS.get(name)
        dist_name = _distribution_name(name)
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
