"""The core's rooms import only downwards (docs/ARCHITECTURE.md, "The packages"): a module may import its
own room or a lower floor, never a higher one, function-level imports included.  The one exception is
written in the map: the public conformance suite drives a backend through the engine's factory and
payload pool, as a run does."""

from __future__ import annotations

import ast
from pathlib import Path

CORE = Path(__file__).resolve().parents[1] / "kvbench_core"
FLOOR = {"contracts": 1, "spec": 2, "filetiers": 2, "codecs": 3, "capacity": 3, "builtins": 3, "engine": 4,
         "results": 5, "reports": 5, "exports": 5, "kvio": 5, "scaleout": 6, "cli": 7}
#: (importing package, imported room): the conformance suite exercises backends the way a run does.
ALLOWED_UPWARDS = {("kvbench_core.contracts.conformance", "engine")}


def upward_imports() -> list[str]:
    found = []
    for path in sorted(CORE.rglob("*.py")):
        parts = path.relative_to(CORE).parts
        if len(parts) < 2 or parts[0] not in FLOOR:
            continue
        package = ".".join(("kvbench_core", *parts[:-1]))
        for node in ast.walk(ast.parse(path.read_text())):
            modules = ([node.module] if isinstance(node, ast.ImportFrom) and node.module else
                       [alias.name for alias in node.names] if isinstance(node, ast.Import) else [])
            for module in modules:
                room = module.split(".")[1] if module.startswith("kvbench_core.") else None
                if room in FLOOR and FLOOR[room] > FLOOR[parts[0]] and (package, room) not in ALLOWED_UPWARDS:
                    found.append(f"{path.relative_to(CORE)}:{node.lineno} imports {module}")
    return found


def test_every_room_imports_only_its_own_floor_or_below() -> None:
    assert upward_imports() == []


def test_the_floor_map_names_every_room() -> None:
    rooms = {path.name for path in CORE.iterdir() if path.is_dir() and (path / "__init__.py").exists()}
    assert rooms - {"schemas"} == set(FLOOR)
