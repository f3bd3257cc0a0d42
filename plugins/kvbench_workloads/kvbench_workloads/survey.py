"""What a trace file holds, as a source would replay it: its format and its figures.

Kept apart from ``stats`` (the accumulator the sources feed) because it needs the
plugin's table of sources, and the sources need ``stats``: one direction only.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from kvbench_core.contracts.errors import InputFileError
from kvbench_core.contracts.validation import validate_or_raise
from kvbench_core.contracts.workload import WorkloadContext
from kvbench_workloads.catalog import sources as plugin_sources


def detect_format(path: Path) -> str:
    """The trace format from the file name (a directory: its files' names, which must agree), else the content."""
    samples = _samples(path)
    named = _formats_by_name(samples)
    if len(named) > 1:  # a directory of several formats: replaying one would silently skip the others
        found = "; ".join(f"{name}: {', '.join(files[:2])}{' …' if len(files) > 2 else ''}"
                          for name, files in sorted(named.items()))
        raise InputFileError(f"{path}: holds traces of {len(named)} formats ({found}); pass one file, or "
                             f"--format {'|'.join(sorted(named))} to read only that format's files")
    return next(iter(named)) if named else _format_by_content(samples[0])


def _samples(path: Path) -> list[Path]:
    """The file, or a directory's visible files."""
    if not path.is_dir():
        return [path]
    samples = sorted(entry for entry in path.iterdir() if entry.is_file() and not entry.name.startswith("."))
    if not samples:
        raise InputFileError(f"{path}: directory holds no files")
    return samples


def _formats_by_name(samples: list[Path]) -> dict[str, list[str]]:
    """Format -> the files its sources' suffixes claim (the longest suffix first: ".jsonl" before ".json")."""
    by_suffix = sorted(((suffix, name) for name, cls in plugin_sources().items() for suffix in cls.suffixes),
                       key=lambda item: -len(item[0]))
    named: dict[str, list[str]] = {}
    for sample in samples:
        name = next((name for suffix, name in by_suffix if sample.name.lower().endswith(suffix)), None)
        if name is not None:
            named.setdefault(name, []).append(sample.name)
    return named


def _format_by_content(sample: Path) -> str:
    """A file no suffix claims: told by its first bytes."""
    try:
        with sample.open(encoding="utf-8", errors="replace") as file:
            head = file.read(4096).lstrip()
    except OSError as error:
        raise InputFileError(f"{sample}: cannot read: {error.strerror or error}") from error
    if head.startswith("["):
        return "sharegpt"
    if head.startswith("{"):
        return "mooncake"
    if head.split("\n", 1)[0].lower().startswith("timestamp,"):
        return "burstgpt"
    raise InputFileError(f"{sample}: cannot tell the trace format; pass --format sharegpt|burstgpt|mooncake")


def trace_stats(path: str, fmt: str | None = None, options: dict[str, Any] | None = None) -> dict[str, Any]:
    """``describe()`` of the source replaying ``path`` with ``options`` (defaults otherwise)."""
    fmt = fmt or detect_format(Path(path))
    source_class = plugin_sources()[fmt]
    options = {**(options or {}), "path": path}
    validate_or_raise(options, source_class.options_schema, root="option")
    context = WorkloadContext(seed=0, users=1, bytes_per_token=1, spec_dir=os.getcwd())
    return source_class(options, context).describe()
