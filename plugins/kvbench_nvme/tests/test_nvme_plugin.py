"""The nvme tier as the core sees it: discovered through the entry point, options checked at the spec
boundary, capacity and declaration filled in from the machine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kvbench_nvme.backend import NVMeBackend

from kvbench_core.contracts.backend import BackendContext
from kvbench_core.contracts.errors import SpecError
from kvbench_core.contracts.plugins import installed_plugins, registry
from kvbench_core.engine.run.factory import create_backend

CONTEXT = BackendContext(tier_name="nvme0", run_id="run1")


def tier(**options: Any) -> dict[str, Any]:
    return {"name": "nvme0", "backend": "nvme", "options": options}


def test_the_installed_distribution_provides_the_nvme_backend() -> None:
    assert registry("backend")["nvme"] is NVMeBackend
    info = next(info for info in installed_plugins() if info.distribution == "kvbench-nvme")
    assert info.provides == {"backend": ["nvme"]}


def test_options_accept_sizes_as_strings_or_integers(tmp_path: Path) -> None:
    backend = create_backend(tier(path=str(tmp_path), transfer_size="256KiB", queue_depth=8), CONTEXT)
    assert (backend.transfer_size, backend.queue_depth, backend.fsync, backend.drop_cache, backend.direct) == (
        256 << 10, 8, True, True, False)
    assert create_backend(tier(path=str(tmp_path), transfer_size=4096), CONTEXT).transfer_size == 4096


@pytest.mark.parametrize(("options", "message"), [
    ({}, "tier.options.path: required field is missing"),
    ({"path": "/x", "fsynk": True}, "tier.options.fsynk: unknown field"),
    ({"path": "/x", "queue_depth": 0}, "tier.options.queue_depth: expected a value >= 1"),
    ({"path": "/x", "transfer_size": "lots"}, "tier.options.transfer_size"),
    ({"path": "/x", "transfer_size": "0"}, "between 1 B and 1 GiB"),
    ({"path": "/x", "direct": True, "transfer_size": 1000}, "multiple of 4 KiB"),
])
def test_bad_options_are_spec_errors_naming_the_field(options: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        create_backend({"name": "nvme0", "backend": "nvme", "options": options}, CONTEXT)


def test_capacity_is_the_free_space_of_the_directory(make_backend: Any) -> None:
    assert make_backend().capacity_bytes() > 0


@pytest.mark.parametrize(("options", "mechanism"), [
    ({}, "POSIX page cache + fsync"),
    ({"fsync": False}, "POSIX page cache (no fsync)"),
    ({"direct": True}, "O_DIRECT + fsync"),
])
def test_describe_declares_mechanism_queue_depth_and_location(make_backend: Any, options: dict[str, Any],
                                                               mechanism: str) -> None:
    described = make_backend(queue_depth=2, **options).describe()
    assert described["access_mechanism"] == mechanism
    assert (described["backend"], described["queue_depth"], described["transfer_size"]) == ("nvme", 2, 64 << 10)
    assert described["filesystem"]["type"]  # whatever /tmp is on, mountinfo knows it
    assert "via pread/pwrite" in described["driver_layer"]
