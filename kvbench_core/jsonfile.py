"""Reading the JSON inputs kvbench is handed (model configs, kvio manifests and plans).

One place turns a missing or malformed file into an ``InputFileError`` that
names the file, and the line for a syntax error, instead of a traceback.
"""

from __future__ import annotations

import json
from typing import Any

from kvbench_core.errors import InputFileError


def read_json(path: str, what: str) -> Any:
    """The parsed content of ``path``; ``what`` names the expected file in errors ("model config")."""
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except FileNotFoundError:
        raise InputFileError(f"{path}: no such {what} file") from None
    except json.JSONDecodeError as error:
        raise InputFileError(f"{path}: line {error.lineno}: invalid JSON: {error.msg}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise InputFileError(f"{path}: cannot read the {what}: {getattr(error, 'strerror', None) or error}") from None


def write_text(path: str, text: str, what: str) -> None:
    """Write ``text`` to ``path``; an unwritable path is a user error naming it."""
    try:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
    except OSError as error:
        raise InputFileError(f"{path}: cannot write the {what}: {error.strerror or error}") from None


def write_json(path: str, data: Any, what: str) -> None:
    """``data`` as indented JSON (a report, a result) in ``path``."""
    write_text(path, json.dumps(data, indent=2) + "\n", what)
