"""Reading bpftrace's printed maps: the checked-in real capture and each bucket-label form."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from kvbench_blktrace.parse import Bucket, TraceOutputError, parse_maps
from kvbench_blktrace.program import COUNTERS, HISTOGRAMS, LBA_MAPS, SIZE_MAPS

CAPTURE = Path(__file__).parent / "data" / "bpftrace-fio-randrw.txt"


@pytest.fixture(scope="module")
def captured() -> dict:
    return parse_maps(CAPTURE.read_text())


def test_capture_has_every_map_the_program_prints(captured: dict) -> None:
    assert set(captured) == set(HISTOGRAMS) | set(SIZE_MAPS) | set(LBA_MAPS) | set(COUNTERS)


def test_capture_histograms_are_contiguous_log2_or_linear_buckets(captured: dict) -> None:
    for name in HISTOGRAMS:
        buckets = captured[name]
        assert buckets and all(isinstance(b, Bucket) for b in buckets), name
        for left, right in itertools.pairwise(buckets):
            assert left.high == right.low, (name, left, right)
    # "[1K, 2K)" labels are powers of 1024
    assert Bucket(1024, 2048, 282) in captured["syscall_write_us"]
    # lhist(…, 1) buckets are one request wide
    assert all(b.high - b.low == 1 for b in captured["queue_depth_write"])


def test_capture_sizes_and_counters(captured: dict) -> None:
    # the fio job's three block sizes dominate, as requests of exactly that size
    reads, writes = captured["bs_read"], captured["bs_write"]
    assert reads["4096"] == 753 and reads["131072"] == 583 and reads["1048576"] == 213
    assert writes["4096"] == 746
    assert captured["flush_ios"] == 421 and captured["depth_resyncs"] == 0


@pytest.mark.parametrize(("line", "bucket"), [
    ("[0]                    3 |@@@|", Bucket(0, 1, 3)),
    ("[1]                    2 |@@|", Bucket(1, 2, 2)),
    ("[2, 4)                 7 |@@@@@@@|", Bucket(2, 4, 7)),
    ("[512K, 1M)            12 |@|", Bucket(512 << 10, 1 << 20, 12)),
    ("[4G, 8G)               1 |@|", Bucket(4 << 30, 8 << 30, 1)),
    ("(..., 0)               4 |@@@@|", Bucket(None, 0, 4)),
    ("[1000, ...)            9 |@@@@@@@@@|", Bucket(1000, None, 9)),
])
def test_bucket_label_forms(line: str, bucket: Bucket) -> None:
    assert parse_maps(f"@h: \n{line}\n\n") == {"h": [bucket]}


def test_keyed_scalar_and_noise_lines() -> None:
    text = ("Attaching 3 probes...\nkvbench-trace: attached\n\n"
            "@n: 5\n@k[254, 0]: 7\n@k[254, 16]: 1\n\n@h:\n[8, 16)  1 |@|\n")
    assert parse_maps(text) == {"n": 5, "k": {"254, 0": 7, "254, 16": 1}, "h": [Bucket(8, 16, 1)]}


def test_unknown_map_format_is_an_error_not_a_silent_zero() -> None:
    with pytest.raises(TraceOutputError, match="line 1"):
        parse_maps("@s: count 3, average 5, total 15\n")
