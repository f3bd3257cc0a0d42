"""PieceBackend derives the entry calls, the piece loop and the L4 split from two piece commands."""

from __future__ import annotations

import time
from typing import Any, ClassVar

import numpy as np
import pytest

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


def test_read_range_reads_in_pieces_into_the_callers_buffer() -> None:
    backend = SlowDevice({}, BackendContext(tier_name="t", run_id="r"))
    source = CountingSource(10_000)
    backend.write("k", source)
    backend.calls.clear()
    out = bytearray(6000)
    backend.read_range("k", 3000, memoryview(out))
    assert bytes(out) == source.bytes[3000:9000].tobytes()
    assert backend.calls == [("load", 3000, 4096), ("load", 7096, 1904)]


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


class Commands:
    """A context's ``io_log``: what the kit reports per device command."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, int, int]] = []

    def record(self, key: str, op: str, offset: int, nbytes: int, start_s: float, end_s: float) -> None:
        assert end_s >= start_s
        self.seen.append((key, op, offset, nbytes))


def test_a_write_that_does_not_end_is_aborted_and_leaves_nothing() -> None:
    backend = SlowDevice({}, BackendContext(tier_name="t", run_id="r"))
    with pytest.raises(Cancelled):
        backend.write("k", FailingSource(10_000))
    assert backend.calls[-1] == ("abort", 0, 0) and "k" not in backend.data
    backend.write("k", CountingSource(10_000))
    assert ("abort", 0, 0) not in backend.calls[-3:]  # a write that ends is not aborted


def test_every_piece_command_is_logged_once_with_its_offset() -> None:
    """The per-command record is the run's per-command latency and cancellation point (docs/backend-contract.md)."""
    log = Commands()
    backend = SlowDevice({}, BackendContext(tier_name="t", run_id="r", io_log=log))
    backend.write("k", CountingSource(10_000))
    backend.read("k", 10_000, Collect(10_000))
    backend.read_range("k", 3000, memoryview(bytearray(6000)))
    assert log.seen == [("k", "write", 0, 4096), ("k", "write", 4096, 4096), ("k", "write", 8192, 1808),
                        ("k", "read", 0, 4096), ("k", "read", 4096, 4096), ("k", "read", 8192, 1808),
                        ("k", "read", 3000, 4096), ("k", "read", 7096, 1904)]


class SizedDevice(SlowDevice):
    options_schema: ClassVar[dict[str, Any]] = {"type": "object", "additionalProperties": False,
                                                "properties": {"transfer_size": TRANSFER_SIZE_OPTION}}


def test_the_transfer_size_comes_from_the_option() -> None:
    assert SizedDevice({"transfer_size": "8KiB"}, BackendContext(tier_name="t", run_id="r")).transfer_size == 8192
    assert SizedDevice({}, BackendContext(tier_name="t", run_id="r")).transfer_size == 1 << 20  # its default
