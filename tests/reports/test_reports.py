"""Reports: the result schema, xlsx workbooks (sheets), png plots (valid images), ``kvbench report``."""

from __future__ import annotations

import copy
import json
import re
import struct
import zipfile
from pathlib import Path
from typing import Any

import pytest
from tiny_spec import assert_valid_result, result_validator, tiny_spec

import kvbench_core.reports as reports
from kvbench_core.cli import main
from kvbench_core.contracts.errors import MissingDependency
from kvbench_core.reports.aggregate import summarize_trials
from kvbench_core.reports.plots import plot_result
from kvbench_core.reports.xlsx import write_workbook
from kvbench_core.results.document import ResultDocument
from kvbench_core.results.merge import ClientReport, merge_results
from kvbench_core.scaleout.clients import client_seed

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """One real tiny run that asked for every output format: (its JSON path, the result)."""
    tmp = tmp_path_factory.mktemp("reports")
    spec = tiny_spec(tmp, output={"directory": str(tmp / "out"), "interval": 0.3, "progress": "off",
                                  "formats": ["json", "xlsx", "png"]})
    assert main(["run", str(spec), "--quiet"]) == 0
    path = next((tmp / "out").glob("*.json"))
    return path, json.loads(path.read_text())


def sheet_names(path: Path) -> list[str]:
    with zipfile.ZipFile(path) as book:
        workbook = book.read("xl/workbook.xml").decode()
    return re.findall(r'<sheet name="([^"]+)"', workbook)


def sheet_rows(path: Path, index: int) -> int:
    with zipfile.ZipFile(path) as book:
        return book.read(f"xl/worksheets/sheet{index}.xml").decode().count("<row ")


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk (checks it really is a PNG)."""
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC and data[12:16] == b"IHDR", path
    return struct.unpack(">II", data[16:24])


def test_a_result_matches_the_published_schema(run: tuple[Path, dict[str, Any]]) -> None:
    _, result = run
    assert_valid_result(result)
    broken = copy.deepcopy(result)
    del broken["metrics"]["headline"]["cache_hit_rate"]
    broken["metrics"]["tiers"]["nvme"]["read"]["ops"] = -1
    assert len(list(result_validator().iter_errors(broken))) == 2


def test_output_formats_write_the_workbook_and_plots_next_to_the_json(run: tuple[Path, dict[str, Any]]) -> None:
    path, _ = run
    assert sheet_names(path.with_suffix(".xlsx")) == [  # Latency added deliberately (CDF points and charts)
        "Summary", "Tiers", "Latency", "QoS", "Timeseries", "Autoscaler", "Spec", "Declaration", "Environment"]
    assert sheet_rows(path.with_suffix(".xlsx"), 2) == 1 + 2 * 2  # header + (dram, nvme) x (read, write)
    for name in ("throughput", "latency-cdf", "occupancy"):
        width, height = png_size(path.with_name(f"{path.stem}-{name}.png"))
        assert width >= 800 and height >= 250
    assert not path.with_name(f"{path.stem}-autoscaler.png").exists()  # no autoscaler, no empty plot


def test_merged_and_trials_results_get_their_own_sheets_and_plots(run: tuple[Path, dict[str, Any]],
                                                                   tmp_path: Path) -> None:
    path, result = run
    spec = dict(result["spec"]["resolved"], clients=2)
    clients = [ClientReport(index=i, run_id=f"x-c{i}", seed=client_seed(42, i), users=3, directories=[],
                            result=ResultDocument.unchecked(copy.deepcopy(result))) for i in range(2)]
    merged = merge_results(clients, mode="local", label="client", run_id="x", trial=1,
                           as_written=result["spec"]["as_written"], spec=spec, started_at=0.0)
    assert "Clients" in sheet_names(write_workbook(ResultDocument.of(merged), tmp_path / "merged.xlsx"))
    summary = summarize_trials([ResultDocument.of(result)] * 2, [path, path], session_id="s", requested=2)
    assert_valid_result(summary.to_json())
    assert sheet_names(write_workbook(summary, tmp_path / "summary.xlsx")) == [
        "Summary", "Trials", "Spec", "Declaration", "Environment"]
    assert [p.name for p in plot_result(summary, tmp_path, "summary")] == ["summary-trials.png"]


def test_report_command_makes_a_comparison_workbook_and_plots(run: tuple[Path, dict[str, Any]], tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    path, result = run
    other = tmp_path / "other.json"
    other.write_text(json.dumps(result))
    out = tmp_path / "compare.xlsx"
    assert main(["report", str(path), str(other), "--xlsx", str(out)]) == 0
    assert sheet_names(out) == ["Comparison"]
    assert sheet_rows(out, 1) == 2 + 2  # title, header, one row per result
    assert capsys.readouterr().out.split() == [str(out)]
    assert main(["report", str(other), "--png", str(tmp_path / "png")]) == 0
    assert capsys.readouterr().out.split() == [str(tmp_path / "png" / f"other-{name}.png")
                                               for name in ("throughput", "latency-cdf", "occupancy")]


def test_an_output_path_that_cannot_take_the_file_is_one_line_and_leaves_nothing(
        run: tuple[Path, dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, _ = run
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    (tmp_path / "a-dir").mkdir()
    for option, target, cause in (("--xlsx", tmp_path / "a-dir", "Is a directory"),
                                  ("--xlsx", a_file / "x.xlsx", ""), ("--png", a_file, "File exists")):
        assert main(["report", str(path), option, str(target)]) == 2
        err = capsys.readouterr().err
        assert err.startswith("kvbench: error: ") and cause in err and len(err.splitlines()) == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-dir", "a-file"]
    assert list((tmp_path / "a-dir").iterdir()) == []


def test_missing_reports_extra_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_xlsxwriter(name: str) -> Any:
        raise ImportError(name)

    monkeypatch.setattr(reports.importlib, "import_module", no_xlsxwriter)
    with pytest.raises(MissingDependency, match=r"xlsxwriter.*pip install 'kvbench-core\[reports\]'"):
        reports.require_formats(["json", "xlsx"])
    reports.require_formats(["json"])  # json alone needs nothing


def sheet_xml(path: Path, index: int) -> str:
    with zipfile.ZipFile(path) as book:
        return book.read(f"xl/worksheets/sheet{index}.xml").decode()


def test_workbook_numbers_carry_their_units_format_and_native_charts(run: tuple[Path, dict[str, Any]]) -> None:
    """Units in the headers (GiB capacity, GB, GB/s, ms, IOPS), number formats instead of General, and
    xlsxwriter's own charts: one CDF per tier and one for the QoS classes, two over the timeseries."""
    path, result = run
    book = path.with_suffix(".xlsx")
    with zipfile.ZipFile(book) as archive:
        names = archive.namelist()
        styles = archive.read("xl/styles.xml").decode()
        shared = archive.read("xl/sharedStrings.xml").decode()
    for header in ("capacity GiB", "IOPS", "device commands/s", "bandwidth GB/s", "total p95 ms",
                   "cumulative fraction", "generated tokens/s", "dram read GB/s", "nvme write p95 ms"):
        assert f">{header}<" in shared, header
    assert {'formatCode="#,##0.000"', 'formatCode="#,##0"', 'formatCode="0.0%"'} <= set(
        re.findall(r'formatCode="[^"]+"', styles))
    assert len([n for n in names if n.startswith("xl/charts/chart")]) == len(result["metrics"]["tiers"]) + 1 + 2
    tiers_sheet = sheet_xml(book, 2)
    styled = re.findall(r'<c r="[A-Z]+\d+" s="(\d+)"', tiers_sheet)
    assert styled and all(style != "0" for style in styled)  # every number cell has its format


