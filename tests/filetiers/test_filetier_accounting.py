"""The L4 split of an entry's parallel I/O is taken on the wall clock (kvbench_core.filetiers.accounting)."""

from __future__ import annotations

from kvbench_core.filetiers.accounting import Phase, covered


def test_covered_is_the_length_of_the_union() -> None:
    assert covered([]) == 0.0
    assert covered([(0.0, 1.0), (2.0, 3.0)]) == 2.0
    assert covered([(0.0, 2.0), (1.0, 3.0), (1.5, 1.7)]) == 3.0
    assert covered([(5.0, 6.0), (0.0, 1.0), (1.0, 2.0)]) == 3.0


def test_parallel_device_time_is_wall_time_and_host_is_the_rest() -> None:
    # Deliberately changed with the L4 definition (docs/metrics.md): host is total - device, no longer the
    # sum of the named host intervals, so the split adds up to the entry's wall time.
    phase = Phase()
    phase.io += [(0.0, 4.0), (1.0, 5.0)]  # two commands in flight together: 5 s of waiting, not 8
    phase.syscall += [(5.5, 6.0)]  # an fsync
    timing = phase.timing(start=0.0, end=7.0, nbytes=10)
    assert (timing.device, timing.host, timing.commands) == (5.5, 1.5, 2)
    assert timing.host + timing.device == timing.total
