"""No function over cyclomatic complexity 15 (radon's count) anywhere in the core and the plugins (issue #30,
done-when; issue #28 asked it of results/ and reports/ first).

radon counts what ruff's mccabe check (C901, pyproject.toml) does not: each ``if`` and ``for`` of a
comprehension and each boolean operator, so an assembler that builds a document in one expression scores
high here while passing ruff.  ``KNOWN`` lists the functions still above the limit, each with the work
that is to bring it under: a new one fails this test; whoever brings a listed one under the limit removes
its entry (a listed one no longer over the limit fails the second test), so the list only shrinks.
"""

from __future__ import annotations

from pathlib import Path

import pytest

radon = pytest.importorskip("radon.complexity", reason="radon is in the test extra: pip install -e '.[test]'")

ROOT = Path(__file__).resolve().parents[2]
#: Every room of the core and every plugin package's code (not their tests).
SOURCES = ("kvbench_core/**/*.py", "plugins/*/kvbench_*/**/*.py")
LIMIT = 15
#: "<file from the repository root>:<function>" still above the limit, and whose they are now.
KNOWN = {
    # issue #30 §5 (helper H listed these; each is split in its own commit by whoever owns the file then)
    "kvbench_core/engine/run/runner.py:Runner._finish",  # runner.py is being edited (#30 §3, #29)
}


def _over_limit() -> dict[str, int]:
    found = {}
    for pattern in SOURCES:
        for path in sorted(ROOT.glob(pattern)):
            if "tests" in path.relative_to(ROOT).parts:
                continue
            for block in radon.cc_visit(path.read_text()):
                for one in (block, *getattr(block, "methods", ()), *getattr(block, "closures", ())):
                    name = f"{one.classname}.{one.name}" if getattr(one, "classname", None) else one.name
                    if one.complexity > LIMIT:
                        found[f"{path.relative_to(ROOT).as_posix()}:{name}"] = one.complexity
    return found


def test_no_new_function_in_the_core_or_the_plugins_is_over_the_limit() -> None:
    new = {name: score for name, score in _over_limit().items() if name not in KNOWN}
    assert not new, f"over cyclomatic complexity {LIMIT} (radon): {new}; split them"


def test_the_known_list_only_shrinks() -> None:
    """A listed function brought under the limit (or renamed, or removed) leaves the list with it."""
    stale = sorted(KNOWN - set(_over_limit()))
    assert not stale, f"no longer over complexity {LIMIT}: remove from KNOWN: {stale}"

