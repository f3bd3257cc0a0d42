"""PieceBackend derives the entry calls, the piece loop and the L4 split from two piece commands."""

from __future__ import annotations

import time
from typing import Any, ClassVar

import numpy as np
import pytest
from testkit import CommandLog

from kvbench_core.contracts.backend import BackendContext
from kvbench_core.contracts.errors import Cancelled
from kvbench_core.contracts.pieces import TRANSFER_SIZE_OPTION, PieceBackend


class SlowDevice(PieceBackend):
    """Every piece command 'waits on the device' 2 ms; the source costs host time of its own."""

    name = "slow-device"
    transfer_size = 4096

    def __init__(self, options: dict[str, Any], context: BackendContext) -> None:
        super().__init__(options, context)
        self.data: dict[str, bytearray] = {}
        self.calls: list[tuple[str, int, int]] = []

    def begin_write(self, key: str, size: int) -> str:
        self.data[key] = bytearray(size)
        return key

    def store_piece(self, handle: str, offset: int, data: memoryview) -> None:
        time.sleep(0.002)
        self.calls.append(("store", offset, len(data)))
        self.data[handle][offset:offset + len(data)] = data

    def abort_write(self, handle: str) -> None:
        self.calls.append(("abort", 0, 0))
        self.data.pop(handle, None)

    def load_piece(self, key: str, offset: int, out: memoryview) -> None:
        time.sleep(0.002)
        self.calls.append(("load", offset, len(out)))
        out[:] = memoryview(self.data[key])[offset:offset + len(out)]

    def delete(self, key: str) -> None:
        self.data.pop(key, None)


class CountingSource:
    def __init__(self, size: int) -> None:
        self.size = size
        self.bytes = np.random.default_rng(1).integers(0, 256, size, dtype=np.uint8)

    def fill(self, offset: int, out: memoryview) -> None:
        time.sleep(0.001)  # host work: building the payload
        out[:] = self.bytes[offset:offset + len(out)].tobytes()


class Collect:
    def __init__(self, size: int) -> None:
        self.got = bytearray(size)

    def consume(self, offset: int, data: memoryview) -> None:
        self.got[offset:offset + len(data)] = data


def test_pieces_respect_the_transfer_size_and_the_split_is_honest() -> None:
    backend = SlowDevice({}, BackendContext(tier_name="t", run_id="r"))
    source = CountingSource(10_000)  # 4096 + 4096 + 1808
    wrote = backend.write("k", source)
    assert backend.calls == [("store", 0, 4096), ("store", 4096, 4096), ("store", 8192, 1808)]
    assert wrote.commands == 3 and wrote.nbytes == 10_000
    assert wrote.device >= 3 * 0.002 and wrote.host >= 3 * 0.001
    assert wrote.host + wrote.device <= wrote.total + 1e-12
    sink = Collect(10_000)
    read = backend.read("k", 10_000, sink)
    assert bytes(sink.got) == source.bytes.tobytes()
    assert read.commands == 3 and read.device >= 3 * 0.002
    assert read.host + read.device <= read.total + 1e-12


def test_read_range_reads_the_pieces_it_touches_cut_at_their_boundaries() -> None:
    backend = SlowDevice({}, BackendContext(tier_name="t", run_id="r"))
    source = CountingSource(10_000)
    backend.write("k", source)
    backend.calls.clear()
    out = bytearray(6000)
    backend.read_range("k", 3000, memoryview(out))
    assert bytes(out) == source.bytes[3000:9000].tobytes()
    assert backend.calls == [("load", 3000, 1096), ("load", 4096, 4096), ("load", 8192, 808)]


def test_each_thread_reuses_one_piece_buffer() -> None:
    backend = SlowDevice({}, BackendContext(tier_name="t", run_id="r"))
    first = backend.piece_buffer()
    backend.write("k", CountingSource(9000))
    assert backend.piece_buffer().obj is first.obj


class FailingSource(CountingSource):
    """The source of a write that is cancelled (or fails) at its third piece."""

    def fill(self, offset: int, out: memoryview) -> None:
        if offset >= 8192:
            raise Cancelled("drain limit")
        super().fill(offset, out)


