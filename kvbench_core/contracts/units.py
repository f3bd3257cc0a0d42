"""Human sizes ("128k", "8GiB", "512 MB") and durations ("30s", "5m"): their parsing and their schema fragments.

Public to plugins (part of ``kvbench_core.contracts``): a tier's options are sizes and durations too, and a
plugin that wrote its own pattern or parser would accept a spelling the core refuses, or the reverse.

Sizes follow fio, the tool storage engineers write sizes for: a bare unit letter is a power of two
(``128k`` = 131072, ``4m`` = 4 MiB, as fio's default ``kb_base=1024`` reads them), IEC units are powers of
two (``KiB``, ``MiB``…) and an explicit SI unit with its ``B`` is a power of ten (``KB``, ``MB``, ``GB``…, as
fio's ``kb_base=1000`` reads them), so each spelling means what its reader expects.  ``kvbench spec
validate`` prints every size it parsed in bytes, so no one has to guess.
"""

from __future__ import annotations

import re
from typing import Any

_SIZE_UNITS = {
    "": 1, "b": 1,
    "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4,  # fio: a bare letter is binary
    "kb": 1000, "mb": 1000**2, "gb": 1000**3, "tb": 1000**4,  # SI, spelled out
    "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4,  # IEC
}
_DURATION_UNITS = {"": 1.0, "ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}

# Exactly the units ``parse_size`` knows: a bare "8Gi" must fail validation, not the run.
SIZE_PATTERN = r"^\s*[0-9]+(\.[0-9]+)?\s*([kKmMgGtT]([iI][bB]|[bB])?|[bB])?\s*$"
DURATION_PATTERN = r"^\s*[0-9]+(\.[0-9]+)?\s*(ms|s|m|min|h)?\s*$"

def size_schema(description: str, *, minimum: int = 1, maximum: int | None = None) -> dict[str, Any]:
    """The JSON Schema fragment of a size option: bytes as an integer, or a string ``parse_size`` reads."""
    number: dict[str, Any] = {"type": "integer", "minimum": minimum}
    if maximum is not None:
        number["maximum"] = maximum
    return {"oneOf": [number, {"type": "string", "pattern": SIZE_PATTERN}], "description": description}


def duration_schema(description: str, *, minimum: float = 0, exclusive: bool = False,
                    maximum: float | None = None) -> dict[str, Any]:
    """The JSON Schema fragment of a duration option: seconds, or a string ``parse_duration`` reads.

    ``exclusive`` refuses the minimum itself (a timeout of 0 s would mean "fail at once", never meant)."""
    number: dict[str, Any] = {"type": "number", "exclusiveMinimum" if exclusive else "minimum": minimum}
    if maximum is not None:
        number["maximum"] = maximum
    return {"oneOf": [number, {"type": "string", "pattern": DURATION_PATTERN}], "description": description}


_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(value: int | float | str) -> int:
    """Bytes from an int or a string: ``128k`` and ``128KiB`` are 131072 (binary), ``128KB`` is 128000."""
    if isinstance(value, bool):
        raise ValueError(f"expected a size, got {value!r}")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"size must be >= 0, got {value}")
        return int(value)
    match = _SIZE_RE.match(value)
    if not match or match.group(2).lower() not in _SIZE_UNITS:
        raise ValueError(f"expected a size like 128k, 512MiB or 8GB, got {value!r}")
    return int(float(match.group(1)) * _SIZE_UNITS[match.group(2).lower()])


def parse_duration(value: int | float | str) -> float:
    """Seconds from a number or a string such as "30s", "500ms", "5m", "1h"."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration, got {value!r}")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"duration must be >= 0, got {value}")
        return float(value)
    match = _SIZE_RE.match(value)
    if not match or match.group(2).lower() not in _DURATION_UNITS:
        raise ValueError(f"expected a duration like 30s, 5m or 500ms, got {value!r}")
    return float(match.group(1)) * _DURATION_UNITS[match.group(2).lower()]


def format_bytes(n: float) -> str:
    """Binary-unit rendering for tables and progress lines."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")
