"""The run summary explains each QoS verdict in one line (latencies per KV entry, the part that dominates
the service time) and says what to try next, from the result alone."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kvbench_core.cli.run_cmd import summarize
from kvbench_core.reports.verdicts import bytes_per_request, dominant_share, explain, mean_entry_bytes
from kvbench_core.results.document import ResultDocument

MIB = 1 << 20


def op(ops: int, nbytes: int, host_ms: float, device_ms: float) -> dict[str, Any]:
    layer = {"host": {"mean": host_ms, "p95": host_ms}, "device": {"mean": device_ms, "p95": device_ms},
             "total": {"mean": host_ms + device_ms, "p95": host_ms + device_ms}}
    return {"ops": ops, "bytes": nbytes, "bandwidth_bytes_per_s": 1e9, "latency_ms": layer}


def result(queue_ms: float, storage_ms: float, sla_met: bool) -> dict[str, Any]:
    return {
        "kvbench_result": 2,
        "run": {"id": "q-1", "name": "q", "status": "completed", "stop_reason": "duration reached", "error": None,
                "trial": None, "client_index": None, "started_at": None, "finished_at": 0.0, "traced": False},
        "model": {"bytes_per_token_all_ranks": 32 * 1024},
        "spec": {"as_written": {}, "resolved": {"workload": {"users": 8, "max_inflight": 4}}, "sha256": ""},
        "metrics": {
            "headline": {"requests_completed": 10, "avg_throughput_tokens_per_sec": 1.0,
                         "end_to_end_latency_p95_ms": 1.0, "cache_hit_rate": 0.5},
            "window": {"measured_s": 10.0},
            "requests": {"completed": 10},
            "latency_ms": {"queue_wait": {"mean": queue_ms}, "storage": {"mean": storage_ms}},
            "qos": {"responsive": {"requests": 10, "service_latency_ms": {"p95": 500.0}, "sla_p95_ms": 100.0,
                                   "sla_met": sla_met},
                    "interactive": {"requests": 0, "service_latency_ms": {"p95": None}, "sla_p95_ms": 50.0,
                                    "sla_met": None}},
            "tiers": {"dram": {"backend": "cpu", "volatile": True, "read": op(30, 30 * 64 * MIB, 5.0, 0.0),
                               "write": op(10, 10 * 64 * MIB, 5.0, 0.0)},
                      "nvme": {"backend": "nvme", "volatile": False, "read": op(10, 10 * 64 * MIB, 1.0, 200.0),
                               "write": op(10, 10 * 64 * MIB, 1.0, 50.0)}},
        },
    }


def test_the_entry_is_what_a_latency_is_for_and_the_shares_add_up() -> None:
    data = ResultDocument.of(result(queue_ms=100.0, storage_ms=400.0, sla_met=False))
    assert mean_entry_bytes(data) == 64 * MIB
    assert bytes_per_request(data) == 60 * 64 * MIB / 10
    dominant = dominant_share(data)
    assert (dominant.tier, dominant.op, dominant.layer) == ("nvme", "read", "device")
    # nvme read device: 10 x 200 ms of the host + device time 30x5 + 10x5 + 10x(1+200) + 10x(1+50) = 2720 ms,
    # within the 80% storage share of the service time
    assert dominant.share == pytest.approx(0.8 * 2000 / 2720)


def test_a_missed_sla_names_the_entry_the_dominant_part_and_a_next_step(capsys: Any) -> None:
    # interactive had no requests
    (verdict,) = explain(ResultDocument.of(result(queue_ms=100.0, storage_ms=400.0, sla_met=False)))
    assert verdict.why.startswith("responsive MISSED: service p95 500.0 ms vs SLA 100 ms (5.0x over); latencies "
                                  "are per KV entry of 64.00 MiB mean (2,048 tokens x 32.00 KiB); mostly nvme "
                                  "read device time (")
    assert verdict.next_step.startswith("next: one nvme read of 64.00 MiB takes 200.0 ms on the device; a "
                                        "request moves 384.00 MiB")
    lines = summarize(result(queue_ms=100.0, storage_ms=400.0, sla_met=False)).splitlines()
    assert lines[3] == f"    {verdict.why}" and lines[4] == f"    {verdict.next_step}"


def test_a_queue_bound_run_says_to_lower_the_load_and_a_met_one_to_raise_it() -> None:
    (queued,) = explain(ResultDocument.of(result(queue_ms=900.0, storage_ms=100.0, sla_met=False)))
    assert "mostly queue wait for a worker (90% of service time)" in queued.why
    assert queued.next_step.startswith("next: requests wait for one of 4 workers (max_inflight): lower "
                                       "workload.users (8)")
    (met,) = explain(ResultDocument.of(result(queue_ms=10.0, storage_ms=40.0, sla_met=True)))
    assert "met" in met.why and met.next_step.startswith("next: raise workload.users")


def test_memory_copy_time_is_named_as_memory_bandwidth() -> None:
    data = copy.deepcopy(result(queue_ms=0.0, storage_ms=400.0, sla_met=False))
    data["metrics"]["tiers"]["dram"]["read"] = op(300, 300 * 64 * MIB, 50.0, 0.0)
    (verdict,) = explain(ResultDocument.of(data))
    assert "mostly dram read host time" in verdict.why
    assert "memory bandwidth is the limit" in verdict.next_step


def test_a_result_without_latency_parts_still_summarizes() -> None:
    data = result(queue_ms=0.0, storage_ms=0.0, sla_met=False)
    (verdict,) = explain(ResultDocument.of(data))
    assert "mostly" not in verdict.why and "too few requests" in verdict.next_step


def test_the_next_step_gives_the_size_of_the_dominant_operations_own_entries() -> None:
    """'one nvme read of X takes Y ms': X is what that tier's reads moved per operation, the size Y is for,
    not the mean over every tier (which a DRAM tier of smaller entries pulls down)."""
    data = copy.deepcopy(result(queue_ms=100.0, storage_ms=400.0, sla_met=False))
    data["metrics"]["tiers"]["nvme"]["read"] = op(10, 10 * 96 * MIB, 1.0, 200.0)
    assert mean_entry_bytes(ResultDocument.of(data)) != 96 * MIB
    (verdict,) = explain(ResultDocument.of(data))
    assert verdict.next_step.startswith("next: one nvme read of 96.00 MiB takes 200.0 ms on the device")


def test_a_tiers_entry_size_is_in_the_same_binary_units_as_the_verdicts() -> None:
    from kvbench_core.cli.run_cmd import command_lines

    (line,) = command_lines("nvme", {"read": {"mean_entry_bytes": 64 * MIB}, "write": {}})
    assert line.strip() == "read per entry of 64.00 MiB"


def test_a_codec_tiers_host_time_names_the_codec_not_direct_io() -> None:
    """On a coded tier host time is mostly encode/decode (the codec layer runs inside host): the next step
    names the codec, not direct: true or transfer_size, which change nothing there (review #16 M5).  A
    codec that is a small part of the host time leaves the host advice as it was."""
    data = copy.deepcopy(result(queue_ms=0.0, storage_ms=400.0, sla_met=False))
    nvme = data["metrics"]["tiers"]["nvme"]
    nvme["codec"] = {"name": "zstd"}
    nvme["write"] = op(10, 10 * 64 * MIB, 300.0, 50.0)
    nvme["write"]["latency_ms"]["codec"] = {"count": 10, "mean": 240.0}
    (verdict,) = explain(ResultDocument.of(data))
    assert "mostly nvme write host time" in verdict.why
    assert verdict.next_step.startswith("next: nvme's host time is mostly its codec: encoding zstd takes 240.0 ms "
                                        "of the 300.0 ms per write")
    assert "direct: true" not in verdict.next_step
    nvme["write"]["latency_ms"]["codec"] = {"count": 10, "mean": 60.0}
    (verdict,) = explain(ResultDocument.of(data))
    assert "direct: true" in verdict.next_step and "codec" not in verdict.next_step