def test_a_write_that_does_not_end_is_aborted_and_leaves_nothing() -> None:
    backend = SlowDevice({}, BackendContext(tier_name="t", run_id="r"))
    with pytest.raises(Cancelled):
        backend.write("k", FailingSource(10_000))
    assert backend.calls[-1] == ("abort", 0, 0) and "k" not in backend.data
    backend.write("k", CountingSource(10_000))
    assert ("abort", 0, 0) not in backend.calls[-3:]  # a write that ends is not aborted


def test_every_piece_command_is_logged_once_with_its_offset() -> None:
    """The per-command record is the run's per-command latency and cancellation point (docs/backend-contract.md)."""
    log = CommandLog()
    backend = SlowDevice({}, BackendContext(tier_name="t", run_id="r", io_log=log))
    backend.write("k", CountingSource(10_000))
    backend.read("k", 10_000, Collect(10_000))
    backend.read_range("k", 3000, memoryview(bytearray(6000)))
    assert log.seen == [("k", "write", 0, 4096), ("k", "write", 4096, 4096), ("k", "write", 8192, 1808),
                        ("k", "read", 0, 4096), ("k", "read", 4096, 4096), ("k", "read", 8192, 1808),
                        ("k", "read", 3000, 1096), ("k", "read", 4096, 4096), ("k", "read", 8192, 808)]


class SizedDevice(SlowDevice):
    options_schema: ClassVar[dict[str, Any]] = {"type": "object", "additionalProperties": False,
                                                "properties": {"transfer_size": TRANSFER_SIZE_OPTION}}


def test_the_transfer_size_comes_from_the_option() -> None:
    assert SizedDevice({"transfer_size": "8KiB"}, BackendContext(tier_name="t", run_id="r")).transfer_size == 8192
    assert SizedDevice({}, BackendContext(tier_name="t", run_id="r")).transfer_size == 1 << 20  # its default


class Pipelined(PieceBackend):
    """A device with a queue: commands are issued, then finished oldest first (as on one connection).

    Pieces are 10 KiB, filled by the source at most 4 KiB at a time; packing a command is host work it names;
    every load hands out its own buffer; ``end_write`` also unlinks a tail (one more data command)."""

    name = "pipelined"
    transfer_size = 4096
    piece_size = 10_240
    writes_in_flight = 2
    reads_in_flight = 3

    def __init__(self, options: dict[str, Any], context: BackendContext) -> None:
        super().__init__(options, context)
        self.data: dict[str, bytearray] = {}
        self.events: list[tuple[Any, ...]] = []
        self.queue: list[tuple[int, bytes | None]] = []  # (offset, bytes stored or None for a load) in flight

    def begin_write(self, key: str, size: int) -> tuple[str, bytearray]:
        return key, bytearray(size)

    def store_piece(self, handle: tuple[str, bytearray], offset: int, data: memoryview) -> float:
        self.events.append(("issue", offset, len(self.queue)))
        self.queue.append((offset, bytes(data)))
        time.sleep(0.002)
        return 0.001  # of the 2 ms, 1 was packing the command

    def finish_piece(self, handle: Any, offset: int, size: int) -> memoryview | None:
        time.sleep(0.002)  # the reply
        at, data = self.queue.pop(0)
        assert at == offset
        self.events.append(("finish", offset, size))
        if isinstance(handle, tuple):
            handle[1][offset:offset + size] = data or b""
            return None
        return memoryview(self.data[handle])[offset:offset + size]

    def end_write(self, handle: tuple[str, bytearray]) -> int:
        self.data[handle[0]] = handle[1]
        return 1

    def abort_write(self, handle: tuple[str, bytearray]) -> None:
        self.events.append(("abort_write",))
        self.queue.clear()

    def request_piece(self, handle: str, offset: int, size: int) -> None:
        if handle not in self.data:
            raise KeyError(handle)
        self.events.append(("request", offset, len(self.queue)))
        self.queue.append((offset, None))

    def abort_read(self, handle: str) -> None:
        self.events.append(("abort_read",))
        self.queue.clear()

    def load_piece(self, handle: str, offset: int, out: memoryview) -> memoryview:
        return memoryview(self.data[handle])[offset:offset + len(out)]

    def delete(self, key: str) -> None:
        self.data.pop(key, None)


