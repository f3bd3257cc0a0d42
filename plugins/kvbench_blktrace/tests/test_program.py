"""The bpftrace program text: filters, the maps it prints, and the self-exit with the traced process."""

from __future__ import annotations

import re

from kvbench_blktrace.devices import TraceDevice
from kvbench_blktrace.program import (
    COUNTERS,
    FSYNC_CALLS,
    HISTOGRAMS,
    LBA_MAPS,
    READ_CALLS,
    SIZE_MAPS,
    WRITE_CALLS,
    build_program,
)

VDA = TraceDevice("vda", 254, 0)
NVME = TraceDevice("nvme0n1", 259, 1)


def printed_maps(program: str) -> set[str]:
    """Maps the program fills (assignments) minus the ones END clears."""
    filled = set(re.findall(r"@(\w+)(?:\[[^\]]*\])?\s*(?:=|\+\+)", program))
    cleared = set(re.findall(r"clear\(@(\w+)\)", program))
    return filled - cleared


def test_printed_maps_are_exactly_the_tables_the_section_reads() -> None:
    assert printed_maps(build_program(99, [VDA])) == set(HISTOGRAMS) | set(SIZE_MAPS) | set(LBA_MAPS) | set(COUNTERS)


def test_block_probes_filter_by_kernel_dev_of_every_disk() -> None:
    program = build_program(99, [VDA, NVME])
    assert VDA.kernel_dev == (254 << 20) and NVME.kernel_dev == (259 << 20) + 1
    for probe in ("block_rq_insert", "block_rq_issue", "block_rq_complete"):
        assert f"tracepoint:block:{probe} / args->dev == {VDA.kernel_dev} || args->dev == {NVME.kernel_dev} /" \
            in program


def test_syscall_probes_filter_by_pid_and_skip_stdio() -> None:
    program = build_program(4321, [VDA])
    for name in READ_CALLS + WRITE_CALLS + FSYNC_CALLS:
        assert f"tracepoint:syscalls:sys_enter_{name}" in program and f"tracepoint:syscalls:sys_exit_{name}" in program
    assert program.count("/ pid == 4321 && args->fd > 2 /") == 3


def test_without_a_disk_or_syscall_tracepoints_those_probes_are_left_out() -> None:
    assert "tracepoint:block:" not in build_program(1, [])
    assert "tracepoint:syscalls:" not in build_program(1, [VDA], syscalls=False)


def test_program_stops_itself_when_the_traced_process_exits() -> None:
    assert "tracepoint:sched:sched_process_exit / pid == 77 && tid == 77 / { exit(); }" in build_program(77, [VDA])
