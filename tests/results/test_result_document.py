"""The typed result document (results/document.py): a file read and written back is the same file, typed
fields read as the JSON says, and another format or a document the schema rejects is refused in one line."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from kvbench_core.cli import main
from kvbench_core.contracts.errors import InputFileError
from kvbench_core.results.document import RESULT_FORMAT, ResultDocument, TrialsSection
from kvbench_core.results.result_schema import result_schema


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """A real two-trial session's first trial file and its summary, as kvbench wrote them."""
    from tiny_spec import history_spec

    root = tmp_path_factory.mktemp("document")
    tier = {"name": "disk", "backend": "nvme", "capacity": "64MiB",
            "options": {"path": str(root / "cache"), "fsync": False}}
    spec = history_spec([tier], users=4, requests=40, trials=2, name="doc",
                        output={"directory": str(root / "out"), "progress": "off"})
    (root / "spec.yaml").write_text(yaml.safe_dump(spec))
    main(["run", str(root / "spec.yaml"), "--quiet"])  # the status is another test's business
    yield next((root / "out").glob("*-trial1.json")), next((root / "out").glob("*-summary.json"))


def test_the_format_is_the_schemas() -> None:
    assert result_schema()["properties"]["kvbench_result"]["const"] == RESULT_FORMAT


@pytest.mark.parametrize("which", [0, 1], ids=["trial", "summary"])
def test_a_written_result_reads_back_and_writes_the_same_bytes(which: int, written: tuple[Path, Path]) -> None:
    path = written[which]
    document = ResultDocument.read(path)
    assert json.dumps(document.to_json(), indent=2) + "\n" == path.read_text()


def test_typed_fields_say_what_the_json_says(written: tuple[Path, Path]) -> None:
    trial_path, summary_path = written
    trial, summary = ResultDocument.read(trial_path), ResultDocument.read(summary_path)
    data = json.loads(trial_path.read_text())
    assert (trial.run.status, trial.run.trial, trial.spec.sha256) == (data["run"]["status"], 1,
                                                                       data["spec"]["sha256"])
    assert trial.spec.verifies() and not trial.is_summary and trial.measured
    assert trial.bytes_per_token == data["model"]["bytes_per_token_all_ranks"]
    assert trial.measurements().to_json()["requests"] == data["metrics"]["requests"]
    assert isinstance(summary.trials, TrialsSection) and summary.is_summary and not summary.measured
    assert [run.file for run in summary.trials.runs] == [p["file"] for p in
                                                          json.loads(summary_path.read_text())["trials"]["runs"]]
    assert trial.verdict().status == trial.run.status
    with pytest.raises(dataclasses.FrozenInstanceError):
        trial.run.status = "completed"  # type: ignore[misc]


@pytest.mark.parametrize(("edit", "named"), [
    ({"kvbench_result": 999}, "kvbench_result is 999: this kvbench reads result format 2"),
    ({"kvbench_result": 1}, "kvbench_result is 1"),
    ({"run": "splendid"}, "schema: run: 'splendid' is not of type 'object'"),
])
def test_another_format_or_a_schema_violation_is_refused_in_one_line(edit: dict[str, object], named: str,
                                                                    written: tuple[Path, Path],
                                                                    tmp_path: Path) -> None:
    path = tmp_path / "edited.json"
    path.write_text(json.dumps({**json.loads(written[0].read_text()), **edit}))
    with pytest.raises(InputFileError) as refused:
        ResultDocument.read(path)
    assert named in str(refused.value) and "\n" not in str(refused.value)
    assert str(refused.value).startswith(f"{path}: not a kvbench result this version reads")


def test_a_status_no_rule_defines_is_refused(written: tuple[Path, Path]) -> None:
    data = json.loads(written[0].read_text())
    data["run"]["status"] = "splendid"
    with pytest.raises(InputFileError, match="run/status: 'splendid' is not one of"):
        ResultDocument.from_json(data, "edited.json")


def test_a_new_document_writes_only_the_sections_it_has(written: tuple[Path, Path]) -> None:
    """A document built in code (not read) writes every required section and no empty optional one."""
    read = ResultDocument.read(written[0])
    built = dataclasses.replace(read, order=(), extra={})
    assert set(built.to_json()) == set(json.loads(written[0].read_text())) - {"scale_out", "clients", "trials"}


def test_the_sections_reports_read_are_the_jsons_and_empty_where_absent(written: tuple[Path, Path]) -> None:
    trial_path, summary_path = written
    trial, summary = ResultDocument.read(trial_path), ResultDocument.read(summary_path)
    data = json.loads(trial_path.read_text())
    metrics = data["metrics"]
    assert (trial.window, trial.requests, trial.request_latency, trial.tiers, trial.class_figures,
            trial.histograms) == (metrics["window"], metrics["requests"], metrics["latency_ms"], metrics["tiers"],
                                  metrics["qos"], metrics["histograms"])
    assert list(trial.series) == data["timeseries"] and list(trial.tiers) == ["dram", "disk"]
    assert trial.io_log == data["spec"]["resolved"]["output"].get("io_log")
    assert (summary.window, summary.tiers, summary.series, summary.autoscaler_summary, summary.trajectory) == (
        {}, {}, (), {}, ())


def test_of_takes_a_document_as_it_is_and_reads_json_once(written: tuple[Path, Path]) -> None:
    document = ResultDocument.read(written[0])
    assert ResultDocument.of(document) is document
    assert ResultDocument.of(document.to_json()) == document
