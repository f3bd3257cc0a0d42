"""The nvme tier's data path: byte-exact round trips in every mode, overwrite, delete, read_range,
per-command logging, and buffers that are reused rather than allocated per operation."""

from __future__ import annotations

import itertools
import os
from typing import Any

import numpy as np
import pytest
from kvbench_nvme.psync import FILL_AHEAD
from kvbench_nvme.uring import unavailable_reason

from kvbench_core.contracts.backend import DISCARD
from kvbench_core.contracts.payload import NoisePool

TS = 64 << 10
SIZES = [1, 511, 4095, 4096, 4097, TS - 1, TS, TS + 1, 3 * TS + 17, 5 * TS]
MODES = {
    "buffered": {"fsync": True, "drop_cache": True},
    "no-fsync": {"fsync": False, "drop_cache": False},
    "direct": {"direct": True},
}


@pytest.mark.parametrize("queue_depth", [1, 4])
@pytest.mark.parametrize("mode", sorted(MODES))
def test_round_trip_is_byte_exact_for_every_size(make_backend: Any, round_trip: Any, mode: str,
                                                 queue_depth: int) -> None:
    backend = make_backend(queue_depth=queue_depth, **MODES[mode])
    for size in SIZES:
        key = f"entry-{size}"
        round_trip(backend, key, size)
        assert os.path.getsize(backend.path_of(key)) == size  # O_DIRECT padding is truncated away


#: Both engines, io_uring skipped with its reason where the kernel or sandbox lacks it.
ENGINES = ["psync", pytest.param("io_uring", marks=pytest.mark.skipif(
    unavailable_reason() is not None, reason=f"io_uring unavailable here: {unavailable_reason()}"))]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("queue_depth", [1, 4])
def test_commands_count_the_pieces_and_the_split_fits_the_total(make_backend: Any, pool: NoisePool,
                                                                queue_depth: int, engine: str) -> None:
    backend = make_backend(engine=engine, queue_depth=queue_depth, direct=True)
    size = 3 * TS + 17
    written = backend.write("k", pool.payload("k", size))
    read = backend.read("k", size, DISCARD)
    for timing in (written, read):
        assert timing.commands == 4
        assert timing.host >= 0 and timing.device > 0
        assert timing.host + timing.device <= timing.total + 1e-9


def test_overwrite_replaces_content_and_size(make_backend: Any, round_trip: Any, pool: NoisePool) -> None:
    backend = make_backend()
    backend.write("k", pool.payload("other", 5 * TS))
    round_trip(backend, "k", TS + 3)
    assert os.path.getsize(backend.path_of("k")) == TS + 3


def test_zero_byte_entry(make_backend: Any, round_trip: Any) -> None:
    round_trip(make_backend(direct=True), "empty", 0)


def test_delete_removes_the_file_and_missing_keys_are_fine(make_backend: Any, pool: NoisePool) -> None:
    backend = make_backend()
    backend.write("k", pool.payload("k", 100))
    backend.delete("k")
    assert not os.path.exists(backend.path_of("k"))
    backend.delete("k")
    backend.delete("never-written")
    with pytest.raises(FileNotFoundError):
        backend.read("k", 100, DISCARD)


def test_read_of_a_short_file_fails_instead_of_returning_less(make_backend: Any, pool: NoisePool) -> None:
    backend = make_backend()
    backend.write("k", pool.payload("k", TS))
    os.truncate(backend.path_of("k"), TS // 2)
    with pytest.raises(OSError, match="ends at byte"):
        backend.read("k", TS, DISCARD)


@pytest.mark.parametrize("direct", [False, True])
def test_read_range_copies_any_slice_into_an_unaligned_buffer(make_backend: Any, pool: NoisePool,
                                                              direct: bool) -> None:
    backend = make_backend(direct=direct)
    size = 3 * TS + 17
    backend.write("k", pool.payload("k", size))
    expected = np.empty(size, dtype=np.uint8)
    pool.payload("k", size).fill(0, memoryview(expected))
    holder = bytearray(TS + 1)
    out = memoryview(holder)[1:]  # deliberately not aligned
    for offset in (0, 5, TS - 3, size - TS):
        backend.read_range("k", offset, out)
        assert bytes(out) == expected[offset:offset + TS].tobytes()


@pytest.mark.parametrize("queue_depth", [1, 4])
def test_every_pread_and_pwrite_is_logged(make_backend: Any, pool: NoisePool, queue_depth: int,
                                          recording_log: Any) -> None:
    log = recording_log
    backend = make_backend(io_log=log, queue_depth=queue_depth)
    size = 3 * TS + 17
    written = backend.write("k", pool.payload("k", size))
    read = backend.read("k", size, DISCARD)
    writes = sorted(call for call in log.calls if call[1] == "write")
    reads = sorted(call for call in log.calls if call[1] == "read")
    assert len(writes) == written.commands and len(reads) == read.commands
    for calls in (writes, reads):
        assert [(offset, nbytes) for _, _, offset, nbytes, _, _ in calls] == [
            (0, TS), (TS, TS), (2 * TS, TS), (3 * TS, 17)]
        assert all(key == "k" and start <= end for key, _, _, _, start, end in calls)


def test_direct_tail_is_logged_as_returned_with_the_aligned_length_asked(make_backend: Any, pool: NoisePool,
                                                                          recording_log: Any) -> None:
    """The log holds what each syscall returned (issue 17: it used to log a computed aligned length for a
    short tail read) and, for the padded tail, the length asked and the alignment used."""
    log = recording_log
    backend = make_backend(io_log=log, direct=True)
    backend.write("k", pool.payload("k", TS + 17))
    backend.read("k", TS + 17, DISCARD)
    returned = {op: sorted((call[2], call[3]) for call in log.calls if call[1] == op) for op in ("write", "read")}
    assert returned == {"write": [(0, TS), (TS, 4096)], "read": [(0, TS), (TS, 17)]}
    assert log.requests == {("write", TS): (4096, 4096), ("read", TS): (4096, 4096)}


def test_buffers_are_per_thread_and_reused(make_backend: Any, pool: NoisePool, count_mmaps: Any) -> None:
    backend = make_backend(queue_depth=4, direct=True)
    first = backend.engine.buffer()
    allocations = count_mmaps()
    for index in range(20):
        key = f"k{index}"
        backend.write(key, pool.payload(key, 4 * TS))
        backend.read(key, 4 * TS, DISCARD)
    assert backend.engine.buffer() is first
    assert len(allocations) <= backend.queue_depth + FILL_AHEAD - 1  # one per pool thread, whatever the ops


@pytest.mark.parametrize("op", ["write", "read"])
def test_buffered_io_keeps_one_command_in_flight_per_file(make_backend: Any, pool: NoisePool, op: str,
                                                          recording_log: Any) -> None:
    """Writeback and readahead are the device's queue for buffered I/O; queue_depth applies to O_DIRECT."""
    log = recording_log
    backend = make_backend(io_log=log, queue_depth=4, fsync=False)
    backend.write("k", pool.payload("k", 16 * TS))
    backend.read("k", 16 * TS, DISCARD)
    spans = sorted((start, end) for _, logged_op, _, _, start, end in log.calls if logged_op == op)
    assert len(spans) == 16
    assert all(later[0] >= earlier[1] for earlier, later in itertools.pairwise(spans))
    assert backend.describe()["commands_in_flight"] == 1
