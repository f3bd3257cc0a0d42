"""Pass or fail a kvio validation report: every threshold it misses, one line each (``kvbench score``'s exit
status 1).  Kept apart from the scoring (``kvio/validate.py``): a report is judged the same however it
was made, and the lines a user reads are written here once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Thresholds:
    """What a validation must reach to pass; the defaults demand an exact reproduction, as a file tier's
    deterministic geometry allows."""

    min_exact: float = 1.0
    max_wape: float = 0.0
    max_tv: float = 0.0


def gate(report: dict[str, Any], thresholds: Thresholds) -> list[str]:
    """Every threshold ``report`` misses, one line each (empty: it passes)."""
    missed = [f"{op}s: planned for {report['objects']} objects, none in the I/O log (declare a {other}-only "
              f"capture with --ops {other})" for op, other in (("store", "load"), ("load", "store"))
              if op in report["ops_missing"] and op not in report["ops_scored"]]
    for label, scores in [("all", report), *report["by_op"].items()]:
        missed += _score_misses(label, scores, thresholds)
    return missed + _offset_misses(report.get("offsets") or {}) + _order_misses(report.get("order"))


def _score_misses(label: str, scores: dict[str, Any], thresholds: Thresholds) -> list[str]:
    exact, wape, tv = scores["exact_match"]["fraction"], scores["wape"], scores["tv_distance"]
    missed = []
    if exact is not None and exact < thresholds.min_exact:
        missed.append(f"{label}: exact-match {exact:.2%} < {thresholds.min_exact:.2%}")
    if wape is not None and wape > thresholds.max_wape:
        missed.append(f"{label}: WAPE {wape:.4%} > {thresholds.max_wape:.4%}")
    if tv > thresholds.max_tv:
        missed.append(f"{label}: size-dist TV {tv:.4f} > {thresholds.max_tv:.4f}")
    return missed


def _offset_misses(offsets: dict[str, Any]) -> list[str]:
    return [f"offsets: {name.replace('_', ' ')} {check['matched']}/{check['total']}"
            for name, check in offsets.items()
            if isinstance(check, dict) and check["fraction"] is not None and check["fraction"] < 1]


def _order_misses(order: dict[str, Any] | None) -> list[str]:
    if not order:
        return []
    missed = []
    within = order["ascending_within_object"]
    if within["fraction"] is not None and within["fraction"] < 1:
        missed.append(f"order: ascending offsets within an object {within['matched']}/{within['total']}")
    return missed + [f"order: {op} objects out of the expected order {info['inversions']} times (first "
                     f"{info['first_out_of_order']})" for op, info in order["objects"].items() if info["inversions"]]
