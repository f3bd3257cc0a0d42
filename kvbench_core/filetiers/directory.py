"""The tier directory: where kvbench may write, what it may delete afterwards, and who is using it.

A benchmark that writes and deletes thousands of files must never be pointed
at the wrong place.  The rules:

* system paths are refused outright (``/``, ``/etc``, ``/usr``, ``/proc``…, the
  home directory itself), after resolving symlinks (``kvbench_core.runspec.safepaths``,
  the list the result writer obeys too);
* a directory kvbench creates gets a ``.kvbench-owner`` marker; a non-empty
  directory without a *genuine* marker (a regular file kvbench wrote, never a
  symlink or a dangling one) is refused unless the user says ``allow_nonempty: true``;
* a missing directory is created only when its parent exists, unless the spec says ``create: true``
  (``CREATE_OPTION``; the loader refuses it otherwise, naming the missing parent): a typo in a path
  must not silently grow a tree of directories somewhere; what kvbench created is said in the result's
  ``warnings`` and the summary (``notes``), as a dead run's files found and removed are;
* the directory is locked for the whole run (``kvbench_core.filetiers.dirlock``): a second
  run on it is refused naming the first, and a killed run's files are found,
  reported and removed when they are provably its own;
* at close the directory (and any parents kvbench created for it) is removed
  only when nothing but a genuine marker is left in it.

Only the backend's own files are ever deleted (it tracks them), so a shared or
user-supplied directory keeps everything else.
"""

from __future__ import annotations

import contextlib
import os
import sys

from kvbench_core.contracts.errors import BackendUnavailable
from kvbench_core.filetiers.dirlock import OWNER_MARKER, DirectoryBusy, DirectoryLock, StaleRun, mark_created, owner_of
from kvbench_core.runspec.safepaths import refusal_reason, resolved

MARKER = OWNER_MARKER

#: The option of every file tier's schema that lets kvbench create the missing parents of its directory.
CREATE_OPTION = {"type": "boolean", "default": False,
                 "description": "create the directory's missing parents too (without it, a path whose parent "
                                "does not exist is refused: a typo must not grow a tree of directories)"}


class TierDirectory:
    """Safety checks, creation with an owner marker, the run's lock, and removal of what kvbench created."""

    def __init__(self, path: str, run_id: str, *, allow_nonempty: bool, label: str) -> None:
        self.requested = path
        self.path = resolved(path)  # "~/kv" and "$HOME/kv" are the home, not ./~
        self.run_id = run_id
        self.allow_nonempty = allow_nonempty
        self.label = label  # "tier 'nvme0' (nvme)", prefixes every error
        self._created: list[str] = []  # directories this process made, outermost first
        self._lock = DirectoryLock(self.path, run_id)
        self.stale_runs: list[StaleRun] = []  # dead runs found (and cleaned) at open

    def _unavailable(self, problem: str) -> BackendUnavailable:
        shown = self.requested if self.requested == self.path else f"{self.requested} (-> {self.path})"
        return BackendUnavailable(f"{self.label}: directory {shown} {problem}")

    def open(self) -> None:
        """Check the rules, create and lock the directory; raise ``BackendUnavailable`` with the reason."""
        reason = refusal_reason(self.path)
        if reason is not None:
            raise self._unavailable(reason)
        if os.path.lexists(self.path) and not os.path.isdir(self.path):
            raise self._unavailable("is not a directory")
        try:
            if os.path.isdir(self.path):
                self._check_existing()
            else:
                self._create()
            self.stale_runs = self._lock.acquire()
        except DirectoryBusy as busy:
            raise self._unavailable(str(busy)) from None
        except PermissionError as error:
            raise self._unavailable(f"cannot be used: permission denied ({error.strerror}: {error.filename})") from None
        except NotADirectoryError:
            raise self._unavailable("has a parent that is not a directory") from None
        except OSError as error:
            raise self._unavailable(f"cannot be used: {error.strerror or error}") from None
        for stale in self.stale_runs:
            print(f"kvbench: warning: {self.label}: {self.path}: {stale.describe()}", file=sys.stderr)

    def _check_existing(self) -> None:
        with os.scandir(self.path) as entries:
            names = {entry.name for entry in entries}
        if names and owner_of(self.path) is None and not self.allow_nonempty:
            fake = " (its .kvbench-owner is not a regular file kvbench wrote)" if MARKER in names else ""
            raise self._unavailable(
                f"is not empty ({len(names)} entries) and was not created by kvbench{fake or f' (no {MARKER})'}; "
                "point the tier at an empty or new directory, or set allow_nonempty: true "
                "(kvbench then deletes only its own files)"
            )
        if not os.access(self.path, os.W_OK | os.X_OK):
            raise PermissionError(13, "not writable", self.path)

    def _create(self) -> None:
        missing = []
        parent = self.path
        while not os.path.exists(parent):
            missing.append(parent)
            parent = os.path.dirname(parent)
        if not os.path.isdir(parent):
            raise NotADirectoryError(20, "not a directory", parent)
        for directory in reversed(missing):
            with contextlib.suppress(FileExistsError):  # another process of the same run got there first
                os.mkdir(directory)
                self._created.append(directory)
        if self.path in self._created:
            mark_created(self.path, self.run_id)

    def notes(self) -> list[str]:
        """What the result's ``warnings`` and the summary say: the directories this run created (the
        outermost: its subdirectories came with it) and each dead run's files found and removed."""
        parents = f" and its missing parents from {self._created[0]}" if len(self._created) > 1 else ""
        created = [f"{self.label}: created {self._created[-1]}{parents}"] if self._created else []
        return created + [f"{self.label}: {self.path}: {stale.describe()}" for stale in self.stale_runs]

    def describe(self) -> dict[str, object]:
        """What the tier's declaration says about dead runs found in the directory."""
        return {"stale_runs": [stale.describe() for stale in self.stale_runs]} if self.stale_runs else {}

    def close(self, *, keep: bool = False) -> None:
        """Unlock; without ``keep``, first remove the directory if this run made it and only the marker is left."""
        self._lock.drop_record(keep=keep)
        try:
            if not keep:
                self._remove_if_ours()
        finally:
            self._lock.unlock()

    def release_leaving_record(self) -> None:
        """Unlock but leave the run record ``running``: files this run could not delete are then a dead
        run's to the next run on the directory, which removes and reports them (``filetiers/deleter.py``)."""
        self._lock.unlock()

    def _remove_if_ours(self) -> None:
        try:
            with os.scandir(self.path) as entries:
                names = {entry.name for entry in entries}
        except OSError:
            return
        # Only the marker is left and it is genuine: a kvbench run made the directory, and no run holds it
        # (this one holds the lock) or keeps files in it (they would still be there), so it is kvbench's to remove.
        if names != {MARKER} or owner_of(self.path) is None:
            return
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(self.path, MARKER))
            os.rmdir(self.path)
        for directory in reversed(self._created):
            if directory != self.path:
                with contextlib.suppress(OSError):  # not empty: someone else uses it now
                    os.rmdir(directory)
