"""Read the maps bpftrace prints when it exits (its text format) back into numbers.

Three shapes occur:

- ``hist()``/``lhist()``: ``@name:`` then one line per bucket, ``[low, high)  count |@@@|``;
  log2 labels use 1024-based suffixes (``[1K, 2K)``), single values print as ``[0]``,
  an lhist's out-of-range buckets as ``(..., 0)`` and ``[1000, ...)``;
- keyed counters: ``@name[key]: value`` (several keys: ``@name[254, 0]: 5``);
- scalars: ``@name: value``.

A histogram becomes a list of ``Bucket``\\ s (upper bound ``None`` when open),
a keyed map ``{key: value}``, a scalar an ``int``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SUFFIX = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50, "E": 1 << 60}

_HEADER = re.compile(r"^@(?P<name>\w*):\s*$")
_KEYED = re.compile(r"^@(?P<name>\w*)\[(?P<key>.*)\]:\s*(?P<value>-?\d+)\s*$")
_SCALAR = re.compile(r"^@(?P<name>\w*):\s*(?P<value>-?\d+)\s*$")
_BUCKET = re.compile(r"^(?P<open>[\[(])(?P<low>[^,\])]+)(?:,\s*(?P<high>[^)\]]+))?[)\]]\s+(?P<count>\d+)(?:\s*\|.*)?$")
_NUMBER = re.compile(r"^(?P<value>-?\d+)(?P<suffix>[KMGTPE]?)$")


@dataclass(frozen=True)
class Bucket:
    """One histogram bucket: values in ``[low, high)``; ``high`` None = unbounded above.

    A single-value bucket (``[0]``) has ``high == low + 1``; an lhist's
    underflow bucket ``(..., min)`` has ``low`` None.
    """

    low: int | None
    high: int | None
    count: int


Value = int | list[Bucket] | dict[str, int]


class TraceOutputError(ValueError):
    """A line bpftrace printed is not in any of its known map formats."""


def _number(text: str) -> int | None:
    text = text.strip()
    if text == "...":
        return None
    match = _NUMBER.match(text)
    if match is None:
        raise TraceOutputError(f"not a histogram bound: {text!r}")
    return int(match["value"]) * SUFFIX[match["suffix"]]


def _bucket(line: str) -> Bucket | None:
    match = _BUCKET.match(line)
    if match is None:
        return None
    low = _number(match["low"])
    if match["high"] is None:  # "[5]": exactly one value
        if low is None:
            raise TraceOutputError(f"not a histogram bucket: {line!r}")
        return Bucket(low, low + 1, int(match["count"]))
    return Bucket(low, _number(match["high"]), int(match["count"]))


def parse_maps(text: str) -> dict[str, Value]:
    """Every map in ``text``; lines that are not maps (printf output, blank lines) are skipped."""
    maps: dict[str, Value] = {}
    current: list[Bucket] | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip()
        if current is not None:
            bucket = _bucket(line.strip()) if line.startswith(("[", "(")) else None
            if bucket is not None:
                current.append(bucket)
                continue
            current = None
        if not line.startswith("@"):
            continue
        if header := _HEADER.match(line):
            current = []
            maps[header["name"]] = current
        elif keyed := _KEYED.match(line):
            table = maps.setdefault(keyed["name"], {})
            if not isinstance(table, dict):
                raise TraceOutputError(f"line {number}: @{keyed['name']} printed both keyed and unkeyed")
            table[keyed["key"]] = int(keyed["value"])
        elif scalar := _SCALAR.match(line):
            maps[scalar["name"]] = int(scalar["value"])
        else:
            raise TraceOutputError(f"line {number}: unrecognised bpftrace output: {line[:120]!r}")
    return maps
