"""The aggregate progress line of a multi-client run: rates summed, p95s the worst client's, labelled so."""

from __future__ import annotations

from kvbench_core.engine.progress import format_progress
from kvbench_core.scaleout.multiclient import worst_p95

A = {"tiers": {"dram": {"read_bytes_per_s": 1e9, "write_bytes_per_s": 2e9, "read_p95_ms": 1.0, "write_p95_ms": None}},
     "e2e_p95_ms": {"interactive": 40.0}, "storage_p95_ms": 3.0}
B = {"tiers": {"dram": {"read_bytes_per_s": 3e9, "write_bytes_per_s": 0.0, "read_p95_ms": 4.0, "write_p95_ms": 7.0},
               "nvme": {"read_bytes_per_s": 5e8, "write_bytes_per_s": None, "read_p95_ms": 9.0}},
     "e2e_p95_ms": {"interactive": 20.0, "batch": 80.0}, "storage_p95_ms": None}


def test_rates_add_up_and_each_p95_is_the_worst_clients() -> None:
    merged = worst_p95([A, B])
    assert merged["tiers"]["dram"] == {"read_bytes_per_s": 4e9, "write_bytes_per_s": 2e9,
                                       "read_p95_ms": 4.0, "write_p95_ms": 7.0}
    assert merged["tiers"]["nvme"] == {"read_bytes_per_s": 5e8, "write_bytes_per_s": 0.0,
                                       "read_p95_ms": 9.0, "write_p95_ms": None}  # no client wrote: none
    assert merged["e2e_p95_ms"] == {"interactive": 40.0, "batch": 80.0}
    assert merged["storage_p95_ms"] == 3.0


def test_the_line_says_whose_p95_it_shows() -> None:
    point = {"phase": "measure", "users": 8, "requests": 3, **worst_p95([A, B]), "p95_of": "worst client"}
    line = format_progress(point)
    assert "dram r 4.00 w 2.00 GB/s p95 r 4.0 ms w 7.0 ms" in line
    assert "e2e p95 80.0 ms" in line and line.endswith("(p95: worst client)")
    assert "(p95:" not in format_progress({k: v for k, v in point.items() if k != "p95_of"})  # one client's own
