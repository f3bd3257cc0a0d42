"""Live progress: every phase is shown, with per-tier bandwidth and p95; a terminal gets a rich bar with the
time left, a log one plain line every N seconds, ``--quiet`` nothing."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import small_spec

from kvbench_core.cli import main
from kvbench_core.engine.measure import progress
from kvbench_core.engine.measure.progress import ProgressPrinter, format_progress, fraction_done

POINT: dict[str, Any] = {
    "phase": "measure", "elapsed_s": 12.0, "duration_s": 20.0, "warmup_s": 5.0, "users": 8, "requests": 3,
    "e2e_p95_ms": {"responsive": 950.0}, "storage_p95_ms": 400.0, "queue": 2,
    "occupancy": {"dram": {"entries": 1, "bytes": 1}, "nvme": {"entries": 2, "bytes": 2}},
    "tiers": {"nvme": {"read_bytes_per_s": 2.5e8, "write_bytes_per_s": 1e8, "read_p95_ms": 120.0,
                       "write_p95_ms": None},
              "dram": {"read_bytes_per_s": 1.2e9, "write_bytes_per_s": 0.0, "read_p95_ms": 20.0,
                       "write_p95_ms": 5.5}},
}


class TTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_plain_line_shows_phase_time_and_each_tier_top_tier_first() -> None:
    line = format_progress(POINT)
    assert line.startswith("[measuring 17/25s] users 8  req 3  dram r 1.20 w 0.00 GB/s p95 r 20.0 ms w 5.5 ms  "
                           "nvme r 0.25 w 0.10 GB/s p95 r 120.0 ms w -  ")
    assert line.endswith("e2e p95 950.0 ms  storage p95 400.0 ms  queue 2")


@pytest.mark.parametrize(("phase", "expected"), [
    ({"phase": "setup"}, 0.0), ({"phase": "warmup", "t_s": 3.0}, 3.0), ({"phase": "warmup", "t_s": 9.0}, 5.0),
    ({"phase": "measure", "elapsed_s": 12.0}, 17.0), ({"phase": "measure", "elapsed_s": 30.0}, 25.0),
    ({"phase": "drain"}, 25.0), ({"phase": "results"}, 25.0)])
def test_the_bar_runs_over_warm_up_and_duration_and_never_past_the_end(phase: dict[str, Any],
                                                                       expected: float) -> None:
    assert fraction_done({"duration_s": 20.0, "warmup_s": 5.0, **phase}) == (expected, 25.0)
    assert fraction_done({"phase": "measure", "duration_s": None}) is None  # a request-count run: no bar


def test_without_a_terminal_auto_prints_one_line_every_n_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [100.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: clock[0])
    stream = io.StringIO()
    printer = ProgressPrinter("auto", stream=stream, plain_every_s=10.0)
    for _ in range(25):  # 25 one-second intervals
        clock[0] += 1.0
        printer(POINT)
    assert len(stream.getvalue().splitlines()) == 2  # at 10 s and 20 s
    clock[0] += 1.0
    printer.phase("drain")  # a new phase of a long run: its line at once
    clock[0] += 0.5
    printer.phase("results")
    assert [line.split("]")[0] for line in stream.getvalue().splitlines()[2:]] == ["[drain 25/25s",
                                                                                 "[writing results 25/25s"]
    printer.finish()


def test_a_short_run_without_a_terminal_prints_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [100.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: clock[0])
    stream = io.StringIO()
    printer = ProgressPrinter("auto", stream=stream, plain_every_s=10.0)
    for phase in ("setup", "warmup", "measure", "drain", "results"):
        clock[0] += 1.0
        printer({**POINT, "phase": phase})
    assert stream.getvalue() == ""


def test_off_prints_nothing_and_on_prints_every_point() -> None:
    quiet, chatty = io.StringIO(), io.StringIO()
    for mode, stream in (("off", quiet), (True, chatty)):
        printer = ProgressPrinter(mode, stream=stream)
        printer(POINT)
        printer.phase("drain")
        printer.finish()
    assert quiet.getvalue() == ""
    lines = chatty.getvalue().splitlines()
    assert lines[0].startswith("[measuring 17/25s]") and lines[1].startswith("[drain 25/25s]")
    assert "nvme r 0.25" in lines[1]  # a bare phase keeps the last figures


def test_on_a_terminal_a_rich_bar_with_time_left_and_a_tier_table() -> None:
    stream = TTY()
    printer = ProgressPrinter("auto", stream=stream, duration_s=20.0, warmup_s=5.0)
    printer.phase("setup")
    printer(POINT)
    printer.finish()
    text = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", stream.getvalue())
    assert "set-up" in text and "measuring" in text
    assert "8 s left" in text and "68%" in text  # 17 of 25 s
    assert re.search(r"dram\s+1\.20\s+0\.00\s+20\.0\s+5\.5", text)
    assert "e2e p95 per class: responsive 950.0 ms" in text


def test_a_run_shows_every_phase_in_order(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = small_spec(duration="1s", warmup="500ms", output={"progress": "on", "interval": 0.25,
                                                               "directory": str(tmp_path / "out")})
    del spec["requests"]
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert main(["run", str(path)]) == 0
    phases = [re.match(r"\[([a-z -]+?)(?: \d+/\d+s)?\]", line).group(1)
              for line in capsys.readouterr().err.splitlines() if line.startswith("[")]
    order = ["set-up", "warm-up", "measuring", "drain", "writing results"]
    assert [p for p in dict.fromkeys(phases)] == order
    assert phases.index("writing results") > max(i for i, p in enumerate(phases) if p == "measuring")
