"""The gds tier installs, registers and validates its options on any host, without kvikio or a GPU."""

from __future__ import annotations

import subprocess
import sys

import pytest
from kvbench_gds.backend import GDSBackend

from kvbench_core.contracts.backend import BackendContext
from kvbench_core.contracts.errors import SpecError
from kvbench_core.contracts.plugins import registry
from kvbench_core.contracts.validation import validate_or_raise


def test_the_entry_point_registers_the_gds_backend() -> None:
    assert registry("backend")["gds"] is GDSBackend


def test_listing_plugins_imports_neither_kvikio_nor_torch() -> None:
    code = ("import sys; from kvbench_core.contracts.plugins import registry; registry('backend')['gds']; "
            "print(sorted({'kvikio', 'torch', 'cupy'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_defaults_fill_every_option_but_the_path() -> None:
    backend = GDSBackend({"path": "/tmp/x"}, BackendContext(tier_name="gds", run_id="r1"))
    assert (backend.device_name, backend.compat_mode, backend.payload_origin) == ("cuda", "auto", "host")
    assert (backend.num_threads, backend.task_size, backend.transfer_size) == (8, 4 << 20, 16 << 20)
    assert backend.bypass_page_cache and backend.fsync and not backend.require_gds


@pytest.mark.parametrize(("options", "message"), [
    ({}, "tier.options.path: required field is missing"),
    ({"path": "/x", "compat_mode": "maybe"}, 'tier.options.compat_mode: expected one of "on", "off", "auto"'),
    ({"path": "/x", "payload_origin": "disk"}, "tier.options.payload_origin: expected one of"),
    ({"path": "/x", "num_threads": 0}, "tier.options.num_threads: expected a value >= 1"),
    ({"path": "/x", "device": "tpu"}, "tier.options.device: expected torch device"),
    ({"path": "/x", "threads": 4}, "tier.options.threads: unknown field"),
])
def test_bad_options_are_named_by_path(options: dict, message: str) -> None:
    with pytest.raises(SpecError, match=None) as caught:
        validate_or_raise(options, GDSBackend.options_schema, root="tier.options")
    assert message in str(caught.value)


@pytest.mark.parametrize("option", ["transfer_size", "task_size"])
def test_sizes_must_be_whole_4k_pages(option: str) -> None:
    with pytest.raises(SpecError, match=f"tier 'gds' options.{option}: expected a multiple of 4 KiB"):
        GDSBackend({"path": "/x", option: "6000"}, BackendContext(tier_name="gds", run_id="r1"))
    assert getattr(GDSBackend({"path": "/x", option: "8KiB"}, BackendContext(tier_name="gds", run_id="r1")),
                   option) == 8192


def test_an_unopened_tier_claims_no_access_path() -> None:
    info = GDSBackend({"path": "/x"}, BackendContext(tier_name="gds", run_id="r1")).describe()
    assert info["backend"] == "gds"
    assert info["gds"] is False
    assert info["access_mechanism"] == "not opened"
