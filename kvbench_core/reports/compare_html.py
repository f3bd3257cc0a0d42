"""``kvbench compare --html FILE``: the comparison as one self-contained page, with the curves overlaid.

What the terminal prints (every caveat, the key figures with their ratios to the baseline) and the three
overlays of ``compare_plots`` as embedded PNGs, with the single-result report's style and its one inline
script that reports a plot that did not decode.  Nothing is fetched from anywhere, so the page can be
mailed or attached as it is.  It is written through a temporary file and never replaces a file.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Sequence
from pathlib import Path

from kvbench_core.contracts.errors import UserError
from kvbench_core.reports.compare import Row, caveats, compare
from kvbench_core.reports.compare_plots import compare_figures
from kvbench_core.reports.html import CHECK_SCRIPT, STYLE, _e, _number, _table
from kvbench_core.reports.plots import png_bytes
from kvbench_core.results.document import ResultDocument
from kvbench_core.runspec.jsonfile import temp_beside


def _cell(row: Row, index: int) -> str:
    cell = row.cells[index]
    if cell.value is None or cell.value.value is None:
        return "-"
    text = _number(cell.value.value)
    if cell.ratio is not None:
        text += f" ({cell.ratio:.2f}x)"
    return text + (" overlap" if cell.overlap else "")


def render_compare(labelled: Sequence[tuple[str, ResultDocument]]) -> str:
    labels = [label for label, _ in labelled]
    documents = [document for _, document in labelled]
    runs = [[label, d.run.id, d.run.status, (d.model or {}).get("name")] for label, d in labelled]
    notes = caveats(documents, labels)
    warnings = ("<ul>" + "".join(f"<li>{_e(note)}</li>" for note in notes) + "</ul>" if notes
                else "<p>None: the runs differ in nothing that changes what a ratio means.</p>")
    rows = compare(documents)
    figures = "".join(f'<h3>{_e(name)}</h3><img alt="{_e(name)}" src="data:image/png;base64,'
                      f'{base64.b64encode(png_bytes(figure)).decode()}">' for name, figure in compare_figures(labelled))
    body = (f"<h1>kvbench compare: {_e(', '.join(labels))}</h1>"
            f"<p class=\"meta\">ratios are against the first result, {_e(labels[0])}</p>"
            f"<h2>Results</h2>{_table(['result', 'run id', 'status', 'model'], runs)}"
            f"<h2>Warnings</h2>{warnings}"
            f"<h2>Key figures</h2>"
            + _table(["figure", "unit", *labels], [[row.figure.label, row.figure.unit,
                                                     *(_cell(row, i) for i in range(len(labels)))] for row in rows])
            + f"<h2>Curves</h2>{figures or '<p>No result has curves to draw.</p>'}")
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{_e('kvbench compare: ' + ', '.join(labels))}</title><style>{STYLE}</style></head>\n"
            f"<body>\n{body}\n<script>{CHECK_SCRIPT}</script>\n</body></html>\n")


def write_compare_html(results: Sequence[tuple[str, ResultDocument]], path: Path) -> Path:
    """Write the page to ``path`` (refused when it exists: kvbench never replaces a file)."""
    if os.path.lexists(path):
        raise UserError(f"{path} exists; kvbench never overwrites a file it did not create: name a new file")
    page = render_compare(results)
    try:
        with temp_beside(path) as tmp:
            Path(tmp).write_text(page, encoding="utf-8")
            os.link(tmp, path)  # fails if the name appeared meanwhile, where a rename would replace it
    except FileExistsError:
        raise UserError(f"{path} exists; kvbench never overwrites a file it did not create") from None
    except OSError as error:
        raise UserError(f"{path}: cannot write the comparison page: {error.strerror or error}") from None
    return path
