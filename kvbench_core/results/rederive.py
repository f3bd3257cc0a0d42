"""Every figure a result states, re-derived from the result's own raw material and compared.

A result keeps what it measured as raw material that adds up exactly: the
mergeable latency histograms (bucket counts, totals), each tier's operation
and command counts, bytes and first/last timestamps, the cache's counters,
the time series' per-interval counts.  Everything else it states — every
percentile, bandwidth, mean, rate, hit rate, SLA verdict, the MLPerf
headline, CPU per GB, each interval's per-second rates — is a function of
that material, computed once in ``results/metrics.py`` (and
``engine/measure/telemetry.py`` for the series).  ``kvbench check`` never trusts a
stated figure: it renders the metrics again from the raw material through
the same ``Metrics`` model the run and the multi-client merge use, and names
every figure the file states differently (a headline edited to look better,
a tier's bandwidth or p95 touched up).  The raw material itself is held
together by the invariants (``results/invariants.py``): two independent tallies
of the same completions must agree, so editing one count breaks one of them.

Besides the figures, a result's integrity is its format version, the
published schema and its spec's sha256 (``results/document.problems``).
docs/results.md ("Checking: kvbench check") lists what is checked.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator
from typing import Any

from kvbench_core.results.invariants import SERIES_ROUNDING_S, Check
from kvbench_core.results.metrics import GB, Metrics
from kvbench_core.runspec.plan import qos_classes

#: Relative slack between a stated float and its re-derivation (the same formula on the same numbers; JSON
#: round-trips floats exactly, so any difference is an edit).
REL_TOL = 1e-9
#: Fields that are inputs, not figures: the process's own clock reading at the window's start.
NOT_DERIVED = frozenset({"window.monotonic_start"})
#: How many mismatching figures one rule's reason names before counting the rest.
LISTED = 6


class IncompleteResult(ValueError):
    """A result states a measured window but lacks raw material its figures are derived from."""


def rederived_metrics(result: dict[str, Any]) -> dict[str, Any] | None:
    """``metrics`` rendered again from the result's raw material; None when it measured nothing (a run
    stopped before its window opened, a trials summary).  Raises ``IncompleteResult`` naming what is
    missing when the window is there but its raw material is not: a figure nothing backs is not trusted."""
    metrics = result.get("metrics") or {}
    if "window" not in metrics:
        return None
    raw = copy.deepcopy(metrics)
    resolved = (result.get("spec") or {}).get("resolved") or {}
    per_token = (result.get("model") or {}).get("bytes_per_token_all_ranks") or 0
    try:
        raw["window"]["monotonic_start"] = None  # keep the tiers' timestamps on the clock they were written in
        return Metrics.from_json(raw, bytes_per_token=per_token, qos=qos_classes(resolved.get("qos"))).to_json()
    except KeyError as missing:
        raise IncompleteResult(f"metrics has a measured window but no {missing} to derive its figures "
                               "from") from None
    except (TypeError, ValueError, AttributeError, ZeroDivisionError) as error:
        raise IncompleteResult(f"metrics' raw material is malformed ({error})") from None


def figure_checks(result: dict[str, Any]) -> list[Check]:
    """One failed ``Check`` per figure of ``metrics`` and ``timeseries`` the file states differently from
    its re-derivation (empty when every figure holds)."""
    try:
        derived = rederived_metrics(result)
    except IncompleteResult as error:
        return [Check("metrics", False, None, None, str(error))]
    found = [] if derived is None else list(_differences(result["metrics"], derived, result))
    return found + list(_series_rates(result.get("timeseries") or []))


def figure_count(result: dict[str, Any]) -> int:
    """How many figures re-derivation compares: for a rule's reason ("all N figures re-derived")."""
    try:
        derived = rederived_metrics(result)
    except IncompleteResult:
        derived = None
    leaves = 0 if derived is None else sum(1 for _ in _leaves(derived, ()))
    rates = sum(1 for point in result.get("timeseries") or [] for _ in _rate_keys(point))
    return leaves + rates


