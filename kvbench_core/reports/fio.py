"""The fio workload distiller: turn a kvbench result into an fio job that reproduces its I/O pattern.

Two sources, best first:

- ``sections.block_trace`` (a traced run, kvbench-blktrace plugin): what the kernel
  really sent to the device: request sizes per direction (bssplit), the
  read/write mix in requests, the in-flight depth at dispatch (iodepth), the
  writes between fsyncs and the host gap before each fsync (fsync, thinktime).
- kvbench's per-tier counters (any run): the persistent tier's bytes, operations
  and commands per direction, its transfer size and per-entry queue depth,
  the number of workers, and the generation pacing between a user's requests.

Either way the job is ``rw=randrw`` over ``direct=1`` libaio, as the seed's
distiller writes it, so it can be run against any device; the observations it
was built from are restated as comments at the top.  Format: docs/fio.md.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kvbench_core.contracts.errors import InputFileError, UserError
from kvbench_core.results.document import ResultDocument
from kvbench_core.runspec.spec_schema import GENERATION_MS_PER_TOKEN

ALIGN = 4096  # block sizes are rounded up to this: O_DIRECT on a 4Kn device rejects anything smaller
MAX_SPLIT = 64  # fio keeps at most 64 block sizes per direction
MiB = 1 << 20


@dataclass
class FioProfile:
    """What the job reproduces; ``render`` writes it as an fio job file."""

    name: str
    read_sizes: dict[int, int]  # block size -> I/O count
    write_sizes: dict[int, int]
    iodepth: int
    numjobs: int
    footprint: int  # bytes over all jobs
    directory: str
    runtime_s: int
    fsync_every: int = 0
    thinktime_us: int = 0
    thinktime_blocks: int = 0
    comments: list[str] = field(default_factory=list)


def block_split(sizes: dict[int, int]) -> list[tuple[int, int]]:
    """``[(block size, percent)]`` for fio's bssplit: sizes aligned, at most 64, percents summing to 100.

    Sizes beyond the 64 most frequent are counted with the nearest kept size, so
    no I/O is dropped; percents are whole numbers by largest remainder.
    """
    aligned: dict[int, int] = {}
    for size, count in sizes.items():
        if count > 0:
            key = max(ALIGN, -(-size // ALIGN) * ALIGN)
            aligned[key] = aligned.get(key, 0) + count
    kept = dict(sorted(aligned.items(), key=lambda item: (-item[1], item[0]))[:MAX_SPLIT])
    for size, count in aligned.items():
        if size not in kept:
            nearest = min(kept, key=lambda k: (abs(k - size), k))
            kept[nearest] += count
    total = sum(kept.values())
    if total == 0:
        return []
    exact = {size: 100 * count / total for size, count in kept.items()}
    percents = {size: int(value) for size, value in exact.items()}
    for size in sorted(exact, key=lambda s: (percents[s] - exact[s], s))[: 100 - sum(percents.values())]:
        percents[size] += 1
    return sorted((size, pct) for size, pct in percents.items() if pct > 0)


def fio_size(n: int) -> str:
    """A byte count in fio's notation (k/m/g are powers of 1024 in fio)."""
    for suffix, unit in (("g", 1 << 30), ("m", 1 << 20), ("k", 1 << 10)):
        if n % unit == 0:
            return f"{n // unit}{suffix}"
    return str(n)


