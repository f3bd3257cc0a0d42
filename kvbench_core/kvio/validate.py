"""Score a measured I/O log against a projection, joined per KV object by ``trace_id``.

Three complementary scores (the seed's; AUC is deliberately absent: the
geometry is deterministic, there is no class label):

- exact-match: per object and op, are the measured command count *and*
  device bytes equal to the projection?  The strictest check.
- WAPE: total mispredicted bytes / total measured bytes.  0 = right volume.
- size-distribution TV: total-variation distance between planned and measured
  command sizes in log2 bins.  0 = right shape.  Catches a wrong split that
  count and bytes miss (256K+768K vs 512K+512K).

A unit is one (object, op); stores and loads are scored separately.  By
default an op is scored if the trace holds commands of it, and an expected op
the trace lacks is listed in ``ops_missing`` (which fails the gate: a capture
that lost its stores must not pass on its loads); ``ops`` declares a
load-only or store-only capture.  Measured commands with a trace id the projection
does not know count as mispredicted bytes.  Optionally the commands' offsets
(each object's commands tile one extent; a load reads within what was
stored) and their order (ascending offsets within an object, objects in the
expected order) are checked too.  ``kvio.gate`` turns a report into the list of
missed thresholds (exit status 1 in ``kvbench score``).

Two I/O log layouts are read, line by line: kvbench's own I/O log
(``{trace_id, op: write|read, offset, bytes, …}``; a command's size is its
``requested`` length where the tier logged one, else the ``bytes`` the
syscall returned) and the eBPF
``nvme_uring_cmd_monitor`` JSONL (``event_type: nvme_cmd`` with ``user_data``
= ``trace_id << 32 | counter``, ``op_name``/``nvme_opcode``, ``nlb``,
``bytes``, ``data_len``).  Completion records, clock anchors and LMCache's
per-object semantic records carry no command size and are skipped.
"""

from __future__ import annotations

import itertools
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
    """Tagged command sizes per (trace_id, op), and what could not be attributed.  With ``keep_extents``
    each unit's ``(offset, size)`` commands are also kept in issue order (for the offset and order checks;
    memory grows with the trace, so only when asked)."""

    commands: dict[tuple[int, str], Counter[int]] = field(default_factory=lambda: defaultdict(Counter))
    untagged_commands: int = 0
    skipped_lines: int = 0
    truncated_last_line: bool = False
    keep_extents: bool = False
    extents: dict[tuple[int, str], list[tuple[int, int]]] = field(default_factory=lambda: defaultdict(list))
    #: per op, trace ids in the order of their first command
    first_seen: dict[str, dict[int, None]] = field(default_factory=lambda: defaultdict(dict))

    def add(self, trace_id: int, op: str, nbytes: int, offset: int | None = None) -> None:
        if trace_id == 0:
            self.untagged_commands += 1
            return
        self.commands[(trace_id, op)][nbytes] += 1
        self.first_seen[op].setdefault(trace_id)
        if self.keep_extents and offset is not None:
            self.extents[(trace_id, op)].append((offset, nbytes))


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


