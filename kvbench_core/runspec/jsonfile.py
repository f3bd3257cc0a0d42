"""Reading the JSON inputs kvbench is handed (model configs, kvio manifests and plans).

One place turns a missing or malformed file into an ``InputFileError`` that
names the file, and the line for a syntax error, instead of a traceback;
``json_line`` finds the line of a field whose value is wrong.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from kvbench_core.contracts.errors import InputFileError


class JsonLinesGiven(InputFileError):
    """The file holds one JSON value per line (a trace, a log), where one JSON document was expected."""


def read_json_text(path: str, what: str, *, max_bytes: int | None = None) -> tuple[Any, str]:
    """``(parsed content, text)`` of ``path``: the text lets a later field error name its line.

    ``max_bytes`` refuses a larger file before a byte of it is read, naming its size: an input that is
    kilobytes by nature (a model config) handed a gigabyte by mistake would otherwise cost seconds and
    gigabytes of memory to parse before any error could be said."""
    try:
        with open(path, encoding="utf-8") as handle:
            size = os.fstat(handle.fileno()).st_size
            if max_bytes is not None and size > max_bytes:
                raise InputFileError(f"{path}: {size:,} bytes is too large for a {what} (at most {max_bytes:,} "
                                     "bytes)")
            text = handle.read()
        return json.loads(text), text
    except FileNotFoundError:
        raise InputFileError(f"{path}: no such {what} file") from None
    except json.JSONDecodeError as error:
        if error.msg == "Extra data" and text[:error.pos].rstrip(" \t").endswith("\n"):
            raise JsonLinesGiven(f"{path}: line {error.lineno}: invalid JSON: {error.msg} "
                                 f"(one JSON value per line, not one {what})") from None
        raise InputFileError(f"{path}: line {error.lineno}: invalid JSON: {error.msg}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise InputFileError(f"{path}: cannot read the {what}: {getattr(error, 'strerror', None) or error}") from None


def json_line(text: str, path: Sequence[str | int]) -> int | None:
    """The 1-based line on which the value at ``path`` (keys and list indices) starts in the JSON ``text``;
    None when it is not there.  Skips over siblings with the C decoder, so a large manifest is cheap."""
    decoder = json.JSONDecoder()
    at = _skip_space(text, 0)
    try:
        for part in path:
            if isinstance(part, int) and text.startswith("[", at):
                at = _skip_space(text, at + 1)
                for _ in range(part):
                    at = _skip_space(text, decoder.raw_decode(text, at)[1])
                    if not text.startswith(",", at):
                        return None
                    at = _skip_space(text, at + 1)
            elif isinstance(part, str) and text.startswith("{", at):
                at = _skip_space(text, at + 1)
                while True:
                    if not text.startswith('"', at):
                        return None
                    key, at = json.decoder.scanstring(text, at + 1)
                    at = _skip_space(text, at)
                    if not text.startswith(":", at):
                        return None
                    at = _skip_space(text, at + 1)
                    if key == part:
                        break
                    at = _skip_space(text, decoder.raw_decode(text, at)[1])
                    if not text.startswith(",", at):
                        return None
                    at = _skip_space(text, at + 1)
            else:
                return None
    except (json.JSONDecodeError, ValueError):
        return None
    return text.count("\n", 0, at) + 1 if at < len(text) else None


def _skip_space(text: str, at: int) -> int:
    while at < len(text) and text[at] in " \t\r\n":
        at += 1
    return at


def write_text(path: str, text: str, what: str) -> None:
    """Write ``text`` to a new file ``path``; an existing path (a user's file, a symlink) is never written
    through, and an unwritable one is a user error naming it."""
    try:
        with open(path, "x", encoding="utf-8") as handle:
            handle.write(text)
    except FileExistsError:
        raise InputFileError(f"{path}: already exists; kvbench does not overwrite files (remove it, or name "
                             f"another path for the {what})") from None
    except OSError as error:
        raise InputFileError(f"{path}: cannot write the {what}: {error.strerror or error}") from None


def write_json(path: str, data: Any, what: str) -> None:
    """``data`` as indented JSON (a report, a result) in ``path``."""
    write_text(path, json.dumps(data, indent=2) + "\n", what)


@contextlib.contextmanager
def temp_beside(path: Path) -> Iterator[str]:
    """A private, exclusively created ``0644`` temp file next to ``path`` for a writer to fill and then rename
    or link onto ``path`` (so a failure never leaves half a file, and no fixed-name file of a user's is ever
    clobbered); removed on the way out if it is still there."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(handle, 0o644)  # mkstemp makes it 0600; what kvbench writes is for others to read
        os.close(handle)
        yield tmp
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
