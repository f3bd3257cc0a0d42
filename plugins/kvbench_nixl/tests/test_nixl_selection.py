"""Choosing the nixl tier: options checked in the composed schema and at selection, a missing wheel or GPU
named before the run, one clear line and exit 2 (selection) or the tier's BackendUnavailable (open)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest
from kvbench_nixl import library
from kvbench_nixl.backend import NixlBackend
from nixl_helpers import has_nvidia_driver, needs_nixl
from tiny_spec import history_spec, run_cli

from kvbench_core.contracts.backend import BackendContext
from kvbench_core.contracts.errors import BackendUnavailable, SpecError


def spec_with(tmp_path: Path, options: dict[str, Any]) -> dict[str, Any]:
    tier = {"name": "nx", "backend": "nixl", "capacity": "64MiB", "options": options}
    return history_spec([tier], output={"directory": str(tmp_path / "out"), "progress": "off"})


def posix(tmp_path: Path, **more: Any) -> dict[str, Any]:
    return {"nixl_backend": "POSIX", "path": str(tmp_path / "tier"), **more}


@pytest.mark.parametrize(("options", "message"), [
    ({"nixl_backend": "POSIX"}, "cache.tiers[1].options.path: required field is missing"),
    ({"nixl_backend": "OBJ"}, "cache.tiers[1].options.bucket: required field is missing"),
    ({"nixl_backend": "UCX", "path": "x"}, "cache.tiers[1].options.nixl_backend"),
    ({"nixl_backend": "POSIX", "path": "x", "params": {"secret_key": "s"}}, "never the spec"),
    ({"nixl_backend": "POSIX", "path": "x", "queue_depth": 0}, "cache.tiers[1].options.queue_depth"),
])
def test_the_composed_schema_refuses_bad_options_by_field(tmp_path: Path, options: dict[str, Any],
                                                         message: str) -> None:
    code, _, stderr = run_cli(tmp_path, spec_with(tmp_path, options))
    assert code == 2 and message in stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("options", "message"), [
    ({"nixl_backend": "POSIX", "path": "x", "bucket": "bb-x"}, "options.bucket: applies to nixl_backend OBJ"),
    ({"nixl_backend": "OBJ", "bucket": "bb-x", "fsync": True}, "options.fsync: applies to nixl_backend POSIX"),
    ({"nixl_backend": "OBJ", "bucket": "bb-x", "path": "x"}, "options.path: applies to nixl_backend POSIX"),
    ({"nixl_backend": "POSIX", "path": "x", "memory": "VRAM"}, "options.memory: VRAM needs nixl_backend GDS"),
    ({"nixl_backend": "POSIX", "path": "x", "transfer_size": "1KiB"}, "options.transfer_size: expected a size"),
    ({"nixl_backend": "OBJ", "bucket": "bb-x", "params": {"endpoint_override": "http://h"}},
     "options.params.endpoint_override: set by the tier"),
])
def test_contradicting_options_are_refused_at_selection(options: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match=message.replace(".", r"\.").replace("(", r"\(")):
        NixlBackend(options, BackendContext(tier_name="nx", run_id="r"))


@needs_nixl
def test_a_parameter_the_plugin_does_not_have_is_named(tmp_path: Path) -> None:
    backend = NixlBackend(posix(tmp_path, params={"use_urin": True}), BackendContext(tier_name="nx", run_id="r"))
    with pytest.raises(SpecError, match=r"params\.use_urin: NIXL's POSIX plugin has no such parameter .*use_uring"):
        backend.open()
    assert not (tmp_path / "tier").exists()


def test_without_the_wheel_selection_fails_naming_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name in library.MODULES else real(name, *args))
    code, _, stderr = run_cli(tmp_path, spec_with(tmp_path, posix(tmp_path)))
    assert code == 2
    assert "needs the Python package 'nixl_cu12'" in stderr and "pip install 'kvbench-nixl[nixl]'" in stderr
    assert len(stderr.strip().splitlines()) == 1
    assert not (tmp_path / "tier").exists()  # nothing of the tier was made (the run's failed result is written)


def test_a_wheel_that_does_not_import_fails_open_naming_the_extra(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    for name in library.MODULES:
        monkeypatch.setitem(sys.modules, name, None)  # import of each raises ImportError
    backend = NixlBackend(posix(tmp_path), BackendContext(tier_name="nx", run_id="r"))
    with pytest.raises(BackendUnavailable, match=r"NIXL is not installed .*pip install 'kvbench-nixl\[nixl\]'"):
        backend.open()
    assert not (tmp_path / "tier").exists()


@needs_nixl  # without the wheel, selection stops first, naming the extra (tested above)
@pytest.mark.skipif(has_nvidia_driver(), reason="this host has the NVIDIA driver")
@pytest.mark.parametrize("backend", ["GDS", "GDS_MT"])
def test_gds_without_a_gpu_fails_before_the_run(tmp_path: Path, backend: str) -> None:
    code, _, stderr = run_cli(tmp_path, spec_with(tmp_path, {"nixl_backend": backend, "path": str(tmp_path / "t")}))
    assert code != 0
    assert f"nixl_backend {backend} / memory DRAM needs an NVIDIA GPU and driver; libcuda.so.1" in stderr
    assert not (tmp_path / "t").exists()