class Pieces:
    """A source that remembers how much each fill asked for."""

    def __init__(self, size: int) -> None:
        self.inner = CountingSource(size)
        self.size = size
        self.fills: list[int] = []

    def fill(self, offset: int, out: memoryview) -> None:
        self.fills.append(len(out))
        self.inner.fill(offset, out)


def test_commands_in_flight_are_finished_in_order_logged_once_and_their_host_work_is_not_device_time() -> None:
    log = CommandLog()
    backend = Pipelined({}, BackendContext(tier_name="t", run_id="r", io_log=log))
    source = Pieces(25_000)  # pieces of 10240, 10240, 4520
    wrote = backend.write("k", source)
    assert source.fills == [4096, 4096, 2048, 4096, 4096, 2048, 4096, 424]  # a piece in transfer_size fills
    # Never more than two in flight: the third is issued once the first finished.
    assert backend.events == [("issue", 0, 0), ("issue", 10_240, 1), ("finish", 0, 10_240), ("issue", 20_480, 1),
                              ("finish", 10_240, 10_240), ("finish", 20_480, 4520)]
    assert log.seen == [("k", "write", 0, 10_240), ("k", "write", 10_240, 10_240), ("k", "write", 20_480, 4520)]
    assert wrote.commands == 4  # three pieces and the tail end_write unlinked
    assert wrote.device >= 3 * 0.001 + 3 * 0.002  # the waits, less the named packing
    assert wrote.device < wrote.total - 3 * 0.001 + 1e-9  # the packing is host time
    backend.events.clear()
    sink = Collect(25_000)
    read = backend.read("k", 25_000, sink)
    assert bytes(sink.got) == source.inner.bytes.tobytes() and read.commands == 3
    assert backend.events == [("request", 0, 0), ("request", 10_240, 1), ("request", 20_480, 2),
                              ("finish", 0, 10_240), ("finish", 10_240, 10_240), ("finish", 20_480, 4520)]
    assert log.seen[3:] == [("k", "read", 0, 10_240), ("k", "read", 10_240, 10_240), ("k", "read", 20_480, 4520)]


def test_a_load_that_hands_out_its_own_buffer_is_consumed_from_there_and_copied_into_a_range() -> None:
    backend = Pipelined({}, BackendContext(tier_name="t", run_id="r"))
    source = CountingSource(25_000)
    backend.write("k", source)
    out = memoryview(bytearray(12_000))
    backend.read_range("k", 9000, out)  # pieces 0 (1240 B), 1 (10240 B), 2 (520 B)
    assert bytes(out) == source.bytes[9000:21_000].tobytes()


def test_a_failed_write_or_read_with_commands_in_flight_is_aborted() -> None:
    backend = Pipelined({}, BackendContext(tier_name="t", run_id="r"))
    with pytest.raises(Cancelled):
        backend.write("k", FailingSource(25_000))
    assert backend.events[-1] == ("abort_write",) and "k" not in backend.data
    with pytest.raises(KeyError):
        backend.read("never", 25_000, Collect(25_000))
    assert backend.events[-1] == ("abort_read",)


def test_an_empty_entry_is_one_empty_command() -> None:
    log = CommandLog()
    backend = SlowDevice({}, BackendContext(tier_name="t", run_id="r", io_log=log))
    wrote = backend.write("e", CountingSource(0))
    backend.read("e", 0, Collect(0))
    assert wrote.commands == 1 and backend.calls == [("store", 0, 0), ("load", 0, 0)]
    assert log.seen == [("e", "write", 0, 0), ("e", "read", 0, 0)]
    with pytest.raises(KeyError):
        backend.read("absent", 0, Collect(0))  # the command finds it absent
