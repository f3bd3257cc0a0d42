"""Every shipped spec as users run it (``make specs-smoke``, issue #29): its own model, contexts, users, clients
and tiers; only ``duration`` and ``warmup`` shortened, and each capacity capped at what this machine holds
(2 cores, 24 GiB of memory, a local disk), its directories under the test's own and its servers the test
servers.  Each must complete requests and store bytes on every tier it declares; GPU specs skip with the
reason.  tests/shipped/test_shipped_specs.py is the fast variant (every model replaced by tiny-1b); the outcome
table of the last full run is in docs/RELIABILITY.md.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_shipped_specs import SPECS, check_run, run_shortened, servers, skip_unless_runnable

from kvbench_core.contracts.units import parse_size

__all__ = ["servers"]  # the module-scoped fixture, shared with the fast variant

#: Opt-in (``make specs-smoke`` sets it): the full run takes ~20 min on 2 cores and today most specs fail it
#: (docs/RELIABILITY.md, "Round three"), so it is not part of ``make test`` until they pass.
pytestmark = [pytest.mark.slow, pytest.mark.skipif(os.environ.get("KVBENCH_SPECS_SMOKE") != "1",
                                                   reason="opt-in: make specs-smoke (KVBENCH_SPECS_SMOKE=1)")]

DURATION, WARMUP = "20s", "2s"
#: The most a tier of each backend gets here: memory tiers a slice of the 24 GiB, redis-server and moto keep
#: their bytes in memory too, file tiers a slice of the free disk ('auto' would take all of it).
CAPS = {"cpu": 1 << 30, "redis": 2 << 30, "s3": 4 << 30, "nixl": 4 << 30}
FILE_CAP = 16 << 30


def capped(tier: dict[str, Any]) -> int | str:
    """The tier's capacity, at most what this machine holds for its backend; a file tier's 'auto' stays
    'auto' (the free disk: what this machine holds), a memory or server tier's 'auto' is the cap."""
    declared = tier.get("capacity", "auto")
    if tier["backend"] not in CAPS and declared == "auto":
        return "auto"
    cap = CAPS.get(tier["backend"], FILE_CAP)
    return cap if declared == "auto" else min(parse_size(declared), cap)


def as_users_run_it(spec: dict[str, Any], root: Path, servers: dict[str, Any]) -> list[str]:
    overrides = [f"duration={DURATION}", f"warmup={WARMUP}", f"output.directory={root / 'out'}",
                 "output.progress=off"]
    for i, tier in enumerate(spec["cache"]["tiers"]):
        options = tier.get("options") or {}
        overrides.append(f"cache.tiers[{i}].capacity={capped(tier)}")
        if "path" in options:
            overrides.append(f"cache.tiers[{i}].options.path={root / f'tier{i}'}")
        if tier["backend"] == "redis":
            overrides.append(f"cache.tiers[{i}].options.port={servers['redis'].port}")
        if "endpoint_url" in options:
            overrides.append(f"cache.tiers[{i}].options.endpoint_url={servers['s3'].url}")
    return overrides


@pytest.mark.timeout(600)
@pytest.mark.parametrize("path", SPECS, ids=[path.stem for path in SPECS])
def test_a_shipped_spec_as_users_run_it_completes_and_every_tier_stores_bytes(
        path: Path, tmp_path: Path, servers: dict[str, Any]) -> None:
    spec = yaml.safe_load(path.read_text())
    skip_unless_runnable(spec, servers)
    result = check_run(path, spec, run_shortened(path, as_users_run_it(spec, tmp_path, servers), tmp_path, 540))
    assert result["metrics"]["headline"]["requests_completed"] > 0
