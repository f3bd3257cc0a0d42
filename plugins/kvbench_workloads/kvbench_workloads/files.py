"""Finding, hashing and opening trace files.

A result names the exact bytes it replayed (sha256), so a published number can
be re-run on the same trace; a directory is replayed file by file in name
order, which is how BurstGPT ships its trace (``BurstGPT_1.csv``, ``_2``…).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kvbench_core.contracts.errors import InputFileError


def trace_files(path: str, spec_dir: str, suffixes: tuple[str, ...]) -> list[Path]:
    """``path`` itself, or a directory's visible files ending in ``suffixes``, sorted by name.

    Relative paths resolve against the spec file's folder, so a spec and its
    trace can move together.
    """
    resolved = Path(os.path.normpath(Path(spec_dir, os.path.expanduser(path))))
    if resolved.is_dir():
        files = sorted(
            entry for entry in resolved.iterdir()
            if entry.is_file() and not entry.name.startswith(".") and entry.name.lower().endswith(suffixes)
        )
        if not files:
            patterns = ", ".join(f"*{suffix}" for suffix in suffixes)
            raise InputFileError(f"{resolved}: directory holds no trace files ({patterns})")
        return files
    if not resolved.is_file():
        raise InputFileError(f"{resolved}: no such trace file or directory")
    return [resolved]


def sha256_file(path: Path) -> str:
    with reading(path), path.open("rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


@contextmanager
def reading(path: Path) -> Iterator[None]:
    """Turn I/O and encoding failures while reading ``path`` into one-line ``InputFileError``s."""
    try:
        yield
    except UnicodeDecodeError as error:
        raise InputFileError(f"{path}: not UTF-8 text ({error.reason})") from error
    except OSError as error:
        raise InputFileError(f"{path}: cannot read: {error.strerror or error}") from error
