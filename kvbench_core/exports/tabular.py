"""``kvbench export --to parquet|csv``: the tidy tables of one or more results, written with pyarrow.

One file per table in the target directory (``timeseries``, ``tier_timeseries``, ``latency_histograms``,
``classes`` and, where a result's I/O log is still beside it, ``commands``), every result's rows stacked
with its ``result`` column, so ``pandas.read_parquet(DIR + "/classes.parquet")`` is a whole comparison.
The I/O log is read by pyarrow's own JSON reader, not line by line in Python: a log of millions of
commands is a few seconds.  No file is ever replaced: each is created exclusively, and every target is
checked before the first is written, so a refusal leaves nothing behind (docs/export.md).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvbench_core.contracts.errors import UserError
from kvbench_core.exports.requires import optional_module
from kvbench_core.exports.tables import RESULT_TABLES
from kvbench_core.results.document import ResultDocument

EXTRA = "export"
FORMATS = ("parquet", "csv")
#: The I/O log's fields and their Arrow types; ``tier``/``thread``/``request`` are absent from older logs
#: (read as nulls), ``requested``/``align`` from every command the tier did not round.
IO_LOG_FIELDS = (("trace_id", "int64"), ("key", "string"), ("op", "string"), ("offset", "int64"),
                 ("bytes", "int64"), ("requested", "int64"), ("align", "int64"), ("start_s", "float64"),
                 ("end_s", "float64"), ("tier", "string"), ("thread", "string"), ("request", "string"))
#: Seconds after a run's end within which its I/O log must have been last written (it is closed in the
#: cleanup, before the result is): a later mtime means another run or trial rewrote it.
LOG_WRITTEN_WITHIN_S = 60.0


@dataclass
class Export:
    """What an export wrote, and why a table is absent (no I/O log, one another run rewrote)."""

    written: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _pyarrow() -> Any:
    return optional_module("pyarrow", EXTRA, "kvbench export --to parquet|csv")


def _table(rows: list[dict[str, Any]]) -> Any:
    """An Arrow table of ``rows`` whose columns are the union of their keys, in first-seen order (results
    with other tiers or classes stack, the cells they lack null)."""
    pa = _pyarrow()
    columns = list(dict.fromkeys(key for row in rows for key in row))
    return pa.table({name: [row.get(name) for row in rows] for name in columns})


def _log_of(label: str, document: ResultDocument) -> tuple[str | None, str | None]:
    """(the result's I/O log, None) when it is there and this run's, else (None, why not)."""
    path = document.io_log
    if not path:
        return None, None
    try:
        mtime = os.stat(path).st_mtime
    except OSError as error:
        return None, f"{label}: no commands table: its I/O log {path} cannot be read ({error.strerror})"
    finished = document.run.finished_at
    if finished is not None and mtime > finished + LOG_WRITTEN_WITHIN_S:
        return None, (f"{label}: no commands table: its I/O log {path} was rewritten after the run ended "
                      "(another run or a later trial wrote it)")
    return path, None


def commands_table(label: str, document: ResultDocument, path: str) -> Any:
    """The I/O log's commands with ``result``, ``run_id``, ``t_s`` (seconds since the measured window
    opened, the time series' clock) and ``duration_ms``."""
    pa = _pyarrow()
    pajson = optional_module("pyarrow.json", EXTRA, "kvbench export --to parquet|csv")
    pc = optional_module("pyarrow.compute", EXTRA, "kvbench export --to parquet|csv")
    schema = pa.schema([(name, getattr(pa, kind)()) for name, kind in IO_LOG_FIELDS])
    try:
        log = pajson.read_json(path, parse_options=pajson.ParseOptions(
            explicit_schema=schema, unexpected_field_behavior="ignore"))
    except pa.ArrowInvalid as error:
        raise UserError(f"{path}: not a kvbench I/O log: {str(error).splitlines()[0]}") from None
    origin = document.window.get("monotonic_start") or 0.0
    n = log.num_rows
    log = log.add_column(0, "result", pa.array([label] * n, pa.string()))
    log = log.add_column(1, "run_id", pa.array([document.run.id] * n, pa.string()))
    log = log.append_column("t_s", pc.subtract(log["start_s"], origin))
    return log.append_column("duration_ms", pc.multiply(pc.subtract(log["end_s"], log["start_s"]), 1000.0))


def tables(results: list[tuple[str, ResultDocument]], notes: list[str]) -> dict[str, Any]:
    """Every table of ``results`` (label, document) as Arrow tables; a table no result has rows for is
    left out, and why a result has no commands is added to ``notes``."""
    pa = _pyarrow()
    out: dict[str, Any] = {}
    for name, rows_of in RESULT_TABLES.items():
        rows = [row for label, result in results for row in rows_of(label, result)]
        if rows:
            out[name] = _table(rows)
    logs = []
    for label, result in results:
        path, why = _log_of(label, result)
        if why:
            notes.append(why)
        if path:
            logs.append(commands_table(label, result, path))
    if logs:
        out["commands"] = pa.concat_tables(logs)
    return out


def _write(table: Any, path: Path, fmt: str) -> None:
    with open(path, "xb") as handle:  # exclusive: never replaces a file (checked before, raced here)
        if fmt == "parquet":
            optional_module("pyarrow.parquet", EXTRA, "kvbench export --to parquet").write_table(table, handle)
        else:
            optional_module("pyarrow.csv", EXTRA, "kvbench export --to csv").write_csv(table, handle)


def export_tables(results: Sequence[tuple[str, ResultDocument]], fmt: str, directory: Path) -> Export:
    """Write every table of ``results`` as ``directory/<table>.<fmt>``; refuses (a ``UserError``, nothing
    written) when any of those files exists."""
    done = Export()
    built = tables(list(results), done.notes)
    targets = {name: directory / f"{name}.{fmt}" for name in built}
    existing = [str(path) for path in targets.values() if os.path.lexists(path)]
    if existing:
        raise UserError(f"{existing[0]} exists; kvbench never overwrites a file it did not create: "
                        "export into a new or empty directory")
    directory.mkdir(parents=True, exist_ok=True)
    for name, path in targets.items():
        _write(built[name], path, fmt)
        done.written.append(path)
    return done
