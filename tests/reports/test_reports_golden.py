"""Results written before the reports read the typed ``ResultDocument`` (issue #28) render the same after.

``golden/`` holds five result files a real kvbench wrote (a two-tier run, a two-trial session's trials and
summary, an sla_search run) and ``golden/rendered.json``, what the reports and exports made of them then:
the HTML page's text (embedded plots cut to their names: a PNG's bytes are matplotlib's, not ours), every
workbook sheet's and chart's XML, the export tables' rows, the verdict lines, the capacity answer and curve,
the fio job (or the line refusing one), the comparison rows and caveats, the comparison page and workbook,
and the trials summary the session builds from the two trials.  Text a reader reads is filed whole,
so a failure shows the difference; the workbook's XML members and the export tables as their sha256.  A
report that reads a figure from another place, loses one or words it differently fails here, naming the
output.  After a deliberate change of a report's output, write the file again with
``.venv/bin/python tests/reports/test_reports_golden.py`` and say why in the commit.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import pytest

from kvbench_core.contracts.errors import UserError
from kvbench_core.exports.tables import RESULT_TABLES
from kvbench_core.reports.aggregate import summarize_trials
from kvbench_core.reports.capacity import answer_line, curve_lines
from kvbench_core.reports.compare import caveats, compare, rows_as_json
from kvbench_core.reports.compare_html import render_compare
from kvbench_core.reports.fio import distill
from kvbench_core.reports.html import render_html
from kvbench_core.reports.verdicts import explain, starved_classes
from kvbench_core.reports.xlsx import write_comparison, write_workbook
from kvbench_core.results.document import ResultDocument

GOLDEN = Path(__file__).parent / "golden"
RENDERED = GOLDEN / "rendered.json"
#: The result files, by the name the rendered outputs are filed under.
RESULTS = {"run": "run.json", "summary": "summary.json", "searched": "searched.json",
           "trial1": "golden-trials-20261202T072051-2a1111-trial1.json"}
TRIALS = ("golden-trials-20261202T072051-2a1111-trial1.json", "golden-trials-20261202T072051-2a1111-trial2.json")
#: Workbook members that hold what a reader sees (docProps holds the time the workbook was written).
SHEET_XML = re.compile(r"xl/(worksheets/sheet\d+|sharedStrings|charts/chart\d+|workbook)\.xml")


def _result(name: str) -> ResultDocument:
    return ResultDocument.read(GOLDEN / RESULTS[name])


def _without_images(page: str) -> str:
    return re.sub(r'src="data:image/png;base64,[^"]+"', 'src="data:image/png;base64,..."', page)


def _workbook(write: Any, what: Any) -> dict[str, str]:
    with tempfile.TemporaryDirectory() as directory:
        path = write(what, Path(directory) / "book.xlsx")
        with zipfile.ZipFile(path) as book:
            return {name: book.read(name).decode() for name in sorted(book.namelist()) if SHEET_XML.fullmatch(name)}


def _digest(value: Any) -> str:
    return "sha256:" + hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def _fio(document: ResultDocument) -> str:
    """The fio job distilled from the result, or the one line refusing it (a summary, memory tiers only)."""
    try:
        return distill(document)
    except UserError as refused:
        return f"refused: {refused}"


def render(name: str) -> dict[str, Any]:
    """Everything the reports and exports make of one golden result."""
    result = _result(name)
    return {"html": _without_images(render_html(result)),
            **{f"xlsx {member}": _digest(xml) for member, xml in _workbook(write_workbook, result).items()},
            **{f"table {table}": _digest(list(rows(name, result))) for table, rows in RESULT_TABLES.items()},
            "verdicts": [repr(verdict) for verdict in explain(result)], "starved": starved_classes(result),
            "answer": answer_line(result), "curve": curve_lines(result), "fio": _fio(result)}


def render_comparison() -> dict[str, Any]:
    """The comparison of the run, the summary and the search, in that order (the run is the baseline)."""
    labels = ["run", "summary", "searched"]
    results = [_result(label) for label in labels]
    labelled = list(zip(labels, results, strict=True))
    return {"rows": rows_as_json(compare(results), labels), "caveats": caveats(results, labels),
            "html": _without_images(render_compare(labelled)),
            **{f"xlsx {member}": _digest(xml) for member, xml in _workbook(write_comparison, labelled).items()}}


def render_summary() -> dict[str, Any]:
    """The summary of the two trials (its finish time is the clock's when it is built, so left out)."""
    paths = [GOLDEN / name for name in TRIALS]
    summary = summarize_trials([ResultDocument.read(path) for path in paths], paths, session_id="golden",
                               requested=2).to_json()
    return {"summary": {**summary, "run": {**summary["run"], "finished_at": None}}}


def rendered_now() -> dict[str, Any]:
    return {**{name: render(name) for name in RESULTS}, "comparison": render_comparison(),
            "trials summary": render_summary()}


@pytest.fixture(scope="module")
def golden() -> dict[str, Any]:
    return json.loads(RENDERED.read_text())


@pytest.mark.parametrize("name", list(RESULTS))
def test_a_result_written_before_renders_the_same(name: str, golden: dict[str, Any]) -> None:
    now = render(name)
    for output, then in golden[name].items():
        assert now[output] == then, f"{name}: the {output} output changed"


def test_a_comparison_of_results_written_before_renders_the_same(golden: dict[str, Any]) -> None:
    now = render_comparison()
    for output, then in golden["comparison"].items():
        assert now[output] == then, f"comparison: the {output} output changed"


def test_the_trials_summary_of_trials_written_before_is_the_same(golden: dict[str, Any]) -> None:
    assert render_summary() == golden["trials summary"]


if __name__ == "__main__":
    sys.exit(RENDERED.write_text(json.dumps(rendered_now(), indent=1, sort_keys=True) + "\n") and 0)