def render(profile: FioProfile) -> str:
    """The fio job file for ``profile``."""
    reads, writes = sum(profile.read_sizes.values()), sum(profile.write_sizes.values())
    split = {op: ":".join(f"{fio_size(size)}/{pct}" for size, pct in block_split(sizes))
             for op, sizes in (("read", profile.read_sizes), ("write", profile.write_sizes))}
    per_job = max(MiB, -(-profile.footprint // profile.numjobs // MiB) * MiB)
    lines = [f"; {line}" for line in profile.comments]
    lines += [f"[{profile.name}]", "ioengine=libaio", "direct=1", "time_based", f"runtime={profile.runtime_s}"]
    if reads and writes:
        lines += ["rw=randrw", f"rwmixread={round(100 * reads / (reads + writes))}",
                  f"bssplit={split['read']},{split['write']}"]
    else:
        lines += ["rw=randread" if reads else "rw=randwrite", f"bssplit={split['read' if reads else 'write']}"]
    lines += [f"iodepth={profile.iodepth}", f"numjobs={profile.numjobs}", f"size={fio_size(per_job)}",
              f"directory={profile.directory}"]
    if profile.fsync_every and writes:
        lines.append(f"fsync={profile.fsync_every}")
    if profile.thinktime_us > 0:
        lines += [f"thinktime={profile.thinktime_us}", f"thinktime_blocks={max(1, profile.thinktime_blocks)}"]
    lines += ["refill_buffers=1", "norandommap=1", "randrepeat=0", "group_reporting",
              "percentile_list=50:95:99:99.9:99.99"]
    return "\n".join(lines) + "\n"


# -- from a result ------------------------------------------------------------------------------------


def _job_name(document: ResultDocument) -> str:
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", document.run.name or "run").strip("-") or "run"
    return f"kvbench-{name}"


def _tier_of(document: ResultDocument, section: Mapping[str, Any] | None) -> tuple[str, Mapping[str, Any]]:
    """The tier whose I/O is reproduced: the traced one, else the first persistent (non-volatile) one."""
    tiers = document.tiers
    names = list((section or {}).get("paths") or {}) or [n for n, t in tiers.items() if not t["volatile"]]
    for name in names:
        if name in tiers:
            return name, tiers[name]
    raise UserError("the result has no persistent tier (only memory tiers): there is no device I/O to distil")


def _footprint(tier: Mapping[str, Any]) -> int:
    """The span the run's files could occupy: at most the tier's capacity, at most what the run moved."""
    moved = tier["read"]["bytes"] + tier["write"]["bytes"]
    capacity = tier.get("capacity_bytes")
    return max(MiB, min(moved, capacity) if capacity else moved)


def _header(document: ResultDocument, source: str, tier_name: str) -> list[str]:
    run = document.run
    return [f"kvbench fio distiller: run {run.id} ({run.name or 'unnamed'}), tier '{tier_name}'",
            f"source: {source}",
            "every [job] value below comes from the observations listed here; point directory= at the "
            "device under test"]


def _percent_line(what: str, reads: float, writes: float) -> str:
    total = reads + writes
    return f"{what}: read {reads:.0f}, write {writes:.0f} ({100 * reads / total:.1f}% reads)" if total else \
        f"{what}: none"


def profile_from_trace(document: ResultDocument, section: Mapping[str, Any]) -> FioProfile:
    """Block sizes, mix, depth, fsync cadence and think time as the kernel saw them."""
    tier_name, tier = _tier_of(document, section)
    hists, totals = section["histograms"], section["totals"]
    sizes = {op: {s["bytes"]: s["count"] for s in section["bssplit"][op]} for op in ("read", "write")}
    reads, writes = totals["read"]["ios"], totals["write"]["ios"]
    depth_read, depth_write = hists["queue_depth_read"], hists["queue_depth_write"]
    weighted = sum((h["p50"] or 0) * h["count"] for h in (depth_read, depth_write))
    counted = depth_read["count"] + depth_write["count"]
    iodepth = max(1, round(weighted / counted)) if counted else 1
    fsyncs = hists["syscall_fsync_us"]["count"]
    fsync_every = round(writes / fsyncs) if fsyncs and writes else 0
    gap = hists["write_to_fsync_gap_us"]
    devices = ", ".join(f"{d['name']} ({d['dev']})" for d in section["devices"]) or "the traced disks"
    comments = [
        *_header(document, f"block trace ({section.get('tool', 'bpftrace')}) of {devices}", tier_name),
        _percent_line("block requests", reads, writes),
        _percent_line("block bytes", totals["read"]["bytes"], totals["write"]["bytes"]),
        f"in flight at dispatch, median: read {depth_read['p50']}, write {depth_write['p50']} -> iodepth={iodepth}",
        f"fsync calls {fsyncs}; write requests per fsync -> fsync={fsync_every}",
        f"host gap write -> fsync, median {gap['p50']} us -> thinktime (after each fsync's worth of writes)",
        "block sizes rounded up to 4 KiB; bssplit percents are of requests",
    ]
    return FioProfile(
        name=_job_name(document), read_sizes=sizes["read"], write_sizes=sizes["write"],
        iodepth=iodepth, numjobs=1, footprint=_footprint(tier), directory=_directory(section, tier, tier_name),
        runtime_s=_runtime(document), fsync_every=fsync_every,
        thinktime_us=round(gap["p50"]) if gap["count"] and fsync_every else 0, thinktime_blocks=fsync_every,
        comments=comments)


def _command_sizes(op: Mapping[str, Any], transfer_size: int) -> dict[int, int]:
    """Commands by size: every entry is ``transfer_size`` pieces plus one shorter tail.

    With averages only, an op of ``commands`` commands has ``commands - ops``
    full pieces and ``ops`` tails whose mean size is what is left of the bytes.
    """
    ops, nbytes, commands = op["ops"], op["bytes"], op["commands"]
    if commands == 0:
        return {}
    full = commands - ops
    tail_bytes = nbytes - full * transfer_size
    if full <= 0 or tail_bytes <= 0:
        return {round(nbytes / commands): commands}
    sizes = {transfer_size: full}
    tail = round(tail_bytes / ops)
    sizes[tail] = sizes.get(tail, 0) + ops
    return sizes


def _generation_ms_per_token(spec: Mapping[str, Any]) -> float:
    # Not the resolved ``generation_ms_per_token``: results redact it ("token" reads as a credential).
    generation = spec["workload"]["generation"]
    return GENERATION_MS_PER_TOKEN[generation] if isinstance(generation, str) else float(generation)


@dataclass(frozen=True)
class _Load:
    """The run's concurrency as fio sees it: streams of I/O, and whether generation paces each one."""

    workers: int
    users: int
    generation_ms: float  # per token
    generated: float  # tokens per request, the mean

    @property
    def streams(self) -> int:
        return max(1, min(self.users, self.workers))

    @property
    def paced(self) -> bool:
        """A user's generation pause is its worker's idle time only when every user has a worker of its own."""
        return self.users <= self.workers


def _load(document: ResultDocument) -> _Load:
    spec, workload = document.spec.resolved, document.workload or {}
    return _Load(workers=workload.get("workers") or spec["workload"]["max_inflight"] or spec["workload"]["users"],
                 users=workload.get("users_final") or spec["workload"]["users"],
                 generation_ms=_generation_ms_per_token(spec),
                 generated=(workload.get("stats") or {}).get("generation_length", {}).get("mean") or 0)


def _pacing_line(load: _Load, commands_per_request: int) -> str:
    if load.paced:
        return (f"generation {load.generation_ms:g} ms/token x {load.generated:g} tokens/request, about "
                f"{commands_per_request} commands per request -> thinktime")
    return (f"generation pacing overlaps other users' I/O ({load.users} users > {load.workers} workers): "
            "no thinktime")


def profile_from_io_record(document: ResultDocument) -> FioProfile:
    """Command sizes, mix and concurrency from kvbench's per-tier counters (no trace needed)."""
    tier_name, tier = _tier_of(document, None)
    describe = tier.get("describe") or {}
    read, write = tier["read"], tier["write"]
    commands = read["commands"] + write["commands"]
    if commands == 0:
        raise UserError(f"tier '{tier_name}' did no I/O in the measured window: there is nothing to distil")
    average = max(round((read["bytes"] + write["bytes"]) / commands), 1)
    transfer_size = int(describe.get("transfer_size") or 0) or average
    load = _load(document)
    per_entry = int(describe.get("commands_in_flight") or describe.get("queue_depth") or 1)  # the effective depth
    requests = document.requests["completed"]
    commands_per_request = round(commands / requests) if requests else 0
    think_us = round(load.generation_ms * 1000 * load.generated) if load.paced else 0
    fsync_every = round(write["commands"] / write["ops"]) if describe.get("fsync") and write["ops"] else 0
    comments = [
        *_header(document, "kvbench's per-tier counters (the run was not block-traced)", tier_name),
        _percent_line("commands", read["commands"], write["commands"]),
        _percent_line("bytes", read["bytes"], write["bytes"]),
        f"entries: read {read['ops']}, write {write['ops']}; transfer size {transfer_size} B "
        "-> full pieces plus one average tail per entry",
        f"{load.workers} workers, {load.users} users -> numjobs={load.streams}; {per_entry} commands in flight per "
        f"entry -> iodepth={per_entry}",
        _pacing_line(load, commands_per_request),
        f"fsync after every entry ({fsync_every} commands)" if fsync_every else "no fsync per entry",
        "block sizes rounded up to 4 KiB; bssplit percents are of commands",
        *_io_path_note(describe),
    ]
    return FioProfile(
        name=_job_name(document), read_sizes=_command_sizes(read, transfer_size),
        write_sizes=_command_sizes(write, transfer_size), iodepth=per_entry, numjobs=load.streams,
        footprint=_footprint(tier), directory=_directory(None, tier, tier_name), runtime_s=_runtime(document),
        fsync_every=fsync_every, thinktime_us=think_us, thinktime_blocks=commands_per_request, comments=comments)


def _io_path_note(describe: Mapping[str, Any]) -> list[str]:
    """The job is always libaio with direct=1; say so when the run went another way (buffered I/O through the
    page cache, psync), since then the job is not "every value from the observations": it measures the device
    without the page cache the run's reads may have been served from."""
    engine, direct = describe.get("engine"), describe.get("direct")
    if direct is not False and engine in (None, "libaio"):
        return []
    how = ", ".join(part for part in (f"engine {engine}" if engine else "",
                                      "buffered (direct: false)" if direct is False else "") if part)
    return [f"the run's I/O path: {how}; this job uses ioengine=libaio direct=1 (the device without the page "
            "cache), so its latencies are not the run's; edit both lines to match the run's path"]


def _directory(section: Mapping[str, Any] | None, tier: Mapping[str, Any], tier_name: str) -> str:
    paths = (section or {}).get("paths") or {}
    return paths.get(tier_name) or (tier.get("describe") or {}).get("path") or "."


def _runtime(document: ResultDocument) -> int:
    return max(1, math.ceil(document.window["measured_s"]))


def distill(document: ResultDocument, *, source: str = "auto", size: int | None = None,
            directory: str | None = None, runtime_s: int | None = None) -> str:
    """The fio job for ``document`` (``source``: auto = the block trace when there is one)."""
    if document.is_summary:
        raise UserError("a trials summary keeps only the headline medians, not per-tier I/O: "
                        "give one of its trials (<name>-trialN.json)")
    if not document.metrics:
        raise InputFileError("the result has no metrics (the run stopped before measuring): nothing to distil")
    sections = document.sections or {}
    section = sections.get("block_trace")
    traced = bool(section) and section["totals"]["read"]["ios"] + section["totals"]["write"]["ios"] > 0
    if source == "trace" and not traced:
        status = sections.get("block_trace_status") or {}
        raise UserError("the result has no block trace with block I/O"
                        + (f" ({status['reason']})" if status.get("reason") else "")
                        + "; use --source counters, or run with 'tracing: block'")
    use_trace = traced and source != "record"
    profile = profile_from_trace(document, section) if use_trace else profile_from_io_record(document)
    if size is not None:
        profile.footprint = size
    if directory is not None:
        profile.directory = directory
    if runtime_s is not None:
        profile.runtime_s = runtime_s
    return render(profile)
