"""Two plugins providing one backend name: neither is picked silently; the spec naming it is refused."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from testkit import registered

from kvbench_core.builtins.memory import CPUMemoryBackend
from kvbench_core.contracts.errors import SpecError
from kvbench_core.contracts.plugins import clashes, hookimpl, lookup, registry


class SecondCPUProvider:
    """A vendor plugin that also calls its tier ``cpu``."""

    @hookimpl
    def kvbench_storage_backends(self) -> dict[str, type]:
        return {"cpu": CPUMemoryBackend}


@pytest.fixture
def clashing_plugin() -> Iterator[None]:
    with registered(SecondCPUProvider(), "test-second-cpu"):
        yield


def test_a_name_two_plugins_provide_is_refused_naming_both(clashing_plugin: None) -> None:
    assert "cpu" not in registry("backend")
    assert clashes("backend")["cpu"] == sorted(["kvbench-core", "test-second-cpu"])
    with pytest.raises(SpecError, match=r"cache.tiers\[0\].backend: backend 'cpu' is provided by more than one "
                                        r"plugin \(kvbench-core and test-second-cpu\)"):
        lookup("backend", "cpu", path="cache.tiers[0].backend")


def test_without_a_clash_every_name_resolves() -> None:
    assert clashes("backend") == {}
    assert lookup("backend", "cpu", path="x") is CPUMemoryBackend