Path = tuple[str, ...]


def _leaves(data: Any, path: Path) -> Iterator[tuple[Path, Any]]:
    if isinstance(data, dict) and data:
        for key, value in data.items():
            yield from _leaves(value, (*path, key))
    else:
        yield path, data


def _lookup(data: Any, path: Path) -> tuple[bool, Any]:
    for key in path:
        if not isinstance(data, dict) or key not in data:
            return False, None
        data = data[key]
    return True, data


def _same(stated: Any, derived: Any) -> bool:
    if isinstance(stated, bool) or isinstance(derived, bool) or not _number(stated) or not _number(derived):
        return bool(stated == derived)
    return math.isclose(stated, derived, rel_tol=REL_TOL, abs_tol=1e-12)


def _number(value: Any) -> bool:
    return isinstance(value, int | float)


def _differences(stated: dict[str, Any], derived: dict[str, Any], result: dict[str, Any]) -> Iterator[Check]:
    for path, value in _leaves(derived, ()):
        name = ".".join(path)
        if name in NOT_DERIVED:
            continue
        present, found = _lookup(stated, path)
        if name == "cpu.cpu_s_per_gb_moved" and present and _cpu_per_gb_holds(found, value, result):
            continue
        if not present or not _same(found, value):
            yield Check(f"metrics.{name}", False, _scalar(value), _scalar(found),
                        "missing; its raw material is there" if not present
                        else "not what the result's own histograms and counts give")


def _cpu_per_gb_holds(stated: Any, derived: Any, result: dict[str, Any]) -> bool:
    """``cpu_s_per_gb_moved`` is computed from the unrounded CPU time; the file keeps it to the millisecond,
    so its re-derivation may differ by that rounding over the GB moved (and its own to 4 decimals)."""
    if not _number(stated) or not _number(derived):
        return bool(stated == derived)
    tiers = (result["metrics"].get("tiers") or {}).values()
    moved = sum(t[op]["bytes"] for t in tiers for op in ("read", "write")) / GB
    return abs(stated - derived) <= (0.0005 / moved if moved else 0) + 0.0001


def _scalar(value: Any) -> float | int | None:
    return value if _number(value) and not isinstance(value, bool) else None


def _rate_keys(point: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any], str]]:
    """``(where, row, name)`` for every ``<name>_per_s`` of a time-series point whose count it states."""
    rows = [("", point), *((f"tiers.{tier}.", row) for tier, row in (point.get("tiers") or {}).items())]
    for where, row in rows:
        for key in row:
            if key.endswith("_per_s") and key[:-len("_per_s")] in row:
                yield where, row, key[:-len("_per_s")]


def _series_rates(series: list[dict[str, Any]]) -> Iterator[Check]:
    """An interval's rates are its counts over its length (``engine/measure/telemetry.py``'s one formula).  The
    rate was divided by the unrounded length and the file keeps ``interval_s`` to the millisecond, so a
    rate holds when it lies between the count over the longest and over the shortest length that rounds
    to the stated one."""
    for index, point in enumerate(series):
        interval = point.get("interval_s") or 0.0
        low, high = max(interval - SERIES_ROUNDING_S, 1e-9), max(interval + SERIES_ROUNDING_S, 1e-9)
        for where, row, name in _rate_keys(point):
            stated, count = row[f"{name}_per_s"], row[name]
            if not _number(count) or not _number(stated):
                continue
            if not count / high * (1 - REL_TOL) <= stated <= count / low * (1 + REL_TOL):
                yield Check(f"timeseries[{index}].{where}{name}_per_s", False,
                            round(count / max(interval, 1e-9), 6), stated, f"not the interval's {name} / interval_s")


def listed(lines: list[str]) -> str:
    """The first few of ``lines`` joined, and how many more there are."""
    more = f" (+{len(lines) - LISTED} more)" if len(lines) > LISTED else ""
    return "; ".join(lines[:LISTED]) + more
