"""The conformance suite's timing check is relative: a part counted twice fails at any operation size
(an absolute 100 us slack let double-counted host time pass at 64 KiB and fail only at 1 MiB)."""

from __future__ import annotations

import pytest

from kvbench_core.contracts.backend import IOTiming
from kvbench_core.contracts.conformance import TIMING_RELATIVE_SLACK, check_timing


def timing(total: float, host: float, device: float) -> IOTiming:
    return IOTiming(total=total, host=host, device=device, nbytes=65536, commands=1)


@pytest.mark.parametrize("total", [50e-6, 400e-6, 5e-3, 2.0])  # a 64 KiB DRAM copy .. a slow 1 GiB write
def test_host_time_counted_twice_fails_at_every_size(total: float) -> None:
    host = 0.4 * total
    with pytest.raises(AssertionError, match="counted twice"):
        check_timing(timing(total, 2 * host, total - host), 65536, "write")


@pytest.mark.parametrize("total", [50e-6, 5e-3, 2.0])
def test_separate_clock_reads_may_overshoot_by_a_hair(total: float) -> None:
    check_timing(timing(total, 0.5 * total, 0.5 * total * (1 + TIMING_RELATIVE_SLACK / 2)), 65536, "write")
    check_timing(timing(total, 0.3 * total, 0.6 * total), 65536, "write")  # the rest is unattributed time
