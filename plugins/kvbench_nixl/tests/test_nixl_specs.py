"""The shipped NIXL specs validate everywhere; the POSIX and OBJ ones run (shortened), the GDS one stops
before the run, clearly, on a host without a GPU."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from nixl_helpers import has_nvidia_driver, needs_nixl
from s3_servers import MotoServer
from tiny_spec import run_cli

from kvbench_core.runspec.loader import load_spec

SPECS = Path(__file__).resolve().parents[3] / "specs"
NAMES = ["nixl-posix", "nixl-obj", "nixl-gds"]


@pytest.mark.parametrize("name", NAMES)
def test_spec_validates(name: str, tmp_path: Path) -> None:
    """Its directory, where it has one, moved under ``tmp_path``: a path whose parent does not exist
    (``/mnt/nvme`` here) is refused at load time unless the tier says ``create: true``."""
    tiers = yaml.safe_load((SPECS / f"{name}.yaml").read_text())["cache"]["tiers"]
    moved = [f"cache.tiers.{i}.options.path={tmp_path / 'kv'}" for i, tier in enumerate(tiers)
             if "path" in (tier.get("options") or {})]
    _, resolved = load_spec(SPECS / f"{name}.yaml", moved)
    assert resolved["cache"]["tiers"][-1]["backend"] == "nixl"


def shortened(tmp_path: Path, name: str, **options: Any) -> dict[str, Any]:
    """The spec as shipped, 2 s long, its tier options updated, results under ``tmp_path``."""
    spec = yaml.safe_load((SPECS / f"{name}.yaml").read_text())
    spec.update(duration="2s", warmup="0s", output={"directory": str(tmp_path / "out"), "progress": "off"})
    spec["workload"]["users"] = 2
    spec["cache"]["tiers"][0]["capacity"] = "4MiB"  # so entries reach the NIXL tier
    spec["cache"]["tiers"][-1]["options"].update(options)
    return spec


@needs_nixl
def test_posix_spec_runs(tmp_path: Path) -> None:
    # 2 s: the spec runs, not its status (too few requests for a p95: inconclusive, exit 7 without --exit-zero)
    code, _, stderr = run_cli(tmp_path, shortened(tmp_path, "nixl-posix", path=str(tmp_path / "kv")), "--exit-zero")
    assert code == 0, stderr
    assert not (tmp_path / "kv").exists()


@needs_nixl
@pytest.mark.s3
def test_obj_spec_runs(tmp_path: Path, moto_server: MotoServer) -> None:
    spec = shortened(tmp_path, "nixl-obj", endpoint_url=moto_server.url, bucket="kvbn-spec", transfer_size="1MiB")
    spec["model"] = {"name": "llama3.2-1b", "dtype": "bf16"}  # smaller entries: moto is slow on two cores
    code, _, stderr = run_cli(tmp_path, spec, "--exit-zero")  # 2 s: too few requests for a p95 (inconclusive)
    assert code == 0, stderr


@needs_nixl
@pytest.mark.skipif(has_nvidia_driver(), reason="a GPU host runs the GDS spec for real (test_nixl_gpu.py)")
def test_gds_spec_stops_before_the_run_without_a_gpu(tmp_path: Path) -> None:
    spec = shortened(tmp_path, "nixl-gds", path=str(tmp_path / "kv"))
    spec["cache"]["tiers"][0] = {"name": "dram", "backend": "cpu", "capacity": "4MiB"}  # past the HBM tier's own stop
    code, _, stderr = run_cli(tmp_path, spec)
    assert code != 0
    assert "tier 'nixl' (nixl): nixl_backend GDS / memory VRAM needs an NVIDIA GPU and driver" in stderr
    assert not (tmp_path / "kv").exists()
