"""The declared access mechanism is the one really taken: a fallback is never reported as GDS."""

from __future__ import annotations

import pytest
from gds_fakes import make_fake_kvikio
from kvbench_gds.probe import GDS_FILESYSTEMS, KvikioStatus, configure_kvikio, decide_access


def status(*, compat: bool = False, gds_available: bool | None = True, requested: str = "auto") -> KvikioStatus:
    return KvikioStatus(version="25.10.0", compat_mode_requested=requested, compat_mode_effective=compat,
                        gds_available=gds_available, libcufile_version="1.15", num_threads=8,
                        task_size=4 << 20, gds_threshold=0)


def test_cufile_dma_on_a_gds_filesystem_is_gds() -> None:
    access = decide_access(device_is_cuda=True, status=status(), filesystem="xfs")
    assert access.gds
    assert access.reason == ""


@pytest.mark.parametrize(("kwargs", "filesystem", "mechanism", "reason"), [
    ({"compat": True, "requested": "on"}, "ext4", "kvikio compatibility mode", "compat_mode: on"),
    ({"compat": True, "gds_available": None}, "ext4", "kvikio compatibility mode", "libcufile not found"),
    ({"gds_available": False}, "ext4", "cuFile compatibility mode", "nvidia-fs"),
    ({}, "tmpfs", "filesystem without GDS support", "filesystem tmpfs"),
    ({}, "overlay", "filesystem without GDS support", "filesystem overlay"),
    ({}, "nfs4", "filesystem without GDS support", "filesystem nfs4"),
    ({}, None, "filesystem without GDS support", "filesystem unknown"),
])
def test_every_fallback_is_reported_as_not_gds(kwargs: dict, filesystem: str | None, mechanism: str,
                                               reason: str) -> None:
    access = decide_access(device_is_cuda=True, status=status(**kwargs), filesystem=filesystem)
    assert not access.gds
    assert mechanism in access.mechanism
    assert "not GDS" in access.mechanism
    assert reason in access.reason


def test_the_cpu_test_device_is_never_gds() -> None:
    for filesystem in GDS_FILESYSTEMS:
        assert not decide_access(device_is_cuda=False, status=status(), filesystem=filesystem).gds


@pytest.mark.parametrize(("requested", "compat", "gds_available"), [
    ("on", True, None), ("auto", False, True), ("off", False, False)])
def test_configure_applies_the_options_and_reads_back_kvikios_decision(
        requested: str, compat: bool, gds_available: bool | None) -> None:
    kvikio = make_fake_kvikio(compat=False, gds_available=bool(gds_available))
    result = configure_kvikio(kvikio, compat_mode=requested, num_threads=16, task_size=1 << 20)
    assert (result.compat_mode_requested, result.compat_mode_effective) == (requested, compat)
    assert result.gds_available is gds_available  # not asked of cuFile when kvikio bypasses it
    assert (result.num_threads, result.task_size) == (16, 1 << 20)
    assert result.gds_threshold == 0  # small transfers would otherwise silently take POSIX
    assert result.as_dict()["kvikio_version"] == "0.0.0+fake"
