"""Side-by-side comparison of results with ratios against the first (seed §5.2, "fast vs slow").

Each key figure (``reports.key_figures``) gets one row: its value in every
result and, for the second result on, the ratio to the first.  When both
results are trials summaries, a figure whose trial ranges (min..max)
overlap is flagged: with the trial-to-trial variation the seed reports
(CV 50-125 %), such a ratio is not a real difference.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kvbench_core.reports.compare_specs import differences
from kvbench_core.reports.key_figures import Figure, FigureValue, figure_values
from kvbench_core.results.document import ResultDocument


@dataclass(frozen=True)
class Cell:
    """One result's entry in a row; ratio and overlap are relative to the first result."""

    value: FigureValue | None
    ratio: float | None = None
    overlap: bool | None = None  # None: no trial ranges to judge by


@dataclass(frozen=True)
class Row:
    figure: Figure
    cells: list[Cell]


def ranges_overlap(a: FigureValue, b: FigureValue) -> bool | None:
    """Whether the two trial ranges overlap; None unless both come from several trials."""
    if a.trials < 2 or b.trials < 2 or None in (a.low, a.high, b.low, b.high):
        return None
    return a.low <= b.high and b.low <= a.high


def compare(documents: Sequence[ResultDocument]) -> list[Row]:
    """Rows of key figures present in any result, in the order of the first result that has them."""
    values = [figure_values(document) for document in documents]
    keys = list(dict.fromkeys(key for v in values for key in v))
    rows = []
    for key in keys:
        cells = [v.get(key) for v in values]
        if all(c is None or c.value is None for c in cells):
            continue
        base = cells[0]
        figure = next(c.figure for c in cells if c is not None)
        rows.append(Row(figure, [Cell(base), *(_against(base, cell) for cell in cells[1:])]))
    return rows


def _against(base: FigureValue | None, cell: FigureValue | None) -> Cell:
    """One later result's cell: its ratio to the baseline and whether their trial ranges overlap, or the
    value alone where either side has no value to divide (a ratio of 0 baseline is None, not infinite)."""
    if cell is None or base is None or cell.value is None or base.value is None:
        return Cell(cell)
    ratio = cell.value / base.value if base.value else None
    return Cell(cell, ratio, ranges_overlap(base, cell))


def rows_as_json(rows: list[Row], labels: list[str]) -> list[dict[str, Any]]:
    """Machine-readable form of ``compare``: one dict per figure."""
    out = []
    for row in rows:
        entries = []
        for label, cell in zip(labels, row.cells, strict=True):
            value = cell.value
            entries.append({"result": label, "value": None if value is None else value.value,
                            "min": None if value is None else value.low, "max": None if value is None else value.high,
                            "trials": 0 if value is None else value.trials,
                            "ratio_to_first": cell.ratio, "trial_ranges_overlap": cell.overlap})
        out.append({"metric": row.figure.key, "label": row.figure.label, "unit": row.figure.unit,
                    "better": row.figure.better, "results": entries})
    return out


def _tier_chain(spec: Mapping[str, Any]) -> list[tuple[str, Any]]:
    return [(t.get("name"), t.get("capacity")) for t in (spec.get("cache") or {}).get("tiers") or []]


def spec_differences(base: ResultDocument, other: ResultDocument) -> list[str]:
    """Every difference between what two results' runs used that changes the meaning of a ratio between
    them (``compare_specs.differences``: the resolved spec completed from the result), each as ``field:
    other vs baseline's value (why)``, and a different chain of tiers."""
    notes = differences(base, other)
    chain, base_chain = _tier_chain(other.spec.resolved), _tier_chain(base.spec.resolved)
    if base_chain != chain:
        shown = ", ".join(f"{name} {capacity}" for name, capacity in chain)
        notes.append(f"cache tiers (name, capacity) {shown} vs the baseline's "
                     f"{', '.join(f'{n} {c}' for n, c in base_chain)}: hit rates and the share each tier "
                     "serves differ")
    return notes


def caveats(documents: Sequence[ResultDocument], labels: list[str]) -> list[str]:
    """What makes a column less than a like-for-like comparison: a run that did not complete (its figures
    cover a partial window, or none), a result whose invariants failed, a different model than the
    baseline's (other entry sizes), and every spec difference that changes what a ratio to the baseline
    means (``spec_differences``)."""
    notes = []
    for label, document in zip(labels, documents, strict=True):
        notes += [f"{label}: {note}" for note in _result_caveats(documents[0], document)]
    return notes


def _result_caveats(base: ResultDocument, document: ResultDocument) -> list[str]:
    """One result's caveats against the baseline, each without the result's label."""
    notes = [*_run_caveat(document), *_model_caveat(base, document), *_checks_caveat(document)]
    if document is not base:
        notes += [note for note in spec_differences(base, document)
                  if not note.startswith("model.name ")]  # the model line says it with entry sizes
    return notes


def _run_caveat(document: ResultDocument) -> list[str]:
    """A run that ended other than completed measured only part of its window (or none of it)."""
    run = document.run
    if run.status == "completed":
        return []
    return [f"the run ended {run.status} ({run.stop_reason or 'no reason given'}); "
            "its figures cover only what it measured"]


def _model_caveat(base: ResultDocument, document: ResultDocument) -> list[str]:
    """Another model than the baseline's has other entry sizes, so bytes and rates are not like for like."""
    model = (document.model or {}).get("name")
    base_model = (base.model or {}).get("name")
    if model and base_model and model != base_model:
        return [f"model {model}, the baseline's is {base_model}: entry sizes differ"]
    return []


def _checks_caveat(document: ResultDocument) -> list[str]:
    """A result whose invariants failed has figures that do not add up; the first violation names why."""
    violations = document.checks.get("violations") or []
    if not violations:
        return []
    return [f"{len(violations)} invariant(s) violated ({violations[0]}): its figures do not add up"]
