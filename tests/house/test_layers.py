"""The core's rooms import only downwards (docs/ARCHITECTURE.md, "The packages"): a module may import its
own room or a lower floor, never a higher one, function-level imports included.  And a plugin comes in
through one door: ``kvbench_core.contracts`` (plus ``kvbench_core.filetiers``, what file-backed tiers
share), never the engine, the spec loader, results or reports."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "kvbench_core"
#: What a plugin may import of the core (issue #30 §1).
PLUGIN_DOOR = ("kvbench_core.contracts", "kvbench_core.filetiers")
#: A plugin package's command-line tool (``python -m kvbench_blktrace fio``) is a client of the core, as a user
#: is, not a module the core loads: it may call the core's public functions (the fio distiller).
PLUGIN_CLIENT_MODULES = ("__main__.py",)
#: (plugin, plugin it imports): nixl's OBJ mode drives its bucket through the s3 tier (a declared dependency
#: of kvbench-nixl); the only plugin-to-plugin import.
PLUGIN_TO_PLUGIN = {("kvbench_nixl", "kvbench_s3")}
FLOOR = {"contracts": 1, "runspec": 2, "filetiers": 2, "codecs": 3, "capacity": 3, "builtins": 3, "engine": 4,
         "results": 5, "reports": 5, "exports": 5, "kvio": 5, "scaleout": 6, "forecast": 6, "cli": 7}
#: The engine's own rooms, in the same order (issue #30 §3): what is counted, the cache, how a run is driven.
ENGINE_FLOOR = {"measure": 1, "cache": 2, "run": 3}
#: (importing package, imported room): none; the conformance suite builds its tiers through the registry.
ALLOWED_UPWARDS: set[tuple[str, str]] = set()


def imported_modules(path: Path) -> Iterator[tuple[int, str]]:
    """``(line, module)`` of every import in ``path``, function-level ones included."""
    for node in ast.walk(ast.parse(path.read_text())):
        modules = ([node.module] if isinstance(node, ast.ImportFrom) and node.module else
                   [alias.name for alias in node.names] if isinstance(node, ast.Import) else [])
        for module in modules:
            yield node.lineno, module


def upward_imports() -> list[str]:
    found = []
    for path in sorted(CORE.rglob("*.py")):
        parts = path.relative_to(CORE).parts
        if len(parts) < 2 or parts[0] not in FLOOR:
            continue
        package = ".".join(("kvbench_core", *parts[:-1]))
        for lineno, module in imported_modules(path):
            room = module.split(".")[1] if module.startswith("kvbench_core.") else None
            if room in FLOOR and FLOOR[room] > FLOOR[parts[0]] and (package, room) not in ALLOWED_UPWARDS:
                found.append(f"{path.relative_to(CORE)}:{lineno} imports {module}")
    return found


def upward_imports_inside_the_engine() -> list[str]:
    found = []
    for path in sorted((CORE / "engine").rglob("*.py")):
        parts = path.relative_to(CORE / "engine").parts
        if len(parts) < 2:
            continue
        for lineno, module in imported_modules(path):
            names = module.split(".")
            room = names[2] if names[:2] == ["kvbench_core", "engine"] and len(names) > 2 else None
            if room is not None and ENGINE_FLOOR.get(room, 0) > ENGINE_FLOOR[parts[0]]:
                found.append(f"engine/{'/'.join(parts)}:{lineno} imports {module}")
    return found


def plugin_packages() -> list[Path]:
    """Every plugin's import package (not its tests), the template's included."""
    template = ROOT / "examples/kvbench-plugin-template/kvbench_template"
    roots = [*sorted((ROOT / "plugins").glob("kvbench_*/kvbench_*")), template]
    return [root for root in roots if (root / "__init__.py").exists()]


def imports_past_the_door() -> list[str]:
    found = []
    plugins = {package.name for package in plugin_packages()}
    for package in plugin_packages():
        for path in sorted(package.rglob("*.py")):
            for lineno, module in imported_modules(path):
                top = module.split(".")[0]
                through_door = module.startswith(PLUGIN_DOOR) or path.name in PLUGIN_CLIENT_MODULES
                if (top == "kvbench_core" and not through_door) or (
                        top in plugins and top != package.name and (package.name, top) not in PLUGIN_TO_PLUGIN):
                    found.append(f"{path.relative_to(ROOT)}:{lineno} imports {module}")
    return found


def test_every_room_imports_only_its_own_floor_or_below() -> None:
    assert upward_imports() == []


def test_the_engine_rooms_import_only_downwards() -> None:
    assert upward_imports_inside_the_engine() == []


def test_every_engine_module_lives_in_a_room() -> None:
    loose = sorted(path.name for path in (CORE / "engine").glob("*.py") if path.name != "__init__.py")
    rooms = {path.name for path in (CORE / "engine").iterdir() if (path / "__init__.py").exists()}
    assert loose == [] and rooms == set(ENGINE_FLOOR)


def test_a_plugin_imports_only_the_contracts_and_the_file_tier_kit() -> None:
    assert plugin_packages() and imports_past_the_door() == []


def test_the_floor_map_names_every_room() -> None:
    rooms = {path.name for path in CORE.iterdir() if path.is_dir() and (path / "__init__.py").exists()}
    assert rooms - {"schemas"} == set(FLOOR)


def test_every_name_the_contracts_publish_resolves_to_one_thing() -> None:
    import kvbench_core.contracts as contracts

    assert len(set(contracts.__all__)) == len(contracts.__all__)
    for name in contracts.__all__:
        assert getattr(contracts, name) is not None, name
