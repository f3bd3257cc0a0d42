"""``kvbench compare --html FILE``: one self-contained page with two real runs' curves overlaid (latency
tails per tier operation, bandwidth over time, per-class p95), their caveats and key figures, rendered by
headless Chromium without a broken plot; an existing file is never replaced."""

from __future__ import annotations

import base64
import contextlib
import io
import re
from pathlib import Path

import numpy as np
import pytest
from test_html_report import chromium, console_messages
from tiny_spec import tiny_spec

from kvbench_core.cli import main


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, list[str]]:
    """Two tiny runs (3 and 4 users) compared into a page: (its path, its text, the result labels)."""
    root = tmp_path_factory.mktemp("compare-html")
    paths = []
    for users in (3, 4):
        where = root / f"u{users}"
        where.mkdir()
        spec = tiny_spec(where, workload={"users": users})
        assert main(["run", str(spec), "--quiet"]) == 0
        paths.append(str(next((where / "out").glob("*.json"))))
    target = root / "compare.html"
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        assert main(["compare", *paths, "--html", str(target)]) == 0
    assert f"page: {target}" in err.getvalue()
    return target, target.read_text(), [Path(p).stem for p in paths]


def test_the_page_overlays_every_results_curves(page: tuple[Path, str, list[str]]) -> None:
    _, text, labels = page
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", text)  # nothing fetched from anywhere
    images = re.findall(r'<img alt="([^"]+)" src="data:image/png;base64,([^"]+)"', text)
    assert [name for name, _ in images] == ["latency-tails", "bandwidth", "class-p95"]
    assert all(base64.b64decode(data)[:8] == b"\x89PNG\r\n\x1a\n" for _, data in images)
    for label in labels:
        assert text.count(label) >= 3  # title, results table, key figures' column
    assert "workload.users 4 vs the baseline&#x27;s 3" in text  # the caveat, escaped
    assert "x)</td>" in text  # ratios against the first


def test_the_overlays_draw_one_curve_per_result(page: tuple[Path, str, list[str]]) -> None:
    from kvbench_core.reports.compare_plots import bandwidth, class_p95, latency_tails
    from kvbench_core.results.document import ResultDocument

    results = []
    for label in page[2]:
        path = next(page[0].parent.glob(f"u*/out/{label}.json"))
        results.append((label, ResultDocument.read(path)))
    tails = latency_tails(results)
    first = tails.axes[0]
    assert [line.get_label().split(" (")[0] for line in first.get_lines() if not line.get_label().startswith("_")] \
        == page[2]
    assert len([a for a in bandwidth(results).axes if a.get_lines()]) == 2 * len(results[0][1].tiers)
    assert len(class_p95(results).axes[0].patches) % len(results) == 0


def test_an_existing_file_is_never_replaced(page: tuple[Path, str, list[str]], tmp_path: Path) -> None:
    mine = tmp_path / "mine.html"
    mine.write_text("mine")
    results = [str(p) for p in sorted(page[0].parent.glob("u*/out/*.json"))]
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        assert main(["compare", *results, "--html", str(mine)]) == 2
    assert "never overwrites" in err.getvalue() and mine.read_text() == "mine"


@pytest.mark.slow
def test_it_renders_in_headless_chromium(page: tuple[Path, str, list[str]], tmp_path: Path) -> None:
    path, _, _ = page
    loaded = chromium(path, tmp_path / "profile-dom", "--dump-dom")
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    assert 'data-plots="ok"' in loaded.stdout
    assert console_messages(loaded.stderr) == []
    shot = tmp_path / "compare.png"
    taken = chromium(path, tmp_path / "profile-shot", "--window-size=1280,2400", f"--screenshot={shot}")
    assert taken.returncode == 0 and shot.exists(), taken.stderr[-2000:]
    from matplotlib.image import imread

    assert float(np.std(imread(shot)[..., :3])) > 0.05