def test_tier_iops_are_entry_operations_per_second_of_the_active_window(run: tuple[Path, dict[str, Any]]) -> None:
    from kvbench_core.reports.key_figures import op_figures
    from kvbench_core.reports.xlsx import _number_format

    _, result = run
    for tier in result["metrics"]["tiers"].values():
        for op in ("read", "write"):
            stats, figures = tier[op], op_figures(tier, op)
            assert figures["iops"] * stats["active_window_s"] == pytest.approx(stats["ops"])
            # the same window as the bandwidth, whose GB are the device's in the window (booked by time, #28 §1)
            assert figures["gb"] == stats["device"]["window"]["bytes"] / 1e9
            assert figures["gb"] / stats["active_window_s"] == pytest.approx(figures["bandwidth_gb_s"])
            assert figures["capacity_gib"] * (1 << 30) == tier["capacity_bytes"]
    assert _number_format("read p95 ms") == _number_format("capacity GiB") == "#,##0.000"
    assert _number_format("IOPS") == _number_format("ops") == "#,##0"
    assert _number_format("Cache hit rate") == "0.0%" and _number_format("tier") is None


def test_report_never_overwrites_an_existing_file_unless_forced(run: tuple[Path, dict[str, Any]], tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    _, result = run
    copied = tmp_path / "mine.json"
    copied.write_text(json.dumps(result))
    foreign = tmp_path / "mine-latency-cdf.png"
    foreign.write_text("someone's own file")
    assert main(["report", str(copied)]) == 2
    err = capsys.readouterr().err
    assert f"{foreign}: already exists" in err and "--force" in err and len(err.splitlines()) == 1
    assert foreign.read_text() == "someone's own file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine-latency-cdf.png", "mine.json"]  # nothing written
    assert main(["report", str(copied), "--force"]) == 0
    assert foreign.read_bytes().startswith(b"\x89PNG")
