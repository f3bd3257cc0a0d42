"""Side-by-side comparison of results with ratios against the first (seed §5.2, "fast vs slow").

Each key figure (``reports.metrics``) gets one row: its value in every
result and, for the second result on, the ratio to the first.  When both
results are trials summaries, a figure whose trial ranges (min..max)
overlap is flagged: with the trial-to-trial variation the seed reports
(CV 50-125 %), such a ratio is not a real difference.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvbench_core.reports.compare_specs import differences
from kvbench_core.reports.metrics import Figure, FigureValue, figure_values


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


def compare(results: list[dict[str, Any]]) -> list[Row]:
    """Rows of key figures present in any result, in the order of the first result that has them."""
    values = [figure_values(result) for result in results]
    keys = list(dict.fromkeys(key for v in values for key in v))
    rows = []
    for key in keys:
        cells = [v.get(key) for v in values]
        if all(c is None or c.value is None for c in cells):
            continue
        base = cells[0]
        row_cells = [Cell(base)]
        for cell in cells[1:]:
            if cell is None or base is None or cell.value is None or base.value is None:
                row_cells.append(Cell(cell))
                continue
            ratio = cell.value / base.value if base.value else None
            row_cells.append(Cell(cell, ratio, ranges_overlap(base, cell)))
        figure = next(c.figure for c in cells if c is not None)
        rows.append(Row(figure, row_cells))
    return rows


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


def _tier_chain(spec: dict[str, Any]) -> list[tuple[str, Any]]:
    return [(t.get("name"), t.get("capacity")) for t in (spec.get("cache") or {}).get("tiers") or []]


def spec_differences(base: dict[str, Any], other: dict[str, Any]) -> list[str]:
    """Every difference between what two results' runs used that changes the meaning of a ratio between
    them (``compare_specs.differences``: the resolved spec completed from the result), each as ``field:
    other vs baseline's value (why)``, and a different chain of tiers."""
    notes = differences(base, other)
    base, other = base["spec"]["resolved"], other["spec"]["resolved"]
    if _tier_chain(base) != _tier_chain(other):
        shown = ", ".join(f"{name} {capacity}" for name, capacity in _tier_chain(other))
        notes.append(f"cache tiers (name, capacity) {shown} vs the baseline's "
                     f"{', '.join(f'{n} {c}' for n, c in _tier_chain(base))}: hit rates and the share each tier "
                     "serves differ")
    return notes


def caveats(results: list[dict[str, Any]], labels: list[str]) -> list[str]:
    """What makes a column less than a like-for-like comparison: a run that did not complete (its figures
    cover a partial window, or none), a result whose invariants failed, a different model than the
    baseline's (other entry sizes), and every spec difference that changes what a ratio to the baseline
    means (``spec_differences``)."""
    notes = []
    base_spec = (results[0].get("spec") or {}).get("resolved")
    base_model = (results[0].get("model") or {}).get("name")
    for label, result in zip(labels, results, strict=True):
        run = result.get("run") or {}
        if run.get("status") not in (None, "completed"):
            notes.append(f"{label}: the run ended {run['status']} ({run.get('stop_reason') or 'no reason given'}); "
                         "its figures cover only what it measured")
        model = (result.get("model") or {}).get("name")
        if model and base_model and model != base_model:
            notes.append(f"{label}: model {model}, the baseline's is {base_model}: entry sizes differ")
        violations = (result.get("checks") or {}).get("violations") or []
        if violations:
            notes.append(f"{label}: {len(violations)} invariant(s) violated ({violations[0]}): its figures "
                         "do not add up")
        spec = (result.get("spec") or {}).get("resolved")
        if result is not results[0] and isinstance(spec, dict) and isinstance(base_spec, dict):
            notes += [f"{label}: {note}" for note in spec_differences(results[0], result)
                      if not note.startswith("model.name ")]  # the model line above says it with entry sizes
    return notes
