"""Sizes as fio writes them (a bare unit letter is a power of two), and ``kvbench spec validate`` showing
what it parsed, so ``128k`` cannot silently become 128,000 bytes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import small_spec

from kvbench_core.cli import main
from kvbench_core.contracts.units import parse_size


@pytest.mark.parametrize(("written", "expected"), [
    ("128k", 131072), ("128K", 131072), ("4m", 4 * 1024**2), ("1g", 1024**3), ("2t", 2 * 1024**4),  # fio
    ("128KiB", 131072), ("8GiB", 8 * 1024**3), ("1.5MiB", 1572864),  # IEC
    ("128KB", 128000), ("8GB", 8_000_000_000), ("512 MB", 512_000_000),  # SI, spelled out
    ("4096", 4096), ("4096b", 4096), (65536, 65536),
])
def test_sizes_read_as_fio_and_their_standards_do(written: Any, expected: int) -> None:
    assert parse_size(written) == expected


@pytest.mark.parametrize("bad", ["8Gi", "k", "12 parsecs", "-1k"])
def test_a_size_without_a_known_unit_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="expected a size like 128k"):
        parse_size(bad)


def test_spec_validate_prints_every_size_and_duration_as_parsed(tmp_path: Path, capsys: Any) -> None:
    spec = small_spec(duration="2m", warmup="500ms", cache={"tiers": [
        {"name": "dram", "backend": "cpu", "capacity": "128k"},
        {"name": "disk", "backend": "cpu", "capacity": "1GB"}]})
    del spec["requests"]
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    assert main(["spec", "validate", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"{path}: valid"
    assert lines[1:] == [
        "  cache.tiers[0].capacity: 128k = 131,072 bytes (128.00 KiB)",
        "  cache.tiers[1].capacity: 1GB = 1,000,000,000 bytes (953.67 MiB)",
        "  duration: 2m = 120 s",
        "  warmup: 500ms = 0.5 s",
    ]
