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
    """Replaces ``os.fsync``: the first call waits until ``release``; each call's start and end are kept.
    With ``fail`` the held fsync raises EIO instead of syncing."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, fail: bool = False) -> None:
        self.real = os.fsync
        self.fail = fail
        self.held = threading.Event()  # the first fsync has begun and waits
        self.opened = threading.Event()
        self.calls: list[tuple[float, float]] = []
        self.lock = threading.Lock()
        monkeypatch.setattr(os, "fsync", self)

    def __call__(self, fd: int) -> None:
        start = time.perf_counter()
        with self.lock:
            first = not self.calls and not self.held.is_set()
            if first:
                self.held.set()
        if first:
            assert self.opened.wait(10), "the test never released the held fsync"
            if self.fail:
                self.calls.append((start, time.perf_counter()))
                raise OSError(errno.EIO, "injected fsync failure")
        self.real(fd)
        self.calls.append((start, time.perf_counter()))

    def release(self) -> None:
        self.opened.set()


def eventually(condition: Any, limit_s: float = 10.0) -> bool:
    """Whether ``condition()`` becomes true within ``limit_s`` (a synchronisation, not a timing)."""
    deadline = time.monotonic() + limit_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def commands_of(log: Any, key: str, op: str = "write") -> list[tuple[float, float]]:
    return [(start, end) for k, o, _, _, start, end in log.calls if (k, o) == (key, op)]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("direct", [False, True])
def test_next_entry_is_in_flight_while_the_previous_fsync_runs(make_backend: Any, pool: NoisePool,
                                                               recording_log: Any,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               engine: str, direct: bool) -> None:
    backend = make_backend(engine=engine, direct=direct, queue_depth=4, io_log=recording_log)
    gate = FsyncGate(monkeypatch)
    first = backend.write_pipelined("a", pool.payload("a", SIZE))
    assert gate.held.wait(30)  # a's data is written and its fsync has begun, on a completion thread
    second = backend.write_pipelined("b", pool.payload("b", SIZE))  # returns while a's fsync is held
    assert not first.done()  # a is not durable: its fsync has not returned
    # b's last commands may still run on pool threads after the call: they finish while a's fsync is held
    assert eventually(lambda: len(commands_of(recording_log, "b")) == 5)
    assert not first.done()
    b_commands = commands_of(recording_log, "b")
    gate.release()
    a_timing, b_timing = first.result(), second.result()
    a_fsync_start, a_fsync_end = gate.calls[0]
    assert max(end for _, end in b_commands) < a_fsync_end  # b's commands all ran inside a's fsync
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
    gate = FsyncGate(monkeypatch)
    pending = backend.write_pipelined("a", pool.payload("a", SIZE))
    assert gate.held.wait(30)
    reader = threading.Thread(target=backend.read, args=("a", SIZE, DISCARD))
    reader.start()
    reader.join(0.3)
    assert reader.is_alive()  # waiting for a's fsync, not reading
    assert not commands_of(recording_log, "a", "read")
    gate.release()
    reader.join(30)
    pending.result()
    assert min(start for start, _ in commands_of(recording_log, "a", "read")) >= gate.calls[0][1]


@pytest.mark.parametrize("engine", ENGINES)
def test_a_failed_fsync_is_reported_on_its_entry_alone(make_backend: Any, pool: NoisePool,
                                                       monkeypatch: pytest.MonkeyPatch, engine: str) -> None:
    backend = make_backend(engine=engine, queue_depth=4)
    gate = FsyncGate(monkeypatch, fail=True)
    first = backend.write_pipelined("a", pool.payload("a", SIZE))
    assert gate.held.wait(30)
    second = backend.write_pipelined("b", pool.payload("b", SIZE))
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
    gate = FsyncGate(monkeypatch)
    first = backend.write_pipelined("a", pool.payload("old", SIZE))
    assert gate.held.wait(30)
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
    start beside it; the fsync comes only after that pwrite."""
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
    gate = FsyncGate(monkeypatch)
    gate.release()  # fsyncs run freely; their times are kept
    first = backend.write_pipelined("a", pool.payload("a", SIZE))
    assert held.wait(10)
    second = backend.write_pipelined("b", pool.payload("b", SIZE))  # a's last pwrite still held
    assert not first.done()
    opened.set()
    first.result(), second.result()
    a_last_end = max(end for _, end in commands_of(recording_log, "a"))
    assert min(start for start, _ in commands_of(recording_log, "b")) < a_last_end
    assert gate.calls[0][0] >= a_last_end  # a's fsync began after its last command had ended
