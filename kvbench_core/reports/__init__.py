"""What a storage engineer does with results: workbooks, plots, comparisons, submission checks.

``xlsx``, ``png`` and ``html`` output need the ``reports`` extra (xlsxwriter,
matplotlib); they are imported only when asked for, and a missing one is a
``MissingDependency`` with the install hint, raised before a run starts.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from kvbench_core.contracts.errors import MissingDependency
from kvbench_core.results.document import ResultDocument

#: output format -> the module it needs (the HTML report embeds the plots)
FORMAT_MODULES = {"xlsx": "xlsxwriter", "png": "matplotlib", "html": "matplotlib"}
INSTALL_HINT = "pip install 'kvbench-core[reports]'"


def require(module: str, what: str) -> ModuleType:
    """Import an optional reporting dependency, or say how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingDependency(f"{what} needs {module}, which is not installed; "
                                f"install it with: {INSTALL_HINT}") from None


def require_formats(formats: list[str]) -> None:
    for fmt in formats:
        if fmt in FORMAT_MODULES:
            require(FORMAT_MODULES[fmt], f"output format '{fmt}'")


def write_reports(document: ResultDocument, json_path: Path, formats: list[str]) -> list[Path]:
    """The xlsx workbook, png plots and/or HTML report of one result, next to its JSON (same stem)."""
    written: list[Path] = []
    if "xlsx" in formats:
        from kvbench_core.reports.xlsx import write_workbook

        written.append(write_workbook(document, json_path.with_suffix(".xlsx")))
    if "png" in formats:
        from kvbench_core.reports.plots import plot_result

        written += plot_result(document, json_path.parent, json_path.stem)
    if "html" in formats:
        from kvbench_core.reports.html import write_html

        written.append(write_html(document, json_path.with_suffix(".html")))
    return written


def flatten(data: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """``{"a": {"b": 1}}`` -> ``[("a.b", 1)]``; lists of scalars stay one value."""
    if isinstance(data, dict) and data:
        return [row for key, value in data.items() for row in flatten(value, f"{prefix}.{key}" if prefix else key)]
    if isinstance(data, list) and data and all(isinstance(v, dict) for v in data):
        return [row for i, value in enumerate(data) for row in flatten(value, f"{prefix}[{i}]")]
    return [(prefix, data)]


def autoscaler_trajectories(document: ResultDocument) -> list[tuple[str, Sequence[Mapping[str, Any]]]]:
    """(who, steps): the run's own trajectory, or each client's in a scaled-out run."""
    label = (document.scale_out or {}).get("label", "client")
    clients = [(f"{label} {c['index']}", (c.get("autoscaling") or {}).get("trajectory") or [])
               for c in document.clients or ()]
    return [(label, steps) for label, steps in [("run", document.trajectory), *clients] if steps]
