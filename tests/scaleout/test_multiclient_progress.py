"""The aggregate progress line of a multi-client run: every client's figures summed, p95s the worst client's,
labelled so, on every line."""

from __future__ import annotations

import io

from conftest import small_spec

from kvbench_core.engine.measure.progress import ProgressPrinter, format_progress
from kvbench_core.runspec.loader import resolve
from kvbench_core.runspec.plan import plan_run
from kvbench_core.scaleout.multiclient import LocalClients, merge_points, worst_p95

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


def client_point(phase: str, users: int, requests: int, **more: object) -> dict[str, object]:
    return {"phase": phase, "users": users, "requests": requests, "elapsed_s": 6.0 if phase == "measure" else 0.0,
            "t_s": 8.0, "duration_s": 10.0, "warmup_s": 2.0, "read_bytes_per_s": 1e9, "write_bytes_per_s": 5e8,
            "queue": 1, **A, **more}


def test_clients_crossing_into_the_window_are_all_summed_and_the_line_says_how_many_measure() -> None:
    """Issue: one client measuring and one still warming up showed 'users 4' of an 8-user run."""
    merged = merge_points([client_point("measure", 4, 2), client_point("warmup", 4, 3)], clients=2)
    assert (merged["users"], merged["requests"], merged["queue"]) == (8, 5, 2)
    assert merged["read_bytes_per_s"] == 2e9 and merged["tiers"]["dram"]["read_bytes_per_s"] == 2e9
    line = format_progress(merged)
    assert line.startswith("[measuring 8/12s, 1/2 clients] users 8  req 5  ")  # warm-up 2 s + 6 s measured
    every = merge_points([client_point("measure", 4, 2), client_point("measure", 4, 3)], clients=2)
    assert every["clients_measuring"] is None and format_progress(every).startswith("[measuring 8/12s] users 8  ")
    warming = merge_points([client_point("warmup", 4, 2), client_point("warmup", 4, 3)], clients=2)
    assert format_progress(warming).startswith("[warm-up 2/12s] users 8  req 5  ")
    first = merge_points([client_point("warmup", 4, 2)], clients=2)  # the other client has not reported yet
    assert format_progress(first).startswith("[warm-up 2/12s, 1/2 clients] users 4  ")  # review R4


def test_every_line_of_a_multi_client_run_carries_its_prefix_and_whose_p95_from_the_first_on() -> None:
    """Issue: the set-up line came before the prefix was set, without '2 clients' or '(p95: worst client)'."""
    stream = io.StringIO()
    plan = plan_run(resolve(small_spec(clients=2), "."))
    printer = ProgressPrinter("on", stream=stream, duration_s=10.0, warmup_s=2.0,
                              scope=LocalClients(plan).progress_scope)  # as the session makes it
    printer.phase("setup")
    printer(merge_points([client_point("measure", 4, 2), client_point("warmup", 4, 3)], clients=2))
    printer({"phase": "drain", "clients_measuring": None})
    lines = stream.getvalue().splitlines()
    assert len(lines) == 3
    assert all(line.startswith("2 clients [") and line.endswith("(p95: worst client)") for line in lines), lines
    assert lines[0].startswith("2 clients [set-up 0/12s] users 0 ")
    assert lines[2].startswith("2 clients [drain 12/12s] users 8 ")  # the drain keeps the last figures

