"""How one tier operation's timing is booked: a timing and the commands recorded for it must agree
(``TierOperations.timed``), and host + device is the operation's total whatever a backend reports
(``OpStats.add``)."""

from __future__ import annotations

from typing import Any

import pytest

from kvbench_core.builtins.memory import CPUMemoryBackend
from kvbench_core.contracts.backend import BackendContext, IOTiming
from kvbench_core.contracts.errors import StorageError
from kvbench_core.engine.cache.cache_types import Tier
from kvbench_core.engine.cache.tier_ops import TierOperations
from kvbench_core.engine.measure.cancel import CommandRecorder
from kvbench_core.engine.measure.opstats import OpStats
from kvbench_core.engine.measure.telemetry import Telemetry


class SendsButSaysNothing(CPUMemoryBackend):
    """A buggy backend: it issues device commands, then reports a write that moved nothing."""

    def write(self, key: str, source: Any) -> IOTiming:
        super().write(key, source)
        return IOTiming(total=0.001, host=0.001, device=0.0, nbytes=0, commands=0)


def test_a_timing_that_moved_nothing_with_commands_recorded_is_refused() -> None:
    """R3 L4: ``_book_op`` booked the recorder's commands (bytes in the series) for an operation that
    reported no bytes; the disagreement is a plugin bug, refused as a StorageError naming the backend."""
    telemetry = Telemetry(["batch"])
    telemetry.start_measuring()
    recorder = CommandRecorder("dram", telemetry)
    backend = SendsButSaysNothing({}, BackendContext(tier_name="dram", run_id="t", io_log=recorder))
    tier = Tier("dram", backend, 1 << 20)

    class Source:
        size = 4096

        def fill(self, offset: int, out: memoryview) -> None:
            out[:] = bytes(len(out))

    with pytest.raises(StorageError, match=r"moved nothing .* recorded 1 device commands"):
        TierOperations(telemetry).timed(tier, "write", "k", lambda: backend.write("k", Source()))
    assert telemetry.tiers["dram"]["write"].ops == 0 and telemetry.tiers["dram"]["write"].command_bytes == 0
    assert recorder.take("k", "write") == []  # nothing left pending either


@pytest.mark.parametrize("device", [0.0, 0.002, 0.004, 0.5])
def test_host_plus_device_is_the_operations_total(device: float) -> None:
    """R3 L5: a backend reporting more device time than the operation took gave host + device > total."""
    stats = OpStats()
    stats.add(IOTiming(total=0.004, host=0.0, device=device, nbytes=10, commands=1), 0.0, 0.004)
    assert stats.device.total <= stats.total.total
    assert stats.host.total + stats.device.total == pytest.approx(stats.total.total)
