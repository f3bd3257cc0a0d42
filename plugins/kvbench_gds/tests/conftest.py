"""Fixtures for the gds tier tests (helpers live in ``gds_fakes``)."""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator

import pytest
from gds_fakes import make_fake_kvikio


@pytest.fixture
def fake_kvikio(monkeypatch: pytest.MonkeyPatch) -> Iterator[types.ModuleType]:
    """Install the stand-in as ``kvikio`` (kvikio's compatibility mode, as on a host without GDS)."""
    module = make_fake_kvikio(compat=True, gds_available=False)
    monkeypatch.setitem(sys.modules, "kvikio", module)
    yield module
