"""The answer, said (issue #28 §6, #33 §1): a judged search's answer and curve in the summary, the HTML report,
the workbook and the plots; a starved class shows as starved; the advice fits how the run set its load."""

from __future__ import annotations

import copy
import zipfile
from pathlib import Path
from typing import Any

import pytest
from conftest import small_spec
from test_cli_summary import result as summary_result

from kvbench_core.cli.run_cmd import summarize
from kvbench_core.reports.capacity import answer_line, capacity_of, curve_lines, curve_numbers
from kvbench_core.reports.verdicts import explain
from kvbench_core.results.document import ResultDocument


@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A real run of the sla_search autoscaler on a DRAM tier (every step within: the answer is a lower bound)."""
    from kvbench_core.engine.run.runner import Runner
    from kvbench_core.results.result import build_result
    from kvbench_core.runspec.loader import resolve, validate
    from kvbench_core.runspec.plan import plan_run

    tmp = tmp_path_factory.mktemp("searched")
    raw = small_spec(duration=4, workload={"users": 2},
                     autoscaler={"name": "sla_search", "options": {"interval_s": 0.5}},
                     output={"directory": str(tmp)})
    del raw["requests"]
    validate(raw)
    state = Runner(plan_run(resolve(raw, str(tmp)))).run()
    assert state.crash is None
    return build_result(state, raw)


def test_the_summary_says_the_answer_of_a_judged_search(searched: dict[str, Any]) -> None:
    summary = capacity_of(ResultDocument.of(searched))
    assert summary is not None and summary["steps"], searched["autoscaling"]
    line = answer_line(ResultDocument.of(searched))
    assert line is not None and line.startswith("max users within SLA: ")
    assert f"  {line}" in summarize(searched).splitlines()
    headers, rows = curve_numbers(ResultDocument.of(searched))
    assert headers[0] == "users" and [row[0] for row in rows] == sorted(s["load"] for s in summary["steps"])
    assert curve_lines(ResultDocument.of(searched))[0].split()[0] == "users"


def test_the_answer_is_what_its_steps_say_and_an_edited_one_fails_the_checks(searched: dict[str, Any]) -> None:
    from kvbench_core.results.invariants import run_checks

    names = {item["name"]: item["passed"] for item in searched["checks"]["items"]}
    assert names["capacity_answer"] and names["capacity_ci_low"] and names["capacity_ci_high"]
    edited = copy.deepcopy(searched)
    edited["autoscaling"]["summary"]["max_users_within_sla"] += 7
    assert any(line.startswith("capacity_answer: ") for line in run_checks(edited)["violations"])


def test_every_report_carries_the_curve(searched: dict[str, Any], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    pytest.importorskip("xlsxwriter")
    from kvbench_core.reports.html import render_html
    from kvbench_core.reports.plots import figures
    from kvbench_core.reports.xlsx import write_workbook

    page = render_html(ResultDocument.of(searched))
    assert "<h2>Capacity</h2>" in page and answer_line(ResultDocument.of(searched)).split(",")[0] in page
    assert "capacity" in dict(figures(ResultDocument.of(searched)))
    book = write_workbook(ResultDocument.of(searched), tmp_path / "r.xlsx")
    with zipfile.ZipFile(book) as archive:
        workbook = archive.read("xl/workbook.xml").decode()
        assert 'name="Capacity"' in workbook
        assert any(name.startswith("xl/charts/") for name in archive.namelist())


def test_a_run_without_a_judged_search_says_no_answer() -> None:
    data = summary_result(queue_ms=10.0, storage_ms=10.0, sla_met=True)
    assert answer_line(ResultDocument.of(data)) is None and "max users within SLA" not in summarize(data)
    data["autoscaling"] = {"summary": {"peak_users": 8}, "trajectory": []}  # the peak-throughput autoscaler
    assert answer_line(ResultDocument.of(data)) is None


def test_a_starved_class_shows_as_starved() -> None:
    data = summary_result(queue_ms=10.0, storage_ms=400.0, sla_met=False)
    assert "STARVED" not in summarize(data)  # interactive issued nothing: nothing to say about it
    data["workload"] = {"arrivals": {"issued_by_qos": {"interactive": 7, "responsive": 10}}}
    assert "interactive STARVED (0 of 7 issued served)" in summarize(data)


def test_the_advice_fits_how_the_load_is_set() -> None:
    met = summary_result(queue_ms=10.0, storage_ms=10.0, sla_met=True)
    assert explain(ResultDocument.of(met))[0].next_step.startswith(
        "next: raise workload.users (8) to find the load where it stops")
    scaled = copy.deepcopy(met)
    scaled["spec"]["resolved"]["autoscaler"] = {"name": "qos"}
    advice = explain(ResultDocument.of(scaled))[0].next_step
    assert "autoscaler:" not in advice and "the qos autoscaler chose the load" in advice
    open_loop = summary_result(queue_ms=400.0, storage_ms=10.0, sla_met=False)
    open_loop["spec"]["resolved"]["workload"]["options"] = {"arrival": {"process": "poisson", "rate": 40}}
    advice = explain(ResultDocument.of(open_loop))[0].next_step
    assert "lower the arrival rate (workload.options.arrival.rate, 40/s)" in advice
    assert "workload.users" not in advice
    trace = summary_result(queue_ms=400.0, storage_ms=10.0, sla_met=False)
    trace["declaration"] = {"workload": {"arrival_process": {"value": "open loop (workload trace timestamps)"}}}
    advice = explain(ResultDocument.of(trace))[0].next_step
    assert "lower the arrival rate (workload.options.speedup of the trace)" in advice
