"""A kvbench run on the nvme tier pipelines a request's writes (issue 32 §1): the next entry's commands start
while the previous entry is not yet durable (with psync: they are in flight during its fsync), no entry is
stored (in its tier, readable) before its fsync has returned, and a pending write whose fsync fails fails its
request.

Every request misses its system prompt's prefix (a thousand prompts), so it stores two entries in a row: the
prefix, then its prefill.  ``os.fsync`` (and, to order the psync case, ``os.open``) are replaced for the run
(``Gate``): the first prefix entry's fsync waits until another entry's file has bytes, so the order is the
test's, not the disk's.  A run that wrote each entry durable before starting the next would hold it to the
limit and only then start the prefill.
"""

from __future__ import annotations

import errno
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from kvbench_nvme.uring import unavailable_reason

from kvbench_core.engine.cache import waterfall
from kvbench_core.engine.run.runner import Runner
from kvbench_core.results.result import build_result
from kvbench_core.runspec.loader import resolve, validate
from kvbench_core.runspec.plan import plan_run

ENGINES = ["psync", pytest.param("io_uring", marks=pytest.mark.skipif(
    unavailable_reason() is not None, reason=f"io_uring unavailable here: {unavailable_reason()}"))]
HOLD_LIMIT_S = 5.0  # how long a held call waits for the other side (a bound, not a measurement)


class Gate:
    """``os.fsync`` and ``os.open`` for one run.  The first prefix entry opened for writing is ``held``: its
    fsync waits (at most ``HOLD_LIMIT_S``) until a file that was not in the directory when it was opened has
    bytes (the next entry's commands ran), then syncs, or with ``fail`` raises EIO.  With ``order_opens``
    the next entry's file opens only once that fsync has begun, so its commands all run during it (psync
    only: an io_uring stream reaps the prefix's last commands in its next entry's loop, which must start
    first).  Every entry file's fsync (start, end) is kept by file name."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, directory: Path, *, fail: bool = False,
                 order_opens: bool = False) -> None:
        self.real_fsync, self.real_open = os.fsync, os.open
        self.directory, self.fail, self.order_opens = directory, fail, order_opens
        self.held: str | None = None
        self.before: set[str] = set()  # the directory when the held entry was opened
        self.fsync_begun = threading.Event()
        self.calls: dict[str, tuple[float, float]] = {}
        monkeypatch.setattr(os, "fsync", self.fsync)
        monkeypatch.setattr(os, "open", self.open)

    def open(self, path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        name = os.path.basename(os.fspath(path))
        if flags & os.O_WRONLY and name.endswith(".kv"):
            if self.held is None and "-kv_system_" in name:
                self.before = set(os.listdir(self.directory))
                self.held = name
            elif self.held is not None and self.order_opens and name != self.held:
                self.fsync_begun.wait(HOLD_LIMIT_S)
        return self.real_open(path, flags, *args, **kwargs)

    def fsync(self, fd: int) -> None:
        name = os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))
        start = time.perf_counter()
        try:
            if name == self.held and not self.fsync_begun.is_set():
                self.fsync_begun.set()
                self._wait_for_another_entry()
                if self.fail:
                    raise OSError(errno.EIO, "injected fsync failure")
            self.real_fsync(fd)
        finally:
            self.calls[name] = (start, time.perf_counter())

    def _wait_for_another_entry(self) -> None:
        deadline = time.monotonic() + HOLD_LIMIT_S
        while time.monotonic() < deadline:
            for name in set(os.listdir(self.directory)) - self.before - {self.held}:
                if _size(self.directory / name):
                    return
            time.sleep(0.005)

    def of(self, key: str) -> tuple[float, float]:
        """The (start, end) of the fsync of ``key``'s file."""
        (times,) = [times for name, times in self.calls.items() if name.endswith(f"-{key}.kv")]
        return times

    def held_key(self, keys: set[str]) -> str:
        """Which of ``keys`` the held entry is."""
        assert self.held is not None, "no prefix entry was written"
        (key,) = [key for key in keys if self.held.endswith(f"-{key}.kv")]
        return key


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


