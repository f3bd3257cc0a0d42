"""The tier's data path on the stand-in kvikio and torch's CPU device: conformance, GPU-origin
writes, GPU-tensor demotion and an honest declaration.  Proves the tier's logic, not cuFile."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from gds_fakes import HAS_TORCH
from kvbench_gds import probe

from kvbench_core.contracts.backend import BackendContext, StorageBackend
from kvbench_core.contracts.conformance import BackendConformance, remaining_files
from kvbench_core.contracts.payload import NoisePool, VerifySink
from kvbench_core.engine.run.factory import create_backend

pytestmark = [pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed"),
              pytest.mark.usefixtures("fake_kvikio")]

OPTIONS: dict[str, Any] = {"path": "{tmp_path}/gds", "device": "cpu", "transfer_size": "64KiB",
                           "task_size": "16KiB"}


class TestGDSTierHostOrigin(BackendConformance):
    backend_name = "gds"
    backend_options: ClassVar = OPTIONS

    def remaining_entries(self, backend: StorageBackend) -> Iterable[str]:
        return remaining_files(backend.directory.path)

    def make_dead_backend(self, context: BackendContext, tmp_path: Path) -> StorageBackend | None:
        if probe.driver_problem() is None:
            return None  # a real driver here: device cuda would not be dead
        return create_backend({"name": "gds", "backend": "gds", "options": {"path": str(tmp_path / "dead")}},
                              context)


class TestGDSTierGPUOrigin(TestGDSTierHostOrigin):
    backend_options: ClassVar = {**OPTIONS, "payload_origin": "gpu"}


@pytest.fixture
def opened(tmp_path: Path) -> Any:
    backends: list[StorageBackend] = []

    def make(**options: Any) -> Any:
        tier = {"name": "gds", "backend": "gds",
                "options": {"path": str(tmp_path / "gds"), "device": "cpu", "transfer_size": "64KiB", **options}}
        backend = create_backend(tier, BackendContext(tier_name="gds", run_id="r1"))
        backend.open()
        backends.append(backend)
        return backend

    yield make
    for backend in backends:
        backend.close()


def verify(backend: Any, pool: NoisePool, key: str, size: int) -> None:
    sink = VerifySink(pool, key, np.empty(backend.transfer_size, dtype=np.uint8))
    backend.read(key, size, sink)
    assert sink.mismatches == 0


def test_gpu_origin_writes_render_on_the_device_and_are_counted(opened: Any) -> None:
    backend = opened(payload_origin="gpu")
    pool = NoisePool(seed=3, pool_bytes=256 << 10, max_piece=64 << 10)
    timing = backend.write("e1", pool.payload("e1", 200_000))
    verify(backend, pool, "e1", 200_000)
    assert timing.commands == 4  # four 64 KiB pieces, one 4 MiB-task each
    assert backend.describe()["writes"] == {"gpu_rendered": 1}


def test_a_gpu_tier_entry_is_demoted_straight_from_its_tensor(opened: Any) -> None:
    from kvbench_core.builtins.memory import GPUMemoryBackend

    pool = NoisePool(seed=5, pool_bytes=256 << 10, max_piece=16 << 20)
    hbm = GPUMemoryBackend({"device": "cpu"}, BackendContext(tier_name="hbm", run_id="r1"))
    hbm.open()
    hbm.write("e2", pool.payload("e2", 100_003))
    backend = opened(task_size="32KiB", bypass_page_cache=False)  # no page-cache drop: host time is 0
    timing = backend.write_tensor("e2", hbm.tensor("e2"))
    hbm.close()
    assert (timing.nbytes, timing.host, timing.commands) == (100_003, 0.0, 4)
    verify(backend, pool, "e2", 100_003)
    assert backend.describe()["writes"] == {"from_gpu_tensor": 1}


def test_the_declaration_says_what_really_happened(opened: Any) -> None:
    info = opened(bypass_page_cache=True).describe()
    assert info["gds"] is False
    assert info["access_mechanism"] == "kvikio POSIX I/O from host memory (test device, not GDS)"
    assert info["page_cache"].startswith("dropped")
    assert info["kvikio_version"] == "0.0.0+fake"
    assert (info["num_threads"], info["task_size"], info["gds_threshold"]) == (8, 4 << 20, 0)
    assert info["filesystem"] is None or "type" in info["filesystem"]


def test_a_failed_write_leaves_no_file(opened: Any, tmp_path: Path) -> None:
    backend = opened()

    class Failing:
        size = 100_000

        def fill(self, offset: int, out: memoryview) -> None:
            if offset:
                raise OSError("source broke")
            out[:] = bytes(len(out))

    with pytest.raises(OSError, match="source broke"):
        backend.write("broken", Failing())
    assert [name for name in remaining_files(tmp_path / "gds") if "broken" in name] == []


@pytest.mark.parametrize("offset", [0, 1, 7, 15, 16, 511, 512, 4096 + 3, 65_536 - 5])
def test_the_device_render_is_the_host_render_byte_for_byte(offset: int) -> None:
    """The torch splitmix64 stamp equals numpy's at any piece offset, including one inside a stamp."""
    torch = pytest.importorskip("torch")
    from kvbench_gds.gpu_payload import DeviceNoise

    pool = NoisePool(seed=11, pool_bytes=256 << 10, max_piece=64 << 10)
    device = DeviceNoise(pool, torch.device("cpu"), 64 << 10)
    entry_id, size = 987_654_321_012, 50_001
    host = np.empty(size, dtype=np.uint8)
    pool.render(entry_id, offset, host)
    on_device = torch.empty(size, dtype=torch.uint8)
    device.render(entry_id, offset, on_device)
    assert np.array_equal(on_device.numpy(), host)
