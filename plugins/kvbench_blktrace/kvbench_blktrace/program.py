"""The bpftrace program: block-request and file-syscall histograms for one process and a set of disks.

Block requests are matched across tracepoints by ``(dev, sector)``, the way
blktrace-style tools without kprobes do (the request pointer is not a
tracepoint field); a request inserted into the I/O scheduler gives Q2D
(insert -> issue), every issued one gives D2C (issue -> complete).  Requests
already in flight when tracing starts are skipped: their issue was not seen.
Block events cannot be tied to a process (completion runs in interrupt
context), so they are filtered by disk; syscalls are filtered by the
benchmark's pid and to file descriptors above 2, which keeps progress output on
stdout/stderr out of the write latencies.

Every map the program prints is listed in ``HISTOGRAMS`` or ``SIZE_MAPS``; the
section builder reads the same tables, so a map cannot be added on one side only.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvbench_blktrace.devices import TraceDevice

#: The program's line markers keep the plugin's first name, so captures made before the rename still parse.
READY_MARKER = "kvbench-trace: attached"
#: Printed at exit, before the maps: how long the probes were attached (a standalone capture's runtime).
TRACED_MARKER = "kvbench-trace: traced_ms"
#: The in-flight histogram is linear (exact depths) up to this, one overflow bucket above; bpftrace 0.17
#: allows at most 1000 lhist buckets.
MAX_DEPTH = 1000


@dataclass(frozen=True)
class HistogramInfo:
    """One printed histogram map and what it measures (carried into the result section)."""

    layer: str
    unit: str
    what: str


HISTOGRAMS: dict[str, HistogramInfo] = {
    "d2c_read_us": HistogramInfo("device", "us", "block read request: issue to driver -> completion (D2C)"),
    "d2c_write_us": HistogramInfo("device", "us", "block write request: issue to driver -> completion (D2C)"),
    "d2c_flush_us": HistogramInfo("device", "us", "cache-flush request: issue -> completion (what fsync waits on)"),
    "q2d_read_us": HistogramInfo("scheduler", "us", "block read request: insert into I/O scheduler -> issue (Q2D)"),
    "q2d_write_us": HistogramInfo("scheduler", "us", "block write request: insert into I/O scheduler -> issue"),
    "queue_depth_read": HistogramInfo("device", "requests", "requests in flight on the traced disks when a "
                                                            "read is issued (itself included)"),
    "queue_depth_write": HistogramInfo("device", "requests", "requests in flight on the traced disks when a "
                                                             "write is issued (itself included)"),
    "syscall_read_us": HistogramInfo("syscall", "us", "read/pread64/preadv/preadv2: entry -> return"),
    "syscall_write_us": HistogramInfo("syscall", "us", "write/pwrite64/pwritev/pwritev2: entry -> return"),
    "syscall_fsync_us": HistogramInfo("syscall", "us", "fsync/fdatasync: entry -> return"),
    "write_to_fsync_gap_us": HistogramInfo("syscall", "us", "same thread: last write's return -> fsync entry "
                                                            "(host time between the data and the flush)"),
    "fadvise_to_read_gap_us": HistogramInfo("syscall", "us", "same thread: posix_fadvise return -> next read "
                                                             "entry (page-cache management before a read)"),
}
#: ``@bs_<op>[bytes]: count`` maps: exact block-request sizes (the bssplit).
SIZE_MAPS = {"bs_read": "read", "bs_write": "write"}
#: ``@lba_<op>[bucket]: count`` maps: where on the disk requests land, in ``LBA_BUCKET_BYTES`` linear buckets.
LBA_MAPS = {"lba_read": "read", "lba_write": "write"}
LBA_BUCKET_BYTES = 10 * 10**9  # the seed's 10 GB heatmap buckets
SECTOR = 512  # the block layer counts in 512-byte sectors whatever the device's logical block size
#: Scalar counters printed alongside (``depth_resyncs``: times the shared in-flight count had drifted below 1).
COUNTERS = ("flush_ios", "other_ios", "depth_resyncs")

READ_CALLS = ("read", "pread64", "preadv", "preadv2")  # CPython's os.preadv is preadv2
WRITE_CALLS = ("write", "pwrite64", "pwritev", "pwritev2")
FSYNC_CALLS = ("fsync", "fdatasync")


def _syscalls(names: tuple[str, ...], phase: str) -> str:
    return ", ".join(f"tracepoint:syscalls:sys_{phase}_{name}" for name in names)


def _block_probes(devices: list[TraceDevice]) -> str:
    disks = " || ".join(f"args->dev == {device.kernel_dev}" for device in devices)
    # rwbs is "[F]<op>[F][A][S][M]": an optional leading F (pre-flush), then R/W/D/F for the operation.
    # It is classified once, at issue, and the class kept with the request for its completion.
    return f"""
tracepoint:block:block_rq_insert / {disks} / {{ @insert_ns[args->dev, args->sector] = nsecs; }}

