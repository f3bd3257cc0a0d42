"""LMCache's semantic trace (``LMCACHE_KVIO_TRACE``) as the expected side of a validation.

The seed's step 3 validates the wire commands against what the engine *meant*
to do, not against a projection: LMCache ``raw_block`` writes one JSON record
per KV object operation, carrying the same ``trace_id`` as the device
commands' ``user_data``::

    {"trace_id": 17, "op": "store", "bytes": 33554432, "part": "kv",
     "object_id": "…", "components": {"k": 16777216, "v": 16777216}}

Each record becomes an expected unit (records of the same object and op add
up, as their commands do on the wire): its payload split by the transfer
geometry (``--max-transfer``, ``--align``, ``--store-header-bytes``) as
``kvbench project`` would split it.  ``part`` (``kv``/``k``/``v``) groups the
scores per KV part (separate K and V records of one object, sharing its
trace id, each keep their own planned commands and are scored on their share
of the object's wire commands), and ``components`` (K / V / scale bytes of a
packed asymmetric blob) are summed for the report.  Lines of other kinds (the
tracer's, clock anchors) carry no ``op``/``bytes`` pair and are skipped.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from kvbench_core.contracts.errors import InputFileError
from kvbench_core.kvio.commands import TransferGeometry
from kvbench_core.kvio.validate import Expected

_OPS = {"store": "store", "write": "store", "put": "store", "load": "load", "read": "load", "get": "load"}


@dataclass
class SemanticTrace:
    """The expected units of a semantic trace, and what it says about K/V components."""

    expected: list[Expected] = field(default_factory=list)
    components: Counter[str] = field(default_factory=Counter)
    skipped_lines: int = 0


def _trace_id(value: Any, where: str) -> int:
    if isinstance(value, str):
        try:
            value = int(value, 0)
        except ValueError:
            raise InputFileError(f"{where}: trace_id must be an integer, got {value!r}") from None
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise InputFileError(f"{where}: trace_id must be a positive integer, got {value!r}")
    return value


def _add_record(earlier: Expected | None, record: Expected) -> Expected:
    """One object's unit with another record of it added: the commands add up; a record of another part
    (K and V records sharing the trace id) keeps its own planned commands in ``parts``, so each part is
    scored on its own share (``validate.split_by_part``)."""
    if earlier is None:
        return record
    parts = dict(earlier.parts or ([(earlier.part, earlier.planned)] if earlier.part is not None else []))
    if record.part is not None:
        parts[record.part] = parts.get(record.part, Counter()) + record.planned
    planned = earlier.planned + record.planned
    if len(parts) > 1:
        return Expected(earlier.key, earlier.trace_id, earlier.op, planned, None, tuple(parts.items()))
    return Expected(earlier.key, earlier.trace_id, earlier.op, planned, earlier.part or record.part)


def _record(line: str, where: str) -> dict[str, Any] | None:
    """One line's record; None for a record that is not a store or load with its bytes (skipped)."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        raise InputFileError(f"{where}: invalid JSON: {error.msg}") from None
    if not isinstance(record, dict) or "bytes" not in record or str(record.get("op")) not in _OPS:
        return None
    return record


def _unit(record: dict[str, Any], geometry: TransferGeometry, where: str) -> Expected:
    """The unit one record expects: its object, op, part and the commands ``geometry`` splits it into."""
    nbytes = record["bytes"]
    if not isinstance(nbytes, int) or isinstance(nbytes, bool) or nbytes < 0:
        raise InputFileError(f"{where}: bytes must be a non-negative integer, got {nbytes!r}")
    op = _OPS[record["op"]]
    trace_id = _trace_id(record.get("trace_id"), where)
    part = None if record.get("part") is None else str(record["part"])
    key = str(record.get("object_id") or f"trace-{trace_id}")
    return Expected(key, trace_id, op, geometry.commands(op, nbytes), part)


def read_semantic(path: str, geometry: TransferGeometry) -> SemanticTrace:
    """The units of ``path`` (JSONL), split by ``geometry``; errors name the line and field."""
    trace = SemanticTrace()
    units: dict[tuple[int, str], Expected] = {}
    try:
        handle = open(path, encoding="utf-8")  # noqa: SIM115 - closed below, errors worded here
    except FileNotFoundError:
        raise InputFileError(f"{path}: no such semantic trace file") from None
    except OSError as error:
        raise InputFileError(f"{path}: cannot read the semantic trace: {error.strerror or error}") from None
    with handle:
        for number, line in enumerate(handle, start=1):
            where = f"{path}: line {number}"
            if not line.strip():
                continue
            record = _record(line, where)
            if record is None:
                trace.skipped_lines += 1
                continue
            unit = _unit(record, geometry, where)
            earlier = units.get((unit.trace_id, unit.op))  # an object loaded twice, or its K then its V
            units[(unit.trace_id, unit.op)] = _add_record(earlier, unit)
            if unit.op == "store":  # a load re-reads the same blob: count its components once
                for name, size in (record.get("components") or {}).items():
                    if isinstance(size, int) and not isinstance(size, bool):
                        trace.components[str(name)] += size
    trace.expected = list(units.values())
    if not trace.expected:
        raise InputFileError(f"{path}: no semantic store/load records (op, bytes, trace_id) in it")
    return trace
