"""MLPerf KV-cache v3.0 parity (#28 §5): the rules say what the seed's checklist asks and never pass a
trial they did not judge; the headline's figures carry the seed's meanings under the seed's names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conftest import small_spec
from test_check import _failed, _set, _submission, _trial

from kvbench_core.results.document import ResultDocument
from kvbench_core.results.metrics import headline


def _degraded(doc: dict[str, Any]) -> None:
    doc["run"]["status"] = "degraded"
    doc["metrics"]["requests"]["failed"] = 40


def test_no_failed_writes_judges_a_degraded_trial(tmp_path: Path) -> None:
    """It judged only completed trials, so a degraded one (its failures are why) printed "pass"."""
    failed = _failed(_submission(tmp_path, trial=_degraded, only=2), tmp_path)
    assert "no failed writes" in failed and "trial 2: 0 failed writes, 40 failed requests" in failed["no failed writes"]


def test_system_info_requires_the_nvme_model(tmp_path: Path) -> None:
    assert "system info documented" not in _failed(_submission(tmp_path), tmp_path)
    unnamed = _set("environment.paths.nvme.block_device.model", None)
    failed = _failed(_submission(tmp_path, trial=unnamed, only=1), tmp_path)
    assert "the storage device model under tier nvme" in failed["system info documented"]
    none = _set("environment.paths", {})
    assert "the NVMe model" in _failed(_submission(tmp_path, trial=none), tmp_path)["system info documented"]


def test_the_headline_has_the_seeds_meanings_and_names_its_tier() -> None:
    metrics = _trial(1, 0)["metrics"]
    head = metrics["headline"]
    nvme = metrics["tiers"]["nvme"]
    assert head["persistent_tier"] == "nvme"
    # the seed's read "device" is np.load: the file's read and its deserialisation, kvbench's whole read
    assert head["nvme_read_device_p95_ms"] == nvme["read"]["latency_ms"]["total"]["p95"]
    assert head["nvme_read_device_only_p95_ms"] == nvme["read"]["latency_ms"]["device"]["p95"]
    assert head["nvme_write_device_p95_ms"] == nvme["write"]["latency_ms"]["device"]["p95"]  # flush + fsync
    per_token = 131072
    assert head["nvme_tokens_processed"] == (nvme["read"]["bytes"] + nvme["write"]["bytes"]) // per_token
    assert headline(metrics, per_token) == head


def test_peak_io_bandwidth_is_the_best_interval_and_at_least_the_mean(run_spec: Any) -> None:
    from kvbench_core.reports.key_figures import measured_figures, peak_io_bandwidth

    spec = small_spec(duration=1.0, output={"interval": 0.25},
                      cache={"tiers": [{"name": "dram", "backend": "cpu", "capacity": "4MiB"},
                                       {"name": "disk", "backend": "nvme", "capacity": "64MiB",
                                        "options": {"path": "tier", "fsync": False}}]})
    del spec["requests"]
    _, result = run_spec(spec)
    tier = result["metrics"]["headline"]["persistent_tier"]
    peak = peak_io_bandwidth(ResultDocument.of(result))
    assert tier is not None and peak is not None
    moved = sum(result["metrics"]["tiers"][tier][op]["device"]["window"]["bytes"] for op in ("read", "write"))
    assert peak >= moved / result["metrics"]["window"]["measured_s"] * (1 - 1e-9)  # max >= mean
    figures = measured_figures(ResultDocument.of(result))
    assert figures["peak_io_bandwidth_gb_s"].value == peak / 1e9
    assert figures["nvme_read_device_p95_ms"].figure.label.endswith(f"({tier})")  # names the tier it reports
