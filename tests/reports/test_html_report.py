"""The self-contained HTML report: written by ``output.formats: [html]`` and ``kvbench report --html``,
everything inline (plots as data URIs), and rendered by a real headless Chromium without console errors,
with a screenshot taken.  Chromium comes from the distribution (scripts/install-system-deps.sh); a
machine without it fails here rather than skipping, so CI cannot pass without the browser check."""

from __future__ import annotations

import base64
import copy
import html
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tiny_spec import tiny_spec

from kvbench_core.cli import main
from kvbench_core.reports.html import render_html
from kvbench_core.reports.key_figures import HEADLINE
from kvbench_core.results.document import ResultDocument

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
                  "--enable-logging=stderr", "--v=0"]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """A real tiny run that asked for the HTML report: (its HTML path, the result)."""
    tmp = tmp_path_factory.mktemp("html")
    spec = tiny_spec(tmp, output={"directory": str(tmp / "out"), "interval": 0.3, "progress": "off",
                                  "formats": ["json", "html"]})
    assert main(["run", str(spec), "--quiet"]) == 0
    path = next((tmp / "out").glob("*.json"))
    return path.with_suffix(".html"), json.loads(path.read_text())


def chromium(page: Path, profile: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """Load ``page`` in a fresh headless Chromium profile (nothing of the machine's own browser state)."""
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    assert binary, "chromium is not installed: run scripts/install-system-deps.sh (apt-get install chromium)"
    return subprocess.run([binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *extra, page.as_uri()],
                          capture_output=True, text=True, timeout=120, check=False)


def console_messages(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


def test_the_report_is_one_self_contained_file(report: tuple[Path, dict[str, Any]]) -> None:
    path, result = report
    page = path.read_text()
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)  # nothing fetched from anywhere
    images = re.findall(r'<img alt="([^"]+)" src="data:image/png;base64,([^"]+)"', page)
    assert [name for name, _ in images] == ["throughput", "latency-cdf", "occupancy"]
    assert all(base64.b64decode(data)[:8] == b"\x89PNG\r\n\x1a\n" for _, data in images)
    for heading in ("QoS verdicts", "Headline figures", "Tiers", "Plots", "Workload", "Infrastructure declaration",
                    "Environment", "Spec"):
        assert f"<h2>{heading}</h2>" in page
    for figure in HEADLINE:  # every headline figure with its definition beside it
        assert f"<code>{figure.key}</code>" in page and html.escape(figure.definition) in page
    assert result["spec"]["sha256"] in page and result["environment"]["kernel"] in page


def test_text_from_the_result_is_escaped(report: tuple[Path, dict[str, Any]]) -> None:
    _, result = report
    hostile = copy.deepcopy(result)
    hostile["run"]["name"] = "<script>alert(1)</script>"
    page = render_html(ResultDocument.of(hostile))
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_report_html_writes_next_to_the_result_or_to_the_path_given(
        report: tuple[Path, dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, result = report
    copied = tmp_path / "copied.json"
    copied.write_text(json.dumps(result))
    assert main(["report", str(copied), "--html"]) == 0
    assert capsys.readouterr().out.split() == [str(tmp_path / "copied.html")]
    assert main(["report", str(copied), "--html", str(tmp_path / "named.html")]) == 0
    assert (tmp_path / "named.html").read_text().startswith("<!DOCTYPE html>")


@pytest.mark.slow
def test_it_renders_in_headless_chromium_without_console_errors(report: tuple[Path, dict[str, Any]],
                                                                tmp_path: Path) -> None:
    path, _ = report
    loaded = chromium(path, tmp_path / "profile-dom", "--dump-dom")
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    assert 'data-plots="ok"' in loaded.stdout  # the page's own check: every embedded plot decoded
    assert console_messages(loaded.stderr) == []
    shot = tmp_path / "report.png"
    taken = chromium(path, tmp_path / "profile-shot", "--window-size=1280,2400", f"--screenshot={shot}")
    assert taken.returncode == 0 and shot.exists(), taken.stderr[-2000:]
    from matplotlib.image import imread

    pixels = imread(shot)
    assert pixels.shape[:2] == (2400, 1280)
    assert float(np.std(pixels[..., :3])) > 0.05  # text, tables and plots, not a blank page


@pytest.mark.slow
def test_the_browser_check_catches_a_plot_that_does_not_render(report: tuple[Path, dict[str, Any]],
                                                               tmp_path: Path) -> None:
    """The console check can fail: a corrupt embedded plot is reported by the page and seen here."""
    path, _ = report
    broken = tmp_path / "broken.html"
    broken.write_text(re.sub(r'src="data:image/png;base64,[^"]+"', 'src="data:image/png;base64,AAAA"',
                             path.read_text(), count=1))
    loaded = chromium(broken, tmp_path / "profile", "--dump-dom")
    assert 'data-plots="broken"' in loaded.stdout
    assert any("plot did not render: throughput" in line for line in console_messages(loaded.stderr))


def test_a_trials_summary_says_its_headline_is_the_median(report: tuple[Path, dict[str, Any]]) -> None:
    from kvbench_core.reports.aggregate import summarize_trials

    path, result = report
    summary = summarize_trials([ResultDocument.of(result)] * 2, [path, path], session_id="s", requested=2)
    page = render_html(summary)
    assert "<h2>Headline figures (median of 2 trials)</h2>" in page
    assert '<img alt="trials"' in page
