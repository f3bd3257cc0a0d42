"""Reading trace rows: field parsing, located errors, and what a pass skipped.

A malformed row becomes one ``InputFileError`` naming file, line and field.
With ``skip_bad_rows`` it is counted instead and the first few messages are
kept for the result, so a silently thinner trace is never taken for the real
one.  Field parsers raise ``RowError`` without knowing where they are; the
reader adds file and line, so the three formats share the parsers.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, TextIO

from kvbench_core.contracts.errors import InputFileError
from kvbench_workloads.files import reading

#: Bad-row messages kept for the result when skipping; the count is always exact.
BAD_ROW_EXAMPLES = 5

_CHUNK_CHARS = 1 << 20


class RowError(ValueError):
    """One field of one row is missing or malformed; the reader adds file and line."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")


class LoadReport:
    """What one pass over a trace left out, by reason, and the bad rows it was allowed to skip."""

    def __init__(self, skip_bad_rows: bool) -> None:
        self.skip_bad_rows = skip_bad_rows
        self.skipped: Counter[str] = Counter()
        self.bad_row_examples: list[str] = []

    def skip(self, reason: str) -> None:
        self.skipped[reason] += 1

    def bad_row(self, path: Path, line: int, error: RowError) -> None:
        """Raise the located error, or count it when the user chose ``skip_bad_rows``."""
        located = InputFileError(f"{path}:{line}: {error}")
        if not self.skip_bad_rows:
            raise located
        self.skip("bad_rows")
        if len(self.bad_row_examples) < BAD_ROW_EXAMPLES:
            self.bad_row_examples.append(str(located))


def required(row: Mapping[str, Any], field: str) -> Any:
    if field not in row:
        raise RowError(field, "required field is missing")
    return row[field]


def integer(value: Any, field: str) -> int:
    """A whole number >= 0 from a CSV cell or a JSON value (``"472"``, ``472``, ``472.0``)."""
    if isinstance(value, int) and not isinstance(value, bool):
        parsed = value
    else:
        try:
            parsed = int(value) if isinstance(value, str) and value.strip().isdigit() else _whole(value)
        except (TypeError, ValueError):
            raise RowError(field, f"expected a whole number >= 0, got {value!r}") from None
    if parsed < 0:
        raise RowError(field, f"expected a whole number >= 0, got {value!r}")
    return parsed


def _whole(value: Any) -> int:
    if isinstance(value, bool):
        raise TypeError(value)
    number_ = float(value)
    if not number_.is_integer():
        raise ValueError(value)
    return int(number_)


def number(value: Any, field: str) -> float:
    """A finite number from a CSV cell or a JSON value."""
    try:
        if isinstance(value, bool):
            raise TypeError(value)
        parsed = float(value)
    except (TypeError, ValueError):
        raise RowError(field, f"expected a number, got {value!r}") from None
    if not math.isfinite(parsed):
        raise RowError(field, f"expected a finite number, got {value!r}")
    return parsed


def json_lines(path: Path, report: LoadReport) -> Iterator[tuple[int, Any]]:
    """``(line number, value)`` for each non-blank line of a JSONL file; bad JSON is a bad row."""
    with reading(path), path.open(encoding="utf-8") as file:
        for line_number, text in enumerate(file, 1):
            if not text.strip():
                continue
            try:
                value = json.loads(text)
            except json.JSONDecodeError as error:
                report.bad_row(path, line_number, RowError("json", f"invalid JSON ({error.msg}, column {error.colno})"))
                continue
            yield line_number, value


def json_array(path: Path) -> Iterator[tuple[int, Any]]:
    """``(line number, element)`` for each element of a file holding one JSON array.

    Elements are decoded one at a time from 1 MiB chunks, so a 600 MB ShareGPT
    dump never exists as one Python object tree, and each element's line is
    known for error messages.  Broken JSON syntax is fatal even with
    ``skip_bad_rows``: after it, where the next element starts is a guess.
    """
    with reading(path), path.open(encoding="utf-8") as file:
        text = _ChunkedText(file)
        if text.next_char() != "[":
            raise InputFileError(f"{path}:{text.line()}: expected a JSON array of conversations")
        text.pos += 1
        if text.next_char() == "]":
            return
        while True:
            text.next_char()
            line = text.line()
            yield line, text.decode(path)
            separator = text.next_char()
            if separator == "]":
                return
            if separator != ",":
                raise InputFileError(f"{path}:{text.line()}: invalid JSON (expected ',' or ']' after an element)")
            text.pos += 1


class _ChunkedText:
    """A text file read 1 MiB at a time behind a cursor: what the cursor passed is dropped as chunks
    come in, and the line the cursor is on is kept for error messages."""

    _decoder = json.JSONDecoder()

    def __init__(self, file: TextIO) -> None:
        self.file = file
        self.buffer, self.pos, self.eof = "", 0, False
        # The line at buffer index ``mark`` (<= pos): lines are counted once, from the last count on, not
        # from the buffer's start for every element (that scanned up to a chunk per element).
        self.mark, self.mark_line = 0, 1

    def fill(self) -> None:
        """Drop what was consumed and append the next chunk."""
        chunk = self.file.read(_CHUNK_CHARS)
        self.eof = not chunk
        self.mark_line = self.line_at(self.pos)
        self.buffer, self.pos, self.mark = self.buffer[self.pos:] + chunk, 0, 0

    def next_char(self) -> str:
        """The next non-blank character (not consumed), or "" at the end of the file."""
        while True:
            while self.pos < len(self.buffer) and self.buffer[self.pos].isspace():
                self.pos += 1
            if self.pos < len(self.buffer) or self.eof:
                return self.buffer[self.pos:self.pos + 1]
            self.fill()

    def line(self) -> int:
        """The line the cursor is on."""
        self.mark_line, self.mark = self.line_at(self.pos), self.pos
        return self.mark_line

    def line_at(self, index: int) -> int:
        """The line of buffer position ``index`` (at or after ``mark``)."""
        return self.mark_line + self.buffer.count("\n", self.mark, index)

    def decode(self, path: Path) -> Any:
        """The JSON value at the cursor, reading on while it continues in the next chunk; consumes it."""
        while True:
            try:
                value, end = self._decoder.raw_decode(self.buffer, self.pos)
            except json.JSONDecodeError as error:
                if self.eof:
                    raise InputFileError(f"{path}:{self.line_at(error.pos)}: "
                                         f"invalid JSON ({error.msg}, column {error.colno})") from None
                self.fill()  # the element continues in the next chunk
                continue
            if end < len(self.buffer) or self.eof:
                self.pos = end
                return value
            self.fill()  # a number or literal may continue in the next chunk
