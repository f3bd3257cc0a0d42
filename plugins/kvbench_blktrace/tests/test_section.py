"""The ``block_trace`` result section built from the real capture: shape, totals, percentiles."""

from __future__ import annotations

from pathlib import Path

import pytest
from kvbench_blktrace.parse import Bucket, parse_maps
from kvbench_blktrace.program import HISTOGRAMS
from kvbench_blktrace.section import build_section, quantile

from kvbench_core.contracts.redact import redact

CAPTURE = Path(__file__).parent / "data" / "bpftrace-fio-randrw.txt"


def capture_section() -> dict:
    return build_section(parse_maps(CAPTURE.read_text()), tool="bpftrace v0.17.0", pid=4242,
                         devices=[{"name": "vda", "dev": "254:0"}], paths={"nvme": "/tmp/kv"},
                         window={"started_at": 1.0, "ended_at": 5.0, "traced_s": 4.0, "attach_s": 40.0},
                         l4={}, notes=[])


def test_quantile_interpolates_inside_the_bucket() -> None:
    buckets = [Bucket(0, 10, 5), Bucket(10, 20, 5)]
    assert quantile(buckets, 0.5) == 10
    assert quantile(buckets, 0.75) == 15
    assert quantile(buckets, 1.0) == 20
    assert quantile([], 0.5) is None
    assert quantile([Bucket(0, 10, 0)], 0.5) is None


def test_quantile_in_an_open_bucket_is_its_known_bound() -> None:
    assert quantile([Bucket(1, 2, 1), Bucket(1000, None, 9)], 0.99) == 1000
    assert quantile([Bucket(None, 0, 3), Bucket(0, 1, 1)], 0.1) == 0


def test_every_histogram_is_in_the_section_with_its_meaning() -> None:
    section = capture_section()
    assert set(section["histograms"]) == set(HISTOGRAMS)
    for name, entry in section["histograms"].items():
        assert entry["count"] == sum(b["count"] for b in entry["buckets"]) > 0, name
        assert entry["p50"] <= entry["p90"] <= entry["p95"] <= entry["p99"], name
        assert entry["unit"] == HISTOGRAMS[name].unit and entry["what"]


def test_totals_are_the_bssplit_sums() -> None:
    section = capture_section()
    for op in ("read", "write"):
        sizes = section["bssplit"][op]
        assert [s["bytes"] for s in sizes] == sorted(s["bytes"] for s in sizes)
        assert section["totals"][op]["ios"] == sum(s["count"] for s in sizes)
        assert section["totals"][op]["bytes"] == sum(s["bytes"] * s["count"] for s in sizes)
    assert section["totals"]["flush_ios"] == 421


def test_the_lba_heatmap_places_every_request_in_a_10_gb_stretch() -> None:
    section = capture_section()
    heat = section["lba_heatmap"]
    assert heat["bucket_bytes"] == 10 * 10**9
    for op in ("read", "write"):
        assert sum(cell["count"] for cell in heat[op]) == section["totals"][op]["ios"] > 0
        assert all(cell["offset_bytes"] % heat["bucket_bytes"] == 0 for cell in heat[op])


def test_an_empty_trace_still_has_every_histogram() -> None:
    section = build_section({}, tool="t", pid=1, devices=[], paths={}, window={}, l4={}, notes=[])
    assert all(h["count"] == 0 and h["p50"] is None and h["buckets"] == [] for h in section["histograms"].values())
    assert section["totals"]["read"] == {"ios": 0, "bytes": 0}


@pytest.mark.parametrize("section", [capture_section()])
def test_result_redaction_leaves_the_section_alone(section: dict) -> None:
    # results pass every section through redact(); no key may look like a credential
    assert redact(section) == section
