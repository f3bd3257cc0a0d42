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
``kvbench plan`` would split it.  ``part`` (``kv``/``k``/``v``) groups the
scores per KV part, and ``components`` (K / V / scale bytes of a packed
asymmetric blob) are summed for the report.  Lines of other kinds (the
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
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise InputFileError(f"{where}: invalid JSON: {error.msg}") from None
            if not isinstance(record, dict) or "bytes" not in record or str(record.get("op")) not in _OPS:
                trace.skipped_lines += 1
                continue
            nbytes = record["bytes"]
            if not isinstance(nbytes, int) or isinstance(nbytes, bool) or nbytes < 0:
                raise InputFileError(f"{where}: bytes must be a non-negative integer, got {nbytes!r}")
            op = _OPS[record["op"]]
            trace_id = _trace_id(record.get("trace_id"), where)
            part = record.get("part")
            key = str(record.get("object_id") or f"trace-{trace_id}")
            earlier = units.get((trace_id, op))  # an object loaded twice: its commands add up on the wire too
            planned = geometry.commands(op, nbytes) + (earlier.planned if earlier else Counter())
            units[(trace_id, op)] = Expected(key, trace_id, op, planned, None if part is None else str(part))
            if op == "store":  # a load re-reads the same blob: count its components once
                for name, size in (record.get("components") or {}).items():
                    if isinstance(size, int) and not isinstance(size, bool):
                        trace.components[str(name)] += size
    trace.expected = list(units.values())
    if not trace.expected:
        raise InputFileError(f"{path}: no semantic store/load records (op, bytes, trace_id) in it")
    return trace
