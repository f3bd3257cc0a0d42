"""The L4 split of an entry's parallel I/O is taken on the wall clock (kvbench_core.filetiers.accounting)."""

from __future__ import annotations

from kvbench_core.filetiers.accounting import Phase, covered


def test_covered_is_the_length_of_the_union() -> None:
    assert covered([]) == 0.0
    assert covered([(0.0, 1.0), (2.0, 3.0)]) == 2.0
    assert covered([(0.0, 2.0), (1.0, 3.0), (1.5, 1.7)]) == 3.0
    assert covered([(5.0, 6.0), (0.0, 1.0), (1.0, 2.0)]) == 3.0


def test_parallel_device_time_is_wall_time_and_hidden_host_work_is_not_charged() -> None:
    phase = Phase()
    phase.io += [(0.0, 4.0), (1.0, 5.0)]  # two commands in flight together: 5 s of waiting, not 8
    phase.host += [(2.0, 3.0), (5.0, 6.0)]  # the first overlaps I/O, only the second delays the entry
    timing = phase.timing(start=0.0, end=7.0, nbytes=10)
    assert (timing.device, timing.host, timing.commands) == (5.0, 1.0, 2)
