"""The plugin pages show only names that exist (issue #30 §4): every import in their code blocks runs, and
every ``kvbench_core.…`` name they write in backticks resolves, so a move or a rename that forgets the docs
fails here instead of in a vendor's first afternoon."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"
PAGES = ("plugins.md", "writing-plugins.md", "plugin-hooks.md", "backend-contract.md", "shared-tiers.md")
_CODE_BLOCK = re.compile(r"```python\n(.*?)```", re.S)
_DOTTED = re.compile(r"`(kvbench_core(?:\.[A-Za-z_]\w*)+)")


def _imports(page: str) -> list[tuple[str, str | None]]:
    """``(module, name or None)`` of every import statement in the page's Python blocks."""
    found: list[tuple[str, str | None]] = []
    for block in _CODE_BLOCK.findall((DOCS / page).read_text()):
        for node in ast.walk(ast.parse(block)):
            if isinstance(node, ast.ImportFrom) and node.module:
                found += [(node.module, alias.name) for alias in node.names]
            elif isinstance(node, ast.Import):
                found += [(alias.name, None) for alias in node.names]
    return found


def _resolves(dotted: str) -> bool:
    """A module, or a module's attribute chain (``kvbench_core.contracts.backend.StorageBackend.write``)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(value, attribute):
                return False
            value = getattr(value, attribute)
        return True
    return False


@pytest.mark.parametrize("page", PAGES)
def test_every_import_a_plugin_page_shows_runs(page: str) -> None:
    core = [(module, name) for module, name in _imports(page) if module.startswith("kvbench_core")]
    for module, name in core:
        imported = importlib.import_module(module)
        assert name is None or hasattr(imported, name), f"{page}: from {module} import {name}"


@pytest.mark.parametrize("page", PAGES)
def test_every_core_name_a_plugin_page_writes_resolves(page: str) -> None:
    text = (DOCS / page).read_text()
    missing = [name for name in _DOTTED.findall(text) if not _resolves(name)]
    assert missing == [], f"{page} names what does not exist"
    assert "RunState" not in text, f"{page}: hooks get a RunView, not the runner's RunState"
