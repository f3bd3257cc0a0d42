"""BurstGPT trace replay (seed §8.3): Azure OpenAI request logs with their real arrival times.

Columns are found by header name, so both layouts read the same way: v1
(``Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type``)
and v3, which inserts ``Session ID`` and ``Elapsed time`` at positions 2 and
3.  A v3 session becomes a multi-turn conversation whose turns read the
earlier turns' entries (``kvplan``); rows without a session (v1, and v3's
``API log`` rows) are single requests.  ``Request tokens`` is the context,
``Response tokens`` the generation.  A row with zero response tokens is a
failed call and is skipped by default.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

from kvbench_core.contracts.errors import InputFileError
from kvbench_workloads.files import reading
from kvbench_workloads.kvplan import TraceEntry
from kvbench_workloads.replay import OpenLoopTraceSource, options_schema
from kvbench_workloads.rows import LoadReport, RowError, integer, number

_REQUIRED = ("timestamp", "request tokens", "response tokens")
_FILTER_COLUMNS = {"models": "model", "log_types": "log type"}


class BurstGPTSource(OpenLoopTraceSource):
    """Replays BurstGPT CSV rows at their timestamps (seconds), scaled by ``speedup``."""

    name = "burstgpt"
    suffixes: ClassVar[tuple[str, ...]] = (".csv",)
    empty_hint = "; check the models and log_types filters"
    options_schema = options_schema(
        {
            "skip_failed": {"type": "boolean", "default": True,
                            "description": "skip failed calls (rows with zero response tokens)"},
            "models": {"type": "array", "minItems": 1, "items": {"type": "string"},
                       "description": "replay only rows of these models (e.g. [ChatGPT, GPT-4]); case-insensitive"},
            "log_types": {"type": "array", "minItems": 1, "items": {"type": "string"},
                          "description": "replay only these log types (Conversation log, API log); case-insensitive"},
        },
        open_loop=True,
    )

    def parse_file(self, path: Path, report: LoadReport) -> Iterator[TraceEntry]:
        wanted = {
            option: {value.casefold() for value in self.options[option]}
            for option in _FILTER_COLUMNS if option in self.options
        }
        with reading(path), path.open(newline="", encoding="utf-8") as file:
            rows = csv.reader(file)
            header = next(rows, None)
            if header is None:
                raise InputFileError(f"{path}:1: empty file, expected a BurstGPT CSV header")
            columns = _columns(path, header, wanted)
            for row in rows:
                if not row:
                    continue
                try:
                    entry, values = _entry(row, columns, len(header), f"{path.name}:{rows.line_num}")
                except RowError as error:
                    report.bad_row(path, rows.line_num, error)
                    continue
                reason = next((option for option, allowed in wanted.items() if values[option] not in allowed), None)
                if reason is None and entry.output_tokens == 0 and self.options["skip_failed"]:
                    reason = "failed"
                if reason:
                    report.skip(reason)
                    continue
                yield entry


def _columns(path: Path, header: list[str], wanted: dict[str, set[str]]) -> dict[str, int]:
    """Lower-cased column name -> index; a missing required (or filtered-on) column is fatal."""
    columns = {name.strip().lower(): index for index, name in enumerate(header)}
    needed = [*_REQUIRED, *(_FILTER_COLUMNS[option] for option in wanted)]
    missing = [name for name in needed if name not in columns]
    if missing:
        raise InputFileError(f"{path}:1: missing column {', '.join(map(repr, missing))} "
                             f"(header: {','.join(header)})")
    return columns


def _entry(row: list[str], columns: dict[str, int], width: int, origin: str) -> tuple[TraceEntry, dict[str, str]]:
    """The row as a trace entry, plus its filter values (casefolded) by option name."""
    if len(row) != width:
        raise RowError("row", f"expected {width} fields like the header, got {len(row)}")

    def cell(name: str) -> str:
        return row[columns[name]]

    session = cell("session id").strip() if "session id" in columns else ""
    entry = TraceEntry(
        origin=origin,
        input_tokens=integer(cell("request tokens"), "Request tokens"),
        output_tokens=integer(cell("response tokens"), "Response tokens"),
        conversation=session or None,
        timestamp_s=number(cell("timestamp"), "Timestamp"),
    )
    values = {
        option: cell(column).strip().casefold() for option, column in _FILTER_COLUMNS.items() if column in columns
    }
    return entry, values