def _tracer_command(record: dict[str, Any], where: str,
                    nlb_bytes: int | None) -> tuple[int, str, int, int | None] | None:
    """``(trace_id, op, bytes, device byte offset)`` of an ``nvme_cmd`` record; None for flushes and other
    opcodes.  The offset is ``slba`` × the capture's block size (``bytes / nlb``, or ``nlb_bytes``)."""
    name, opcode = record.get("op_name"), record.get("nvme_opcode")
    if isinstance(name, str):
        op = _OPS.get(name.lower())
    else:
        op = _NVME_OPCODES.get(opcode) if isinstance(opcode, int) else None
    if op is None:
        return None
    trace_id = _int(record, "user_data", where) >> 32
    blocks = _int(record, "nlb", where) if "nlb" in record else None
    if nlb_bytes is not None and blocks is not None:
        nbytes = blocks * nlb_bytes  # the tracer's nlb is already a count (NLB + 1)
    elif "bytes" in record:
        nbytes = _int(record, "bytes", where)
    else:
        nbytes = _int(record, "data_len", where)
    block = nlb_bytes or (nbytes // blocks if blocks else None)
    offset = _int(record, "slba", where) * block if block and "slba" in record else None
    return trace_id, op, nbytes, offset


def read_trace(path: str, nlb_bytes: int | None = None, *, keep_extents: bool = False) -> MeasuredTrace:
    """Parse a kvbench I/O log or an NVMe tracer JSONL.  ``nlb_bytes`` recomputes tracer bytes as
    ``nlb × nlb_bytes`` when the capture's ``--lba-size`` was wrong.  A truncated last line (a
    capture stopped mid-write) is tolerated; any other malformed line is an error naming it."""
    if nlb_bytes is not None and nlb_bytes < 1:
        raise SpecError(f"--nlb-bytes: expected the capture's logical block size (e.g. 512 or 4096), got {nlb_bytes}")
    trace = MeasuredTrace(keep_extents=keep_extents)
    try:
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                _parse_line(trace, line, f"{path}: line {number}", nlb_bytes)
    except FileNotFoundError:
        raise InputFileError(f"{path}: no such I/O log") from None
    except (OSError, UnicodeDecodeError) as error:
        raise InputFileError(f"{path}: cannot read the I/O log: {getattr(error, 'strerror', None) or error}") from None
    return trace


def _parse_line(trace: MeasuredTrace, line: str, where: str, nlb_bytes: int | None) -> None:
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
        command = _tracer_command(record, where, nlb_bytes)
        if command is None:
            trace.skipped_lines += 1
        else:
            trace.add(*command)
    elif kind is None and "offset" in record and "trace_id" in record:
        op = _OPS.get(str(record.get("op")))
        if op is None:
            raise InputFileError(f"{where}: field 'op' must be write or read, got {record.get('op')!r}")
        # the command issued: the length asked for (an aligned O_DIRECT tail), else what was returned
        size = _int(record, "requested", where) if "requested" in record else _int(record, "bytes", where)
        trace.add(_int(record, "trace_id", where), op, size, _int(record, "offset", where))
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
    """What one (object, op) should put on the wire: its planned command sizes, and which KV part(s) it
    is.  ``parts`` holds each part's own planned commands, in record order, when separate records (K and V)
    share the object's trace id."""

    key: str
    trace_id: int
    op: str
    planned: Counter[int]
    part: str | None = None
    parts: tuple[tuple[str, Counter[int]], ...] = ()


def expected_from_manifest(manifest: Manifest, ops: Iterable[str] = OPS) -> list[Expected]:
    """Every object of the projection in every op."""
    return [Expected(obj.key, manifest.trace_ids[obj.key], op, manifest.geometry.commands(op, obj.nbytes))
            for obj in manifest.objects for op in ops]


@dataclass(frozen=True)
class ValidationOptions:
    """Which ops to score (None: those in the trace) and which optional checks to run."""

    ops: tuple[str, ...] | None = None
    check_offsets: bool = False
    check_order: bool = False


def validate(manifest: Manifest, trace: MeasuredTrace, options: ValidationOptions | None = None) -> dict[str, Any]:
    """The fidelity report of ``trace`` against ``manifest`` (overall and per op)."""
    return validate_expected(expected_from_manifest(manifest), trace, source="projection", options=options)


def split_by_part(unit: Expected, measured: Counter[int]) -> list[tuple[str, Counter[int], Counter[int]]]:
    """``(part, planned, measured)`` for each part of a unit: in record order each part claims, size by
    size, the commands it planned from the object's measured commands; what no part claims counts against
    the last part.  So separate K and V records sharing a trace id are each scored on their own share."""
    if not unit.parts:
        return [(unit.part, unit.planned, measured)] if unit.part is not None else []
    left = Counter(measured)
    out = []
    for part, planned in unit.parts:
        claimed = Counter({size: min(count, left[size]) for size, count in planned.items() if left[size]})
        left -= claimed
        out.append((part, planned, claimed))
    last_part, last_planned, last_claimed = out[-1]
    out[-1] = (last_part, last_planned, last_claimed + left)
    return out


def _extent_checks(expected: list[Expected], trace: MeasuredTrace, ops: list[str]) -> dict[str, Any]:
    """Offsets: each unit's commands tile one extent without gap or overlap, and an object's load reads
    within the extent its store wrote."""
    contiguous = within = loads = 0
    units = 0
    examples: list[dict[str, Any]] = []
    for unit in expected:
        commands = trace.extents.get((unit.trace_id, unit.op))
        if unit.op not in ops or not commands:
            continue
        units += 1
        ordered = sorted(commands)
        tiled = all(a + n == b for (a, n), (b, _) in itertools.pairwise(ordered))
        contiguous += tiled
        if not tiled and len(examples) < MISMATCH_EXAMPLES:
            examples.append({"key": unit.key, "op": unit.op, "problem": "gap or overlap between its commands"})
        stored = trace.extents.get((unit.trace_id, "store"))
        if unit.op == "load" and stored:
            loads += 1
            low, high = min(o for o, _ in stored), max(o + n for o, n in stored)
            inside = low <= ordered[0][0] and ordered[-1][0] + ordered[-1][1] <= high
            within += inside
            if not inside and len(examples) < MISMATCH_EXAMPLES:
                examples.append({"key": unit.key, "op": "load", "problem": "reads outside what its store wrote"})
    return {"contiguous": _fraction(contiguous, units), "loads_within_store": _fraction(within, loads),
            "examples": examples}


def _order_checks(expected: list[Expected], trace: MeasuredTrace, ops: list[str]) -> dict[str, Any]:
    """Order: within a unit, commands issued at ascending offsets; across objects, per op, the objects'
    first commands in the expected order (inversions = adjacent pairs out of order)."""
    ascending = units = 0
    for unit in expected:
        commands = trace.extents.get((unit.trace_id, unit.op))
        if unit.op in ops and commands:
            units += 1
            ascending += all(a < b for (a, _), (b, _) in itertools.pairwise(commands))
    return {"ascending_within_object": _fraction(ascending, units),
            "objects": {op: _object_order(expected, trace, op) for op in ops}}


def _object_order(expected: list[Expected], trace: MeasuredTrace, op: str) -> dict[str, Any]:
    """One op's objects by first command against the expected order: adjacent pairs out of order."""
    rank = {unit.trace_id: index for index, unit in enumerate(u for u in expected if u.op == op)}
    seen = [tid for tid in trace.first_seen.get(op, {}) if tid in rank]
    inversions = [(a, b) for a, b in itertools.pairwise(seen) if rank[a] > rank[b]]
    keys = {unit.trace_id: unit.key for unit in expected if unit.op == op}
    return {"objects": len(seen), "inversions": len(inversions),
            "first_out_of_order": keys[inversions[0][1]] if inversions else None}


def _unattributed(trace: MeasuredTrace, known: set[str], source: str) -> tuple[dict[str, Counter[int]], set[str]]:
    """The trace's commands of trace ids the expectation does not know, per op, and those ids; refuses a
    trace none of whose ids is known (the wrong expectation for this I/O)."""
    unattributed: dict[str, Counter[int]] = {op: Counter() for op in OPS}
    foreign_ids = set()
    for (trace_id, op), commands in trace.commands.items():
        if trace_id not in known:
            unattributed[op].update(commands)
            foreign_ids.add(trace_id)
    if foreign_ids and len(foreign_ids) == len({trace_id for trace_id, _ in trace.commands}):
        raise InputFileError(f"none of the I/O log's {len(foreign_ids)} trace ids is in the {source}: is it the "
                             f"{source} this I/O was recorded against (same model, keys and seed)?")
    return unattributed, foreign_ids


def _unattributed_totals(unattributed: dict[str, Counter[int]], foreign_ids: set[str]) -> dict[str, int]:
    return {"trace_ids": len(foreign_ids), "commands": sum(sum(c.values()) for c in unattributed.values()),
            "bytes": sum(total_bytes(c) for c in unattributed.values())}


Pairs = list[tuple[Counter[int], Counter[int]]]


def _pair_units(expected: list[Expected], trace: MeasuredTrace,
                ops: list[str]) -> tuple[dict[str, Pairs], dict[str, Pairs], list[dict[str, Any]]]:
    """Each scored unit's planned commands beside the measured ones, per op and per KV part, and the first
    ``MISMATCH_EXAMPLES`` units that differ."""
    units: dict[str, Pairs] = {op: [] for op in ops}
    parts: dict[str, Pairs] = defaultdict(list)
    mismatches: list[dict[str, Any]] = []
    for unit in expected:
        if unit.op not in units:
            continue
        measured = trace.commands.get((unit.trace_id, unit.op), Counter())
        units[unit.op].append((unit.planned, measured))
        for part, planned, share in split_by_part(unit, measured):
            parts[part].append((planned, share))
        if unit.planned != measured and len(mismatches) < MISMATCH_EXAMPLES:
            mismatches.append({"key": unit.key, "trace_id": unit.trace_id, "op": unit.op,
                               "planned": {str(s): n for s, n in sorted(unit.planned.items())},
                               "measured": {str(s): n for s, n in sorted(measured.items())}})
    return units, parts, mismatches


def validate_expected(expected: list[Expected], trace: MeasuredTrace, *, source: str,
                      options: ValidationOptions | None = None) -> dict[str, Any]:
    """The fidelity report of ``trace`` against ``expected`` units (overall, per op, per KV part).

    Stores and loads are scored separately; by default an op is scored if the trace holds commands of it
    and an expected op it lacks is listed in ``ops_missing``; ``options.ops`` declares the ops to score."""
    options = options or ValidationOptions()
    in_trace, ops = _ops_to_score(trace, options)
    declared = options.ops or {unit.op for unit in expected}
    known = {unit.trace_id for unit in expected}
    unattributed, foreign_ids = _unattributed(trace, known, source)
    units, parts, mismatches = _pair_units(expected, trace, ops)
    all_units = [unit for op in ops for unit in units[op]]
    report = {
        "format": FORMAT, "version": VERSION, "ops_scored": ops, "objects": len(known),
        "ops_missing": [op for op in OPS if op in declared and op not in in_trace],
        **_scores(all_units, sum((unattributed[op] for op in ops), Counter())),
        "by_op": {op: _scores(units[op], unattributed[op]) for op in ops},
        "unattributed": _unattributed_totals(unattributed, foreign_ids),
        "untagged_commands": trace.untagged_commands,
        "skipped_lines": trace.skipped_lines,
        "truncated_last_line": trace.truncated_last_line,
        "mismatches": mismatches,
    }
    return {**report, **_optional_sections(expected, trace, ops, parts, options)}


def _ops_to_score(trace: MeasuredTrace, options: ValidationOptions) -> tuple[list[str], list[str]]:
    """The ops the trace holds commands of, and the ops to score (declared, else those)."""
    in_trace = [op for op in OPS if any(key_op == op for _, key_op in trace.commands)]
    if not in_trace:
        raise InputFileError("the I/O log holds no tagged store or load commands to score")
    return in_trace, [op for op in OPS if op in options.ops] if options.ops is not None else in_trace


def _optional_sections(expected: list[Expected], trace: MeasuredTrace, ops: list[str], parts: dict[str, Pairs],
                       options: ValidationOptions) -> dict[str, Any]:
    """The report's sections only some validations have: by KV part, offsets, order."""
    sections: dict[str, Any] = {}
    if parts:  # K/V attribution: only a semantic source says which part an object is
        sections["by_part"] = {part: _scores(pairs, Counter()) for part, pairs in sorted(parts.items())}
    if options.check_offsets:
        sections["offsets"] = _extent_checks(expected, trace, ops)
    if options.check_order:
        sections["order"] = _order_checks(expected, trace, ops)
    return sections
