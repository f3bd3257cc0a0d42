"""PieceBackend derives the entry calls, the piece loop and the L4 split from two piece commands."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from kvbench_core.contracts.backend import BackendContext
from kvbench_core.contracts.pieces import PieceBackend


class SlowDevice(PieceBackend):
    """Every piece command 'waits on the device' 2 ms; the source costs host time of its own."""

    name = "slow-device"
    transfer_size = 4096

    def __init__(self, options: dict[str, Any], context: BackendContext) -> None:
        super().__init__(options, context)
        self.data: dict[str, bytearray] = {}
        self.calls: list[tuple[str, int, int]] = []

    def begin_write(self, key: str, size: int) -> None:
        self.data[key] = bytearray(size)

    def store_piece(self, key: str, offset: int, data: memoryview, size: int) -> None:
        time.sleep(0.002)
        self.calls.append(("store", offset, len(data)))
        self.data[key][offset:offset + len(data)] = data

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
