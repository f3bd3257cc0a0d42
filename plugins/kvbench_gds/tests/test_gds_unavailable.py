"""Without a GPU, driver or kvikio the tier fails before the run, naming the real blocker first."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from gds_fakes import HAS_TORCH, gpu_host_problem, make_fake_kvikio
from kvbench_gds import probe
from kvbench_gds.backend import GDSBackend

from kvbench_core.cli import main
from kvbench_core.contracts.backend import BackendContext
from kvbench_core.contracts.errors import BackendUnavailable, MissingDependency
from kvbench_core.engine.run.factory import create_backend

NO_DRIVER = "no NVIDIA driver: libcuda.so.1 cannot be loaded (test)"


def select(tmp_path: Path, **options: object) -> GDSBackend:
    """The tier as a run spec selects it (lookup, option schema, ``requires``)."""
    tier = {"name": "gds", "backend": "gds", "options": {"path": str(tmp_path / "gds"), **options}}
    return create_backend(tier, BackendContext(tier_name="gds", run_id="r1"), path="cache.tiers[1]")


@pytest.fixture
def no_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probe, "driver_problem", lambda: NO_DRIVER)


@pytest.fixture
def driver(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probe, "driver_problem", lambda: None)


@pytest.fixture
def no_kvikio(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "kvikio", None)  # find_spec -> None, import -> ImportError


@pytest.mark.skipif(gpu_host_problem() is None, reason="this is a GPU host with kvikio: the tier opens")
def test_on_this_host_the_tier_fails_before_the_run_with_one_clear_line(tmp_path: Path) -> None:
    """What CI exercises: a CPU-only machine."""
    with pytest.raises((MissingDependency, BackendUnavailable)) as caught:
        select(tmp_path).open()
    message = str(caught.value)
    assert "\n" not in message
    if probe.driver_problem() is not None:
        assert "libcuda.so.1" in message
    if importlib.util.find_spec("kvikio") is None:
        assert "pip install 'kvbench-gds[cu12]'" in message
    assert not (tmp_path / "gds").exists()  # nothing created on the way out


@pytest.mark.usefixtures("no_driver", "no_kvikio")
def test_selection_without_driver_and_kvikio_names_both(tmp_path: Path) -> None:
    with pytest.raises(MissingDependency) as caught:
        select(tmp_path)
    message = str(caught.value)
    assert message.startswith("cache.tiers[1] (backend 'gds') needs the Python package 'kvikio'")
    assert "pip install 'kvbench-gds[cu12]'" in message
    assert "on a GPU host; this host has no NVIDIA driver: libcuda.so.1" in message


@pytest.mark.usefixtures("driver", "no_kvikio")
def test_selection_with_a_driver_but_no_kvikio_only_says_what_to_install(tmp_path: Path) -> None:
    with pytest.raises(MissingDependency) as caught:
        select(tmp_path)
    assert str(caught.value).endswith("pip install 'kvbench-gds[cu12]'  (or [cu13] for a CUDA 13 driver)")


@pytest.mark.usefixtures("no_driver", "fake_kvikio")
def test_open_with_kvikio_but_no_driver_blames_the_driver(tmp_path: Path) -> None:
    backend = select(tmp_path)
    with pytest.raises(BackendUnavailable, match=r"^tier 'gds' \(gds\): no NVIDIA driver: libcuda.so.1"):
        backend.open()


@pytest.mark.usefixtures("driver", "no_kvikio")
def test_open_without_kvikio_gives_the_install_hint(tmp_path: Path) -> None:
    backend = GDSBackend({"path": str(tmp_path / "gds")}, BackendContext(tier_name="gds", run_id="r1"))
    with pytest.raises(BackendUnavailable, match=r"kvikio is not installed .*pip install 'kvbench-gds\[cu12\]'"):
        backend.open()


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")
@pytest.mark.usefixtures("driver", "fake_kvikio")
def test_open_without_a_cuda_device_says_so(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this host has a CUDA device")
    with pytest.raises(BackendUnavailable, match="no CUDA device visible to torch"):
        select(tmp_path).open()


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed")
def test_require_gds_refuses_a_fallback_before_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "kvikio", make_fake_kvikio(compat=True, gds_available=False))
    backend = select(tmp_path, device="cpu", require_gds=True)
    with pytest.raises(BackendUnavailable, match="require_gds is set but I/O would take kvikio POSIX I/O"):
        backend.open()
    assert not (tmp_path / "gds").exists()


@pytest.mark.skipif(gpu_host_problem() is None, reason="this is a GPU host with kvikio: the tier opens")
def test_plugins_check_reports_the_blocker_and_exits_non_zero(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["plugins", "--conformance", "gds", "--options", f'{{"path": "{tmp_path / "gds"}"}}'])
    err = capsys.readouterr().err
    assert code in (MissingDependency.exit_code, BackendUnavailable.exit_code)
    assert err.startswith("kvbench: error: ")
    assert "kvbench-gds[cu12]" in err or "libcuda.so.1" in err
