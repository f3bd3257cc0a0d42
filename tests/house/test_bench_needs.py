"""Every bench script says in its first lines what it needs beyond kvbench-core and stops with that line
(exit 2, no traceback) when something is missing (issue #32 §4)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
SCRIPTS = sorted(path for path in BENCH.glob("*.py") if path.name != "needs.py")


def needs_call(tree: ast.Module) -> ast.Call:
    """The module-level ``need(...)`` call."""
    for node in tree.body:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and \
                getattr(node.value.func, "id", None) == "need":
            return node.value
    raise AssertionError("no module-level need(...) call")


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: path.name)
def test_a_bench_script_says_what_it_needs_first_and_checks_it_before_importing_it(script: Path) -> None:
    tree = ast.parse(script.read_text())
    docstring = ast.get_docstring(tree) or ""
    needs_line = docstring.split("\n\n")[1]
    assert needs_line.startswith("Needs: ")
    call = needs_call(tree)
    assert isinstance(call.args[0], ast.Constant) and f"Needs: {call.args[0].value}." == needs_line
    first_import = next(index for index, node in enumerate(tree.body)
                        if isinstance(node, ast.Import | ast.ImportFrom)
                        and getattr(node, "module", None) not in ("__future__", "needs"))
    assert tree.body.index(next(node for node in tree.body if getattr(node, "value", None) is call)) < first_import


def test_a_missing_module_or_program_stops_the_script_with_its_line(tmp_path: Path) -> None:
    script = tmp_path / "probe.py"
    script.write_text(f"import sys\nsys.path.insert(0, {str(BENCH)!r})\nfrom needs import need\n"
                      "need('the frobnicator extra: pip install frob', modules=('no_such_module_kvb', 'json'), "
                      "programs=('no-such-program-kvb',))\nprint('ran')\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == ("probe.py: needs the frobnicator extra: pip install frob (missing: no_such_module_kvb, "
                           "no-such-program-kvb on PATH)\n")


@pytest.mark.parametrize("script", sorted(BENCH.glob("*.sh")), ids=lambda path: path.name)
def test_a_bench_shell_script_says_what_it_needs_on_its_second_line_and_stops_with_it(script: Path) -> None:
    lines = script.read_text().splitlines()
    assert lines[1].startswith("# Needs: ")
    said = lines[1].removeprefix("# Needs: ").split(":")[0]
    assert f"needs {said}" in script.read_text().split("\n", 2)[2]  # the refusal repeats the line
