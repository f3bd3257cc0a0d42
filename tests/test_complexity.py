"""No function over cyclomatic complexity 15 (radon's count) in results/ and reports/ (issue #28, done-when).

radon counts what ruff's mccabe check (C901, pyproject.toml) does not: each ``if`` and ``for`` of a
comprehension and each boolean operator, so an assembler that builds a document in one expression scores
high here while passing ruff.  ``KNOWN`` lists the functions still above the limit, each with the work
that is to bring it under: a new one fails this test; whoever brings a listed one under the limit removes
its entry, so the list only shrinks.
"""

from __future__ import annotations

from pathlib import Path

import pytest

radon = pytest.importorskip("radon.complexity", reason="radon is in the test extra: pip install -e '.[test]'")

CORE = Path(__file__).resolve().parents[1] / "kvbench_core"
LIMIT = 15
#: "<file>:<function>" still above the limit (issue #28: results/ and reports/), and whose they are now.
KNOWN = {
    "results/metrics.py:Metrics.merge",  # helper A's by-time booking is rewriting the merge
    "results/status.py:decide",  # helper B1's status rules
    "results/detected_declaration.py:network_fields",  # the declaration that fills itself (issue #31 §4)
    "results/merge.py:_grid_point",  # the merged series on one wall-clock grid (issue #28 §4, in progress)
    "results/merge.py:_merge_series",
    "reports/capacity.py:curve_figure",  # helper C1's capacity curve
    "reports/capacity.py:curve_numbers",
    "reports/verdicts.py:dominant_share",  # helper C1's verdicts
    "reports/verdicts.py:next_step",
    "reports/verdicts.py:_codec_of_host",
    "reports/compare.py:caveats",  # helper E's compare
    "reports/compare.py:compare",
    "reports/compare_specs.py:effective",
    "reports/compare_plots.py:class_p95",
}


def _over_limit() -> dict[str, int]:
    found = {}
    for room in ("results", "reports"):
        for path in sorted((CORE / room).glob("*.py")):
            for block in radon.cc_visit(path.read_text()):
                for one in (block, *getattr(block, "methods", ())):
                    name = f"{one.classname}.{one.name}" if getattr(one, "classname", None) else one.name
                    if one.complexity > LIMIT:
                        found[f"{room}/{path.name}:{name}"] = one.complexity
    return found


def test_no_new_function_in_results_or_reports_is_over_the_limit() -> None:
    new = {name: score for name, score in _over_limit().items() if name not in KNOWN}
    assert not new, f"over cyclomatic complexity {LIMIT} (radon): {new}; split them"

