"""The HTML report and the workbook say which rule decided the status, in the terminal summary's words, and
list the result's warnings and failed invariants (issue #28 §2); a clean completed run shows none."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

from kvbench_core.cli.run_cmd import summarize
from kvbench_core.reports.html import render_html
from kvbench_core.reports.xlsx import write_workbook
from kvbench_core.results.document import ResultDocument

GOLDEN = Path(__file__).parent / "golden" / "run.json"
REASON = "5 of 25 requests did not complete: 5 failed on storage errors"


def _degraded() -> ResultDocument:
    data = json.loads(GOLDEN.read_text())
    data["run"].update(status="degraded", status_rule="failed_requests", status_reason=REASON)
    data["warnings"] = ["declared <nvme> contradicts detected"]
    data["checks"] = {**data.get("checks", {}), "passed": False, "violations": ["command_count.s3.write (1 vs 2)"]}
    return ResultDocument.of(data)


def _sheets(document: ResultDocument, tmp_path: Path) -> str:
    with zipfile.ZipFile(write_workbook(document, tmp_path / "book.xlsx")) as book:
        return book.read("xl/sharedStrings.xml").decode()


def test_degraded_reports_say_the_summarys_rule_and_list_warnings_and_invariants(tmp_path: Path) -> None:
    document = _degraded()
    assert REASON in summarize(document).splitlines()[0]
    page = render_html(document)
    assert f"status rule: {REASON}" in page
    assert "<li>declared &lt;nvme&gt; contradicts detected</li>" in page
    assert "<li>command_count.s3.write (1 vs 2)</li>" in page
    strings = _sheets(document, tmp_path)
    for text in ("status rule", REASON, "declared &lt;nvme&gt; contradicts detected", "failed invariants",
                 "command_count.s3.write (1 vs 2)"):
        assert text in strings


def test_completed_run_without_warnings_lists_none(tmp_path: Path) -> None:
    data = json.loads(GOLDEN.read_text())
    data["warnings"], data["checks"] = [], {**data.get("checks", {}), "passed": True, "violations": []}
    document = ResultDocument.of(data)
    page = render_html(document)
    assert document.run.status == "completed"
    assert "<h2>Warnings</h2>" not in page and "<h2>Failed invariants</h2>" not in page
    assert "status rule: " in page
    assert "command_count" not in _sheets(document, tmp_path)
