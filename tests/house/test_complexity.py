"""No function over cyclomatic complexity 15 (radon's count) anywhere in the core and the plugins (issue #30,
done-when; issue #28 asked it of results/ and reports/ first).

radon counts what ruff's mccabe check (C901, pyproject.toml) does not: each ``if`` and ``for`` of a
comprehension and each boolean operator, so an assembler that builds a document in one expression scores
high here while passing ruff.  The list of known exceptions this test kept while they were split is empty
now and gone with them: a function over the limit fails it, whoever's it is.
"""

from __future__ import annotations

from pathlib import Path

import pytest

radon = pytest.importorskip("radon.complexity", reason="radon is in the test extra: pip install -e '.[test]'")

ROOT = Path(__file__).resolve().parents[2]
#: Every room of the core and every plugin package's code (not their tests).
SOURCES = ("kvbench_core/**/*.py", "plugins/*/kvbench_*/**/*.py")
LIMIT = 15


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


def test_no_function_in_the_core_or_the_plugins_is_over_the_limit() -> None:
    over = _over_limit()
    assert not over, f"over cyclomatic complexity {LIMIT} (radon): {over}; split them"
