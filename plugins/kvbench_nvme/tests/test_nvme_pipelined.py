"""Pipelined writes (issue 32 §1): a stream's next entry is in flight while the previous one's fsync runs,
and no entry is reported durable, or read, before its fsync has returned.

The fsync is held by a gate (``os.fsync`` replaced for the test) so the order of events is fixed by the test,
not by timing: the gate opens only after the next entry's commands are done.
"""

from __future__ import annotations

import errno
import os
import threading
import time
from typing import Any

import pytest
from kvbench_nvme.backend import NVMeBackend
from kvbench_nvme.uring import unavailable_reason

from kvbench_core.contracts.backend import DISCARD, BackendContext
from kvbench_core.contracts.errors import Cancelled
from kvbench_core.contracts.payload import NoisePool

TS = 64 << 10
SIZE = 4 * TS + 4096  # several commands, an aligned tail
ENGINES = ["psync", pytest.param("io_uring", marks=pytest.mark.skipif(
    unavailable_reason() is not None, reason=f"io_uring unavailable here: {unavailable_reason()}"))]


class FsyncGate:
    """Replaces ``os.fsync``: the fsync of the file at ``hold`` waits until ``release`` (with ``fail`` it then
    raises EIO instead of syncing); every call's start and end are kept by the path of its file."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, hold: str | None, fail: bool = False) -> None:
        self.real = os.fsync
        self.hold, self.fail = hold, fail
        self.held = threading.Event()  # the held fsync has begun and waits
        self.opened = threading.Event()
        self.calls: dict[str, tuple[float, float]] = {}
        monkeypatch.setattr(os, "fsync", self)

    def __call__(self, fd: int) -> None:
        start = time.perf_counter()
        path = os.readlink(f"/proc/self/fd/{fd}")
        try:
            if path == self.hold:
                self.held.set()
                assert self.opened.wait(10), "the test never released the held fsync"
                if self.fail:
                    raise OSError(errno.EIO, "injected fsync failure")
            self.real(fd)
        finally:
            self.calls[path] = (start, time.perf_counter())

    def release(self) -> None:
        self.opened.set()



def commands_of(log: Any, key: str, op: str = "write") -> list[tuple[float, float]]:
    return [(start, end) for k, o, _, _, start, end in log.calls if (k, o) == (key, op)]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("direct", [False, True])
def test_next_entry_is_in_flight_while_the_previous_fsync_runs(make_backend: Any, pool: NoisePool,
                                                               recording_log: Any,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               engine: str, direct: bool) -> None:
    backend = make_backend(engine=engine, direct=direct, queue_depth=4, io_log=recording_log)
    gate = FsyncGate(monkeypatch, hold=backend.path_of("a"))
    first = backend.write_pipelined("a", pool.payload("a", SIZE))
    second = backend.write_pipelined("b", pool.payload("b", SIZE))  # a's last commands end meanwhile
    assert gate.held.wait(10)  # a's fsync has begun, on a completion thread, and is held
    b_timing = second.result()  # b is written whole and durable while a's fsync is still held
    assert not first.done()  # a is not durable: its fsync has not returned
    gate.release()
    a_timing = first.result()
    a_fsync_start, a_fsync_end = gate.calls[backend.path_of("a")]
    assert max(end for _, end in commands_of(recording_log, "b")) < a_fsync_end  # b ran inside a's fsync
    a_commands = commands_of(recording_log, "a")
    assert max(end for _, end in a_commands) <= a_fsync_start  # the fsync came after a's last write
    # a's latency runs from its first command to its durable end, the held fsync included
    assert a_timing.total >= a_fsync_end - min(start for start, _ in a_commands)
    assert (a_timing.nbytes, a_timing.commands, b_timing.nbytes, b_timing.commands) == (SIZE, 5, SIZE, 5)
    assert a_timing.host + a_timing.device == pytest.approx(a_timing.total)
    assert len(gate.calls) == 2  # b was fsynced too


@pytest.mark.parametrize("engine", ENGINES)
def test_a_read_waits_for_the_entry_s_fsync(make_backend: Any, pool: NoisePool, recording_log: Any,
                                            monkeypatch: pytest.MonkeyPatch, engine: str) -> None:
    backend = make_backend(engine=engine, queue_depth=2, io_log=recording_log)
    gate = FsyncGate(monkeypatch, hold=backend.path_of("a"))
    pending = backend.write_pipelined("a", pool.payload("a", SIZE))
    pending.settle()  # the writing thread sees a's last commands through (io_uring: reaps its ring)
    assert gate.held.wait(10)
    reader = threading.Thread(target=backend.read, args=("a", SIZE, DISCARD))
    reader.start()
    reader.join(0.3)
    assert reader.is_alive()  # waiting for a's fsync, not reading
    assert not commands_of(recording_log, "a", "read")
    gate.release()
    reader.join(30)
    pending.result()
    assert min(start for start, _ in commands_of(recording_log, "a", "read")) >= gate.calls[backend.path_of("a")][1]


@pytest.mark.parametrize("engine", ENGINES)
def test_a_failed_fsync_is_reported_on_its_entry_alone(make_backend: Any, pool: NoisePool,
                                                       monkeypatch: pytest.MonkeyPatch, engine: str) -> None:
    backend = make_backend(engine=engine, queue_depth=4)
    gate = FsyncGate(monkeypatch, hold=backend.path_of("a"), fail=True)
    first = backend.write_pipelined("a", pool.payload("a", SIZE))
    second = backend.write_pipelined("b", pool.payload("b", SIZE))
    assert gate.held.wait(10)
    gate.release()
    with pytest.raises(OSError, match="injected fsync failure"):
        first.result()
    assert second.result().nbytes == SIZE
    assert not os.path.exists(backend.path_of("a"))  # the entry that failed leaves no file behind
    assert os.path.getsize(backend.path_of("b")) == SIZE
    backend.delete("a")  # its failed write is settled: nothing to wait for, nothing left to remove


class CancelledAfter:
    """A source whose fill is cancelled (the drain limit) after ``pieces`` pieces."""

    def __init__(self, pool: NoisePool, key: str, size: int, pieces: int) -> None:
        self.inner, self.size, self.left = pool.payload(key, size), size, pieces

    def fill(self, offset: int, out: memoryview) -> None:
        if self.left == 0:
            raise Cancelled("drain limit reached")
        self.left -= 1
        self.inner.fill(offset, out)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_cancelled_pipelined_entry_raises_on_that_entry(tmp_path: Any, pool: NoisePool, engine: str) -> None:
    context = BackendContext(tier_name="nvme0", run_id="run1", keep=True)
    backend = NVMeBackend({"path": str(tmp_path / "tier"), "engine": engine, "queue_depth": 1,
                           "transfer_size": TS}, context)
    backend.open()
    try:
        first = backend.write_pipelined("a", pool.payload("a", SIZE))
        with pytest.raises(Cancelled):  # at the call, or (a pool thread's fill) from its result
            backend.write_pipelined("b", CancelledAfter(pool, "b", SIZE, pieces=2)).result()
        assert first.result().nbytes == SIZE  # the entry before it is unaffected and durable
    finally:
        backend.close()
    # keep: true keeps the durable entry; the cancelled one's half-written file is removed at close
    assert os.path.getsize(backend.path_of("a")) == SIZE
    assert not os.path.exists(backend.path_of("b"))


def test_a_rewrite_of_a_pending_key_waits_for_it(make_backend: Any, pool: NoisePool,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    backend = make_backend()
    gate = FsyncGate(monkeypatch, hold=backend.path_of("a"))
    first = backend.write_pipelined("a", pool.payload("old", SIZE))
    first.settle()
    assert gate.held.wait(10)
    rewriter = threading.Thread(target=lambda: backend.write_pipelined("a", pool.payload("a", TS)).result())
    rewriter.start()
    rewriter.join(0.3)
    assert rewriter.is_alive() and not first.done()  # the rewrite has not touched a's file yet
    gate.release()
    rewriter.join(30)
    assert first.result().nbytes == SIZE
    assert os.path.getsize(backend.path_of("a")) == TS


def test_next_entry_starts_while_a_command_of_the_previous_entry_runs(make_backend: Any, pool: NoisePool,
                                                                        recording_log: Any,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """psync (O_DIRECT, 4 in flight: a held command leaves room for the others): ``write_pipelined`` returns
    once every piece is claimed, a pool thread's pwrite maybe still running, so the next entry's commands
    start beside it, the two entries together within the depth; the fsync comes only after that pwrite."""
    backend = make_backend(direct=True, queue_depth=4, io_log=recording_log)
    caller = threading.current_thread()
    held, opened = threading.Event(), threading.Event()
    real_pwrite = os.pwrite

    def gated_pwrite(fd: int, data: Any, offset: int) -> int:
        # the first pwrite on a pool thread is a's (a is written first); this thread writes the other pieces
        if threading.current_thread() is not caller and not held.is_set():
            held.set()
            assert opened.wait(10), "the test never released the held pwrite"
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(os, "pwrite", gated_pwrite)
    gate = FsyncGate(monkeypatch, hold=None)  # fsyncs run freely; their times are kept
    first = backend.write_pipelined("a", pool.payload("a", SIZE))
    assert held.wait(10)
    second = backend.write_pipelined("b", pool.payload("b", SIZE))  # a's last pwrite still held
    assert not first.done()
    opened.set()
    first.result(), second.result()
    a_last_end = max(end for _, end in commands_of(recording_log, "a"))
    assert min(start for start, _ in commands_of(recording_log, "b")) < a_last_end
    assert gate.calls[backend.path_of("a")][0] >= a_last_end  # a's fsync began after its last command ended
    # the stream's depth is shared across the boundary: b had at most 3 beside a's held one
    assert most_in_flight(commands_of(recording_log, "a") + commands_of(recording_log, "b")) <= 4


def most_in_flight(intervals: list[tuple[float, float]]) -> int:
    """The most intervals open at once (an end and a start at one instant: the end first)."""
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    most = level = 0
    for _, step in events:
        level += step
        most = max(most, level)
    return most


@pytest.mark.parametrize("direct", [False, True])
@pytest.mark.skipif(unavailable_reason() is not None, reason=f"io_uring unavailable here: {unavailable_reason()}")
def test_io_uring_leaves_an_entry_s_last_commands_on_the_ring_within_the_depth(make_backend: Any, pool: NoisePool,
                                                                               recording_log: Any,
                                                                               direct: bool) -> None:
    """io_uring: ``write_pipelined`` returns once the last piece is submitted; the next entry's loop reaps
    the previous entry's last commands (a command is logged when it is reaped), the two entries together
    never beyond ``queue_depth``."""
    backend = make_backend(engine="io_uring", direct=direct, queue_depth=4, io_log=recording_log)
    first = backend.write_pipelined("a", pool.payload("a", SIZE))
    assert len(commands_of(recording_log, "a")) < 5  # its last commands are still on the ring
    second = backend.write_pipelined("b", pool.payload("b", SIZE))
    assert len(commands_of(recording_log, "a")) == 5  # b's loop reaped them
    assert first.result().commands == 5
    assert second.result().commands == 5
    assert most_in_flight(commands_of(recording_log, "a") + commands_of(recording_log, "b")) <= 4
