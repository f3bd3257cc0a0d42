"""The default ``write_pipelined``: a tier that does not pipeline writes the entry whole, and says so."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from kvbench_core.contracts.backend import BackendContext, ByteSink, ByteSource, DoneWrite, IOTiming, StorageBackend


class Counting(StorageBackend):
    """Stores nothing; counts its writes, and fails the ones of key ``bad``."""

    name = "counting"
    options_schema: ClassVar[dict[str, Any]] = {"type": "object"}

    def __init__(self) -> None:
        super().__init__({}, BackendContext(tier_name="t", run_id="r"))
        self.writes: list[str] = []

    def write(self, key: str, source: ByteSource) -> IOTiming:
        if key == "bad":
            raise OSError(5, "device gone")
        self.writes.append(key)
        return IOTiming(total=1.0, host=0.25, device=0.75, nbytes=source.size)

    def read(self, key: str, size: int, sink: ByteSink) -> IOTiming:
        raise NotImplementedError

    def read_range(self, key: str, offset: int, out: memoryview) -> None:
        raise NotImplementedError

    def delete(self, key: str) -> None:
        raise NotImplementedError


class Source:
    size = 10

    def fill(self, offset: int, out: memoryview) -> None:
        out[:] = bytes(len(out))


def test_the_default_writes_the_entry_before_it_returns() -> None:
    backend = Counting()
    pending = backend.write_pipelined("k", Source())
    assert backend.writes == ["k"]  # durable already: nothing is left for result() to do
    assert isinstance(pending, DoneWrite)
    assert pending.result() == IOTiming(total=1.0, host=0.25, device=0.75, nbytes=10)


def test_the_default_raises_the_write_s_error_at_the_call() -> None:
    with pytest.raises(OSError, match="device gone"):
        Counting().write_pipelined("bad", Source())