tracepoint:block:block_rq_issue / {disks} / {{
  $op = 0;
  if (strncmp(args->rwbs, "R", 1) == 0 || strncmp(args->rwbs, "FR", 2) == 0) {{ $op = 1; }}
  else if (strncmp(args->rwbs, "W", 1) == 0 || strncmp(args->rwbs, "FW", 2) == 0) {{ $op = 2; }}
  else if (strncmp(args->rwbs, "F", 1) == 0) {{ $op = 3; }}
  // A key still present is a collision (flushes share a sector): count that request once.
  if (@issue_ns[args->dev, args->sector] == 0) {{ @inflight++; }}
  // @inflight is one map value updated from every CPU without atomics, so concurrent updates can be
  // lost; the request being issued is in flight itself, so a count below 1 is drift: resync and say so.
  if (@inflight < 1) {{ @inflight = 1; @depth_resyncs = sum(1); }}
  @issue_ns[args->dev, args->sector] = nsecs;
  @issue_op[args->dev, args->sector] = $op;
  $queued = @insert_ns[args->dev, args->sector];
  delete(@insert_ns[args->dev, args->sector]);
  if ($op == 1) {{
    @bs_read[args->bytes] = count();
    @lba_read[args->sector / {LBA_BUCKET_BYTES // SECTOR}] = count();
    @queue_depth_read = lhist(@inflight, 0, {MAX_DEPTH}, 1);
    if ($queued) {{ @q2d_read_us = hist((nsecs - $queued) / 1000); }}
  }} else if ($op == 2) {{
    @bs_write[args->bytes] = count();
    @lba_write[args->sector / {LBA_BUCKET_BYTES // SECTOR}] = count();
    @queue_depth_write = lhist(@inflight, 0, {MAX_DEPTH}, 1);
    if ($queued) {{ @q2d_write_us = hist((nsecs - $queued) / 1000); }}
  }} else if ($op == 3) {{
    @flush_ios = count();
  }} else {{
    @other_ios = count();
  }}
}}

tracepoint:block:block_rq_complete / {disks} / {{
  // Issue reports an unset sector (a flush) as 0, completion as all ones: match them up.
  $sector = (int64)args->sector == -1 ? 0 : args->sector;
  $issued = @issue_ns[args->dev, $sector];
  if ($issued) {{
    $op = @issue_op[args->dev, $sector];
    $us = (nsecs - $issued) / 1000;
    if ($op == 1) {{ @d2c_read_us = hist($us); }}
    else if ($op == 2) {{ @d2c_write_us = hist($us); }}
    else if ($op == 3) {{ @d2c_flush_us = hist($us); }}
    delete(@issue_ns[args->dev, $sector]);
    delete(@issue_op[args->dev, $sector]);
    @inflight--;
  }}
}}
"""


def _syscall_probes(pid: int) -> str:
    mine = f"pid == {pid} && args->fd > 2"
    return f"""
{_syscalls(READ_CALLS, "enter")} / {mine} / {{
  @read_ns[tid] = nsecs;
  if (@last_fadvise_ns[tid]) {{
    @fadvise_to_read_gap_us = hist((nsecs - @last_fadvise_ns[tid]) / 1000);
    delete(@last_fadvise_ns[tid]);
  }}
}}
// fadvise64 on x86_64, fadvise64_64 on arm64 and others
tracepoint:syscalls:sys_exit_fadvise64* / pid == {pid} / {{ @last_fadvise_ns[tid] = nsecs; }}
{_syscalls(READ_CALLS, "exit")} / @read_ns[tid] / {{
  @syscall_read_us = hist((nsecs - @read_ns[tid]) / 1000);
  delete(@read_ns[tid]);
}}
{_syscalls(WRITE_CALLS, "enter")} / {mine} / {{ @write_ns[tid] = nsecs; }}
{_syscalls(WRITE_CALLS, "exit")} / @write_ns[tid] / {{
  @syscall_write_us = hist((nsecs - @write_ns[tid]) / 1000);
  delete(@write_ns[tid]);
  @last_write_ns[tid] = nsecs;
}}
{_syscalls(FSYNC_CALLS, "enter")} / {mine} / {{
  @fsync_ns[tid] = nsecs;
  if (@last_write_ns[tid]) {{
    @write_to_fsync_gap_us = hist((nsecs - @last_write_ns[tid]) / 1000);
    delete(@last_write_ns[tid]);
  }}
}}
{_syscalls(FSYNC_CALLS, "exit")} / @fsync_ns[tid] / {{
  @syscall_fsync_us = hist((nsecs - @fsync_ns[tid]) / 1000);
  delete(@fsync_ns[tid]);
}}
"""


def build_program(pid: int, devices: list[TraceDevice], *, syscalls: bool = True) -> str:
    """The bpftrace source tracing ``devices`` (block layer) and ``pid`` (syscalls).

    The program exits on its own when ``pid`` exits, so a benchmark killed
    without cleanup never leaves a tracer behind.
    """
    parts = [f'BEGIN {{ @depth_resyncs = sum(0); printf("{READY_MARKER}\\n"); }}']
    if devices:
        parts.append(_block_probes(devices))
    if syscalls:
        parts.append(_syscall_probes(pid))
    parts.append(f"tracepoint:sched:sched_process_exit / pid == {pid} && tid == {pid} / {{ exit(); }}")
    # Working maps are cleared so that only results are printed at exit.
    scratch = ("insert_ns", "issue_ns", "issue_op", "inflight", "read_ns", "write_ns", "last_write_ns", "fsync_ns",
               "last_fadvise_ns")
    parts.append("END {\n" + f'  printf("{TRACED_MARKER} %d\\n", elapsed / 1000000);\n'
                 + "\n".join(f"  clear(@{name});" for name in scratch) + "\n}")
    return "\n".join(parts) + "\n"
