"""Score a measured command trace against a projection, joined per KV object by ``trace_id``.

Three complementary scores (the seed's; AUC is deliberately absent: the
geometry is deterministic, there is no class label):

- exact-match: per object and op, are the measured command count *and*
  device bytes equal to the plan?  The strictest check.
- WAPE: total mispredicted bytes / total measured bytes.  0 = right volume.
- size-distribution TV: total-variation distance between planned and measured
  command sizes in log2 bins.  0 = right shape.  Catches a wrong split that
  count and bytes miss (256K+768K vs 512K+512K).

A unit is one (object, op); an op is scored only if the trace holds commands
of that op at all (a load-only capture scores loads).  Measured commands with
a trace id the plan does not know count as mispredicted bytes.

Two trace layouts are read, line by line: kvbench's own I/O log
(``{trace_id, op: write|read, offset, bytes, …}``) and the eBPF
``nvme_uring_cmd_monitor`` JSONL (``event_type: nvme_cmd`` with ``user_data``
= ``trace_id << 32 | counter``, ``op_name``/``nvme_opcode``, ``nlb``,
``bytes``, ``data_len``).  Completion records, clock anchors and LMCache's
per-object semantic records carry no command size and are skipped.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kvbench_core.contracts.errors import InputFileError, SpecError
from kvbench_core.kvio.commands import OPS, log2_histogram, total_bytes
from kvbench_core.kvio.manifest import Manifest

FORMAT = "kvbench-kvio-validation"
VERSION = 1
#: How many mismatching units the report lists in full.
MISMATCH_EXAMPLES = 20

_OPS = {"write": "store", "store": "store", "read": "load", "load": "load"}
_NVME_OPCODES = {1: "store", 2: "load"}  # NVMe I/O opcodes: 0x01 write, 0x02 read


@dataclass
class MeasuredTrace:
    """Tagged command sizes per (trace_id, op), and what could not be attributed."""

    commands: dict[tuple[int, str], Counter[int]] = field(default_factory=lambda: defaultdict(Counter))
    untagged_commands: int = 0
    skipped_lines: int = 0
    truncated_last_line: bool = False

    def add(self, trace_id: int, op: str, nbytes: int) -> None:
        if trace_id == 0:
            self.untagged_commands += 1
        else:
            self.commands[(trace_id, op)][nbytes] += 1


def _int(record: dict[str, Any], name: str, where: str) -> int:
    value = record.get(name)
    if isinstance(value, str):
        try:
            return int(value, 0)  # tracers print user_data as decimal or 0x-hex
        except ValueError:
            pass
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if value is None:
        raise InputFileError(f"{where}: field '{name}' is missing")
    raise InputFileError(f"{where}: field '{name}' must be a non-negative integer, got {value!r}")


def _tracer_command(record: dict[str, Any], where: str, lba_bytes: int | None) -> tuple[int, str, int] | None:
    """``(trace_id, op, bytes)`` of an ``nvme_cmd`` record; None for flushes and other opcodes."""
    name, opcode = record.get("op_name"), record.get("nvme_opcode")
    if isinstance(name, str):
        op = _OPS.get(name.lower())
    else:
        op = _NVME_OPCODES.get(opcode) if isinstance(opcode, int) else None
    if op is None:
        return None
    trace_id = _int(record, "user_data", where) >> 32
    if lba_bytes is not None and "nlb" in record:
        nbytes = _int(record, "nlb", where) * lba_bytes  # the tracer's nlb is already a count (NLB + 1)
    elif "bytes" in record:
        nbytes = _int(record, "bytes", where)
    else:
        nbytes = _int(record, "data_len", where)
    return trace_id, op, nbytes


def read_trace(path: str, lba_bytes: int | None = None) -> MeasuredTrace:
    """Parse a kvbench I/O log or an NVMe tracer JSONL.  ``lba_bytes`` recomputes tracer bytes as
    ``nlb × lba_bytes`` when the capture's ``--lba-size`` was wrong.  A truncated last line (a
    capture stopped mid-write) is tolerated; any other malformed line is an error naming it."""
    if lba_bytes is not None and lba_bytes < 1:
        raise SpecError(f"--lba-bytes: expected the capture's logical block size (e.g. 512 or 4096), got {lba_bytes}")
    trace = MeasuredTrace()
    try:
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                _parse_line(trace, line, f"{path}: line {number}", lba_bytes)
    except FileNotFoundError:
        raise InputFileError(f"{path}: no such trace file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise InputFileError(f"{path}: cannot read the trace: {getattr(error, 'strerror', None) or error}") from None
    return trace


def _parse_line(trace: MeasuredTrace, line: str, where: str, lba_bytes: int | None) -> None:
    if not line.strip():
        return
    try:
        record = json.loads(line)
    except json.JSONDecodeError as error:
        if not line.endswith("\n"):  # only the last line can lack its newline: a capture cut mid-write
            trace.truncated_last_line = True
            return
        raise InputFileError(f"{where}: invalid JSON: {error.msg}") from None
    if not isinstance(record, dict):
        raise InputFileError(f"{where}: expected a JSON object")
    kind = record.get("event_type")
    if kind == "nvme_cmd":
        command = _tracer_command(record, where, lba_bytes)
        if command is None:
            trace.skipped_lines += 1
        else:
            trace.add(*command)
    elif kind is None and "offset" in record and "trace_id" in record:
        op = _OPS.get(str(record.get("op")))
        if op is None:
            raise InputFileError(f"{where}: field 'op' must be write or read, got {record.get('op')!r}")
        trace.add(_int(record, "trace_id", where), op, _int(record, "bytes", where))
    else:
        trace.skipped_lines += 1


def tv_distance(planned: Counter[int], measured: Counter[int]) -> float:
    """Total-variation distance of two histograms, each normalised to a distribution (0 = same shape)."""
    p_total, q_total = sum(planned.values()), sum(measured.values())
    if not p_total or not q_total:
        return 0.0 if p_total == q_total else 1.0
    return 0.5 * sum(abs(planned[b] / p_total - measured[b] / q_total) for b in set(planned) | set(measured))


def _fraction(hits: int, total: int) -> dict[str, Any]:
    return {"matched": hits, "total": total, "fraction": hits / total if total else None}


def _scores(units: list[tuple[Counter[int], Counter[int]]], extra_measured: Counter[int]) -> dict[str, Any]:
    """Exact-match, size-match, WAPE and TV over ``(planned, measured)`` units plus unattributed commands."""
    planned_hist: Counter[int] = Counter()
    measured_hist = log2_histogram(extra_measured)
    error = measured_bytes = total_bytes(extra_measured)
    exact = sizes = 0
    for planned, measured in units:
        p_bytes, m_bytes = total_bytes(planned), total_bytes(measured)
        exact += sum(planned.values()) == sum(measured.values()) and p_bytes == m_bytes
        sizes += planned == measured
        error += abs(p_bytes - m_bytes)
        measured_bytes += m_bytes
        planned_hist.update(log2_histogram(planned))
        measured_hist.update(log2_histogram(measured))
    return {
        "exact_match": _fraction(exact, len(units)),
        "size_match": _fraction(sizes, len(units)),
        "wape": error / measured_bytes if measured_bytes else None,
        "tv_distance": tv_distance(planned_hist, measured_hist),
        "commands": {"planned": sum(planned_hist.values()), "measured": sum(measured_hist.values())},
        "bytes": {"planned": sum(total_bytes(p) for p, _ in units), "measured": measured_bytes},
    }


@dataclass(frozen=True)
class Expected:
    """What one (object, op) should put on the wire: its planned command sizes, and which KV part it is."""

    key: str
    trace_id: int
    op: str
    planned: Counter[int]
    part: str | None = None


def expected_from_manifest(manifest: Manifest, ops: Iterable[str] = OPS) -> list[Expected]:
    """Every object of the plan in every op."""
    return [Expected(obj.key, manifest.trace_ids[obj.key], op, manifest.geometry.commands(op, obj.nbytes))
            for obj in manifest.objects for op in ops]


def validate(manifest: Manifest, trace: MeasuredTrace) -> dict[str, Any]:
    """The fidelity report of ``trace`` against ``manifest`` (overall and per op)."""
    return validate_expected(expected_from_manifest(manifest), trace, source="plan")


def validate_expected(expected: list[Expected], trace: MeasuredTrace, *, source: str) -> dict[str, Any]:
    """The fidelity report of ``trace`` against ``expected`` units (overall, per op, per KV part).

    An op is scored only if the trace holds commands of it (a load-only capture scores loads)."""
    ops = [op for op in OPS if any(key_op == op for _, key_op in trace.commands)]
    if not ops:
        raise InputFileError("the measured trace holds no tagged store or load commands to validate")
    known = {unit.trace_id for unit in expected}
    unattributed: dict[str, Counter[int]] = {op: Counter() for op in OPS}
    foreign_ids = set()
    for (trace_id, op), commands in trace.commands.items():
        if trace_id not in known:
            unattributed[op].update(commands)
            foreign_ids.add(trace_id)
    if foreign_ids and len(foreign_ids) == len({trace_id for trace_id, _ in trace.commands}):
        raise InputFileError(f"none of the trace's {len(foreign_ids)} trace ids is in the {source}: is it the "
                             f"{source} this I/O was recorded against (same model, keys and seed)?")
    units: dict[str, list[tuple[Counter[int], Counter[int]]]] = {op: [] for op in ops}
    parts: dict[str, list[tuple[Counter[int], Counter[int]]]] = defaultdict(list)
    mismatches: list[dict[str, Any]] = []
    for unit in expected:
        if unit.op not in units:
            continue
        measured = trace.commands.get((unit.trace_id, unit.op), Counter())
        units[unit.op].append((unit.planned, measured))
        if unit.part is not None:
            parts[unit.part].append((unit.planned, measured))
        if unit.planned != measured and len(mismatches) < MISMATCH_EXAMPLES:
            mismatches.append({"key": unit.key, "trace_id": unit.trace_id, "op": unit.op,
                               "planned": {str(s): n for s, n in sorted(unit.planned.items())},
                               "measured": {str(s): n for s, n in sorted(measured.items())}})
    all_units = [unit for op in ops for unit in units[op]]
    report = {
        "format": FORMAT, "version": VERSION, "ops_scored": ops, "objects": len(known),
        **_scores(all_units, sum((unattributed[op] for op in ops), Counter())),
        "by_op": {op: _scores(units[op], unattributed[op]) for op in ops},
        "unattributed": {"trace_ids": len(foreign_ids),
                         "commands": sum(sum(c.values()) for c in unattributed.values()),
                         "bytes": sum(total_bytes(c) for c in unattributed.values())},
        "untagged_commands": trace.untagged_commands,
        "skipped_lines": trace.skipped_lines,
        "truncated_last_line": trace.truncated_last_line,
        "mismatches": mismatches,
    }
    if parts:  # K/V attribution: only a semantic source says which part an object is
        report["by_part"] = {part: _scores(pairs, Counter()) for part, pairs in sorted(parts.items())}
    return report
