"""A tier of known service time, for the tests of answers that depend on it (``kvbench capacity``, the
forecast): DRAM that sleeps a known time per byte moved, all of it booked as device time."""

from __future__ import annotations

import time
from typing import Any, ClassVar

from kvbench_core.builtins.memory import CPUMemoryBackend
from kvbench_core.contracts.backend import ByteSink, ByteSource, IOTiming
from kvbench_core.contracts.plugins import hookimpl


class PerByteTier(CPUMemoryBackend):
    """DRAM that takes ``s_per_byte`` seconds per byte moved, all of it device time (a known service time)."""

    name = "perbyte"
    options_schema: ClassVar[dict[str, Any]] = {"type": "object", "additionalProperties": False,
                                                "properties": {"s_per_byte": {"type": "number"}}}

    def _wait(self, nbytes: int, timing: IOTiming) -> IOTiming:
        seconds = float(self.options.get("s_per_byte", 0.0)) * nbytes
        time.sleep(seconds)
        return IOTiming(timing.total + seconds, timing.host, timing.device + seconds, timing.nbytes, timing.commands)

    def write(self, key: str, source: ByteSource) -> IOTiming:
        return self._wait(source.size, super().write(key, source))

    def read(self, key: str, size: int, sink: ByteSink) -> IOTiming:
        return self._wait(size, super().read(key, size, sink))


class PerBytePlugin:
    @hookimpl
    def kvbench_storage_backends(self) -> dict[str, type]:
        return {"perbyte": PerByteTier}