class Landings:
    """When the cache put each entry in its tier (``PendingPut.finish`` returned): stored, readable."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.at: dict[str, float] = {}
        real = waterfall.PendingPut.finish

        def finish(pending: waterfall.PendingPut) -> str:
            tier = real(pending)
            self.at[pending.key] = time.perf_counter()
            return tier

        monkeypatch.setattr(waterfall.PendingPut, "finish", finish)

    def check_after(self, gate: Gate) -> None:
        """No entry was stored before its fsync had returned."""
        assert self.at, "no entry was stored"
        for key, at in self.at.items():
            assert at >= gate.of(key)[1], key


def spec(tmp_path: Path, engine: str, **top: Any) -> dict[str, Any]:
    return {"version": 1, "name": "pipelined", "seed": 3, "model": {"name": "tiny-1b"}, "requests": 6,
            "workload": {"users": 1, "max_inflight": 1, "options": {
                "profiles": {"p": {"context": [64, 96], "generate": [1, 1], "think_s": [0, 0]}},
                "profile_mix": {"p": 1}, "multi_turn": {"enabled": False},
                "prefix_caching": {"probability": 1.0, "prompts": 1000, "prefix_tokens": [16, 48]}}},
            "cache": {"tiers": [{"name": "nvme", "backend": "nvme", "capacity": "256MiB",
                                 "options": {"path": str(tmp_path / "tier"), "engine": engine,
                                             "transfer_size": "64KiB", "queue_depth": 2}}]},
            "output": {"progress": "off", "directory": str(tmp_path / "out"),
                       "io_log": str(tmp_path / "io.jsonl")},
            **top}


def run(tmp_path: Path, raw: dict[str, Any]) -> dict[str, Any]:
    validate(raw)
    state = Runner(plan_run(resolve(raw, str(tmp_path)))).run()
    assert state.crash is None, state.stop_reason
    return build_result(state, raw)


def io_log(tmp_path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (tmp_path / "io.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("engine", ENGINES)
def test_the_next_entry_starts_before_the_previous_one_is_durable(tmp_path: Path, engine: str,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    gate = Gate(monkeypatch, tmp_path / "tier")
    landed = Landings(monkeypatch)
    result = run(tmp_path, spec(tmp_path, engine))
    commands = [c for c in io_log(tmp_path) if c["op"] == "write"]
    held = gate.held_key({c["key"] for c in commands})
    # One worker, whose request cannot end while its prefix is not durable: another entry's commands begun
    # after the prefix's first and before its fsync returned are its prefill's, across the entry boundary.
    first = min(c["start_s"] for c in commands if c["key"] == held)
    assert any(first < c["start_s"] < gate.of(held)[1] for c in commands if c["key"] != held)
    landed.check_after(gate)
    assert result["metrics"]["tiers"]["nvme"]["write"]["ops"] > 0
    assert result["checks"]["passed"], result["checks"]["violations"]  # stored entries = write ops, by time


@pytest.mark.parametrize("direct", [False, True])
def test_psync_keeps_the_next_entry_s_commands_in_flight_during_the_previous_fsync(
        tmp_path: Path, direct: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    gate = Gate(monkeypatch, tmp_path / "tier", order_opens=True)
    landed = Landings(monkeypatch)
    raw = spec(tmp_path, "psync")
    raw["cache"]["tiers"][0]["options"]["direct"] = direct
    result = run(tmp_path, raw)
    if direct and not result["metrics"]["tiers"]["nvme"]["describe"].get("direct"):
        pytest.skip("the tier directory's filesystem does not take O_DIRECT here")
    commands = [c for c in io_log(tmp_path) if c["op"] == "write"]
    held = gate.held_key({c["key"] for c in commands})
    fsync_start, fsync_end = gate.of(held)
    assert any(c["start_s"] < fsync_end and c["end_s"] > fsync_start for c in commands if c["key"] != held)
    landed.check_after(gate)
    assert result["checks"]["passed"], result["checks"]["violations"]


def test_a_pending_write_whose_fsync_fails_fails_its_request(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gate = Gate(monkeypatch, tmp_path / "tier", fail=True)
    landed = Landings(monkeypatch)
    result = run(tmp_path, spec(tmp_path, "psync", on_error="count"))
    failed_key = gate.held_key({c["key"] for c in io_log(tmp_path)})
    assert result["metrics"]["requests"]["failed"] == 1
    assert [e["key"] for e in result["errors"] if "injected fsync failure" in e["error"]] == [failed_key]
    assert failed_key not in landed.at  # never stored: no later request could read it
    assert result["metrics"]["tiers"]["nvme"]["write"]["errors"] == 1
    assert result["checks"]["passed"], result["checks"]["violations"]
