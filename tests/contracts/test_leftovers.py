"""``ServerCleanup``: a server tier's clean-up under its deadline, the record of what it left, and the removal
of what earlier runs recorded (the bookkeeping the s3 and redis tiers share, issue #30 §2)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from kvbench_core.contracts.leftovers import Leftovers, ServerCleanup, pending, record

PLACE = "redis 127.0.0.1:1/0"


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return tmp_path / "state" / "kvbench" / "leftovers"


def cleanup(timeout_s: float = 5.0) -> ServerCleanup:
    return ServerCleanup("tier 'cold' (redis)", "RUN1", timeout_s, "server")


def test_a_cleanup_that_finishes_records_and_says_nothing(state: Path) -> None:
    removed: list[str] = []
    book = cleanup()
    book.clean(PLACE, lambda: removed.append("all"), name="t", items=lambda: {"keys": ["k"]},
               said=lambda left: "said")
    assert removed == ["all"]
    assert book.leftovers() is None and book.notes == [] and not state.exists()


def test_a_cleanup_that_fails_lists_records_and_says_what_is_left(state: Path) -> None:
    def fail() -> None:
        raise ConnectionError("refused")

    book = cleanup()
    book.clean(PLACE, fail, name="t", items=lambda: {"prefix": "kvbench:RUN1:", "keys": ["a", "b"]},
               said=lambda left: f"{len(left['keys'])} keys left")
    left = book.leftovers()
    assert left is not None and left["keys"] == ["a", "b"] and left["prefix"] == "kvbench:RUN1:"
    assert json.loads(Path(left["record"]).read_text())["items"]["keys"] == ["a", "b"]
    assert book.notes == ["tier 'cold' (redis): could not clean up (ConnectionError: refused): 2 keys left "
                          "(listed in sections.leftovers); the next run on this server removes them, or kvbench "
                          "clean SPEC"]


def test_a_cleanup_past_its_deadline_is_not_waited_for_and_lists_what_it_read_then() -> None:
    release = threading.Event()
    book = cleanup(timeout_s=0.2)
    began = time.monotonic()
    book.clean(PLACE, lambda: release.wait(30), name="t", items=lambda: {"keys": ["x"]}, said=lambda left: "1 key")
    waited = time.monotonic() - began
    release.set()
    assert waited < 10, waited  # bounded by the deadline, not by the stuck work (30 s)
    assert book.leftovers() is not None and "TimeoutError: not finished within 0.2 s" in book.notes[0]


def test_recorded_leftovers_of_ours_are_removed_forgotten_and_said_others_are_kept() -> None:
    record(Leftovers(PLACE, "OLD", {"prefix": "kvbench:OLD:", "keys": ["k1", "k2", "k3"]}))
    record(Leftovers(PLACE, "USER", {"prefix": "user:", "keys": ["u"]}))
    removed: list[str] = []
    book = cleanup()
    book.remove_recorded(PLACE, lambda prefix: prefix.startswith("kvbench:"), removed.append, name="t",
                         where=lambda prefix: f"{prefix} on the server", what="keys")
    assert removed == ["kvbench:OLD:"]
    assert [left.run_id for left in pending(PLACE)] == ["USER"]
    assert book.notes == ["tier 'cold' (redis): removed what run OLD left under kvbench:OLD: on the server "
                          "(3 keys listed)"]


def test_a_recorded_leftover_that_cannot_be_removed_keeps_its_record() -> None:
    record(Leftovers(PLACE, "OLD", {"prefix": "kvbench:OLD:", "keys": ["k1"]}))

    def fail(prefix: str) -> None:
        raise TimeoutError("no answer")

    book = cleanup()
    book.remove_recorded(PLACE, lambda prefix: True, fail, name="t", where=str, what="keys")
    assert [left.run_id for left in pending(PLACE)] == ["OLD"] and book.notes == []
