"""What a run could not clean up on a server, recorded so that a later run (or ``kvbench clean SPEC``) removes it.

A tier on a server (S3, Redis) deletes its run's objects or keys at close, under
a deadline (its ``cleanup_timeout``): a hung endpoint must not hold a finished
run for the 15 minutes a multipart Complete may take.  What is still there when
the deadline passes is listed in the result and recorded here, one JSON file per
(place, run), under ``$XDG_STATE_HOME/kvbench/leftovers`` (``~/.local/state``
by default).  The next tier opened on the same place (endpoint and bucket with
its prefix, or server and namespace) removes what the record lists and drops the
record; so does ``kvbench clean SPEC`` for the tiers of a spec.  ``ServerCleanup`` is that bookkeeping
for a tier: the s3 and redis tiers differ only in what they remove and how they name it.

Why a local record and not a scan of the bucket: a scan cannot tell a dead run's
objects from those of a live run on another machine; a record is written only by
the process whose run left them, once it is done with them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def leftovers_directory() -> Path:
    """Where records are kept: ``$XDG_STATE_HOME/kvbench/leftovers``."""
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(state) / "kvbench" / "leftovers"


@dataclass(frozen=True)
class Leftovers:
    """One run's leftovers at one place: ``items`` names them as the tier needs to remove them
    (``{"objects": [...], "uploads": [{"key": ..., "upload_id": ...}]}``, ``{"keys": [...]}``)."""

    place: str  # "s3 http://host:9000 bucket/prefix", "redis 127.0.0.1:6379/0 namespace"
    run_id: str
    items: dict[str, Any]
    path: Path | None = None  # the record's file, once recorded

    @property
    def count(self) -> int:
        return sum(len(value) for value in self.items.values() if isinstance(value, list))


def _file_of(place: str, run_id: str) -> Path:
    digest = hashlib.sha256(place.encode()).hexdigest()[:16]
    return leftovers_directory() / f"{digest}-{run_id}.json"


def record(leftovers: Leftovers) -> Leftovers:
    """Write the record (atomically: a reader never sees half of one); returns it with its ``path``.  A
    record that cannot be written is not an error of the run: the result lists the leftovers anyway."""
    path = _file_of(leftovers.place, leftovers.run_id)
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps({"place": leftovers.place, "run_id": leftovers.run_id,
                                       "recorded_at": time.time(), "items": leftovers.items}, indent=1))
        os.replace(partial, path)
        return Leftovers(leftovers.place, leftovers.run_id, leftovers.items, path)
    return leftovers


def pending(place: str) -> list[Leftovers]:
    """The records of ``place``, oldest run first; an unreadable record is skipped (and kept)."""
    found = []
    digest = hashlib.sha256(place.encode()).hexdigest()[:16]
    with contextlib.suppress(OSError):
        for path in sorted(leftovers_directory().glob(f"{digest}-*.json")):
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                data = json.loads(path.read_text())
                if data["place"] == place and isinstance(data["items"], dict):
                    found.append(Leftovers(place, str(data["run_id"]), data["items"], path))
    return found


def forget(leftovers: Leftovers) -> None:
    """Drop a record whose leftovers are removed."""
    if leftovers.path is not None:
        with contextlib.suppress(FileNotFoundError):
            leftovers.path.unlink()


def within(seconds: float, work: Callable[[], None], *, name: str) -> BaseException | None:
    """Run ``work`` on a daemon thread and wait at most ``seconds``: None when it finished, the exception it
    raised, or ``TimeoutError`` when it is still running (it is left to end on its own: a thread blocked on
    a frozen server cannot be interrupted, only no longer waited for, and being a daemon it never holds the
    process's exit)."""
    failure: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as error:  # handed to the caller, who lists what is left
            failure.append(error)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        return TimeoutError(f"not finished within {seconds:g} s")
    return failure[0] if failure else None


class ServerCleanup:
    """One server tier's deadline-bound clean-up and what it leaves: the run's own prefix removed at close,
    what earlier runs recorded for the same place removed at open, each told in ``notes``, and what the
    close could not remove recorded and listed (``leftovers``).  A tier gives the work (what to remove, how
    to name it); the deadline, the record and the sentences are the same for every tier, so they are here."""

    def __init__(self, label: str, run_id: str, timeout_s: float, medium: str) -> None:
        self.label = label  # the tier's error prefix: tier 'cold' (s3)
        self.run_id = run_id
        self.timeout_s = timeout_s  # the tier's cleanup_timeout
        self.medium = medium  # what the next run must open to remove them: "server", "bucket"
        self.left: Leftovers | None = None
        self.notes: list[str] = []

    def clean(self, place: str, remove: Callable[[], None], *, name: str, items: Callable[[], dict[str, Any]],
              said: Callable[[dict[str, Any]], str]) -> None:
        """``remove`` the run's own entries within the deadline; when it fails or runs out of time, record
        ``items()`` (what is left, read then) for ``place`` and say ``said(items)`` in a note."""
        failure = within(self.timeout_s, remove, name=name)
        if failure is None:
            return
        left = items()
        self.left = record(Leftovers(place, self.run_id, left))
        self.notes.append(f"{self.label}: could not clean up ({type(failure).__name__}: {failure}): {said(left)} "
                          f"(listed in sections.leftovers); the next run on this {self.medium} removes them, or "
                          "kvbench clean SPEC")

    def remove_recorded(self, place: str, ours: Callable[[str], bool], remove: Callable[[str], None], *, name: str,
                        where: Callable[[str], str], what: str) -> None:
        """What earlier runs recorded as left at ``place``: each record whose prefix is ``ours`` (never a
        user's own, never a shared one) is removed with ``remove(prefix)`` within the deadline, forgotten
        and said (``where(prefix)`` names the place, ``what`` the kind of things listed)."""
        for left in pending(place):
            prefix = str(left.items.get("prefix", ""))
            if not ours(prefix):
                continue
            if within(self.timeout_s, lambda prefix=prefix: remove(prefix), name=name) is None:
                forget(left)
                self.notes.append(f"{self.label}: removed what run {left.run_id} left under {where(prefix)} "
                                  f"({left.count} {what} listed)")

    def leftovers(self) -> dict[str, Any] | None:
        """The result's ``sections.leftovers.<tier>``: what is left and the record that lists it; None."""
        if self.left is None:
            return None
        return {**self.left.items, "record": str(self.left.path) if self.left.path else None}


class Unanswered:
    """Whether the tier's server has stopped answering: set by a request that timed out or lost its
    connection, cleared by the next that got a reply.  While set, the entry deletes of the run's cleanup
    are not sent (each would wait a full timeout: a thousand entries on a frozen server, an hour); what
    they would have removed is listed as left over instead, and the close's own cleanup, under its
    deadline, tries once more."""

    def __init__(self, errors: tuple[type[BaseException], ...]) -> None:
        self.errors = errors  # the client library's timeout and connection errors
        self.now = False

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        try:
            yield
        except self.errors:
            self.now = True
            raise
        self.now = False
