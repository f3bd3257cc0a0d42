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
    sources = plugin_sources()
    samples = [path]
    if path.is_dir():
        samples = sorted(entry for entry in path.iterdir() if entry.is_file() and not entry.name.startswith("."))
        if not samples:
            raise InputFileError(f"{path}: directory holds no files")
    by_suffix = sorted(((suffix, name) for name, cls in sources.items() for suffix in cls.suffixes),
                       key=lambda item: -len(item[0]))  # ".jsonl" before ".json"
    named: dict[str, list[str]] = {}  # format -> the files its suffix claims
    for sample in samples:
        for suffix, name in by_suffix:
            if sample.name.lower().endswith(suffix):
                named.setdefault(name, []).append(sample.name)
                break
    if len(named) > 1:  # a directory of several formats: replaying one would silently skip the others
        found = "; ".join(f"{name}: {', '.join(files[:2])}{' …' if len(files) > 2 else ''}"
                          for name, files in sorted(named.items()))
        raise InputFileError(f"{path}: holds traces of {len(named)} formats ({found}); pass one file, or "
                             f"--format {'|'.join(sorted(named))} to read only that format's files")
    if named:
        return next(iter(named))
    try:
        with samples[0].open(encoding="utf-8", errors="replace") as file:
            head = file.read(4096).lstrip()
    except OSError as error:
        raise InputFileError(f"{samples[0]}: cannot read: {error.strerror or error}") from error
    if head.startswith("["):
        return "sharegpt"
    if head.startswith("{"):
        return "mooncake"
    if head.split("\n", 1)[0].lower().startswith("timestamp,"):
        return "burstgpt"
    raise InputFileError(f"{samples[0]}: cannot tell the trace format; pass --format sharegpt|burstgpt|mooncake")


def trace_stats(path: str, fmt: str | None = None, options: dict[str, Any] | None = None) -> dict[str, Any]:
    """``describe()`` of the source replaying ``path`` with ``options`` (defaults otherwise)."""
    fmt = fmt or detect_format(Path(path))
    source_class = plugin_sources()[fmt]
    options = {**(options or {}), "path": path}
    validate_or_raise(options, source_class.options_schema, root="option")
    context = WorkloadContext(seed=0, users=1, bytes_per_token=1, spec_dir=os.getcwd())
    return source_class(options, context).describe()
