"""The tier directory: where kvbench may write, and what it may delete afterwards.

A benchmark that writes and deletes thousands of files must never be pointed
at the wrong place.  The rules:

* system paths are refused outright (``/``, ``/etc``, ``/usr``, ``/proc``…, the
  home directory itself), after resolving symlinks (``kvbench_core.spec.safepaths``,
  the list the result writer obeys too);
* a directory kvbench creates gets a ``.kvbench-owner`` marker (JSON: run id,
  time, host, pid); a non-empty directory without the marker is refused unless
  the user says ``allow_nonempty: true``;
* at close the directory (and any parents kvbench created for it) is removed
  only when nothing but the marker is left in it.

Only the backend's own files are ever deleted (it tracks them), so a shared or
user-supplied directory keeps everything else.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time

from kvbench_core.contracts.errors import BackendUnavailable
from kvbench_core.spec.safepaths import refusal_reason

MARKER = ".kvbench-owner"


class TierDirectory:
    """Safety checks, creation with an owner marker, and removal of what kvbench created."""

    def __init__(self, path: str, run_id: str, *, allow_nonempty: bool, label: str) -> None:
        self.requested = path
        self.path = os.path.realpath(os.path.abspath(os.path.expanduser(path)))  # "~/kv" is the home, not ./~
        self.run_id = run_id
        self.allow_nonempty = allow_nonempty
        self.label = label  # "tier 'nvme0' (nvme)", prefixes every error
        self._created: list[str] = []  # directories this process made, outermost first

    def _unavailable(self, problem: str) -> BackendUnavailable:
        shown = self.requested if self.requested == self.path else f"{self.requested} (-> {self.path})"
        return BackendUnavailable(f"{self.label}: directory {shown} {problem}")

    def open(self) -> None:
        """Check the rules and create the directory; raise ``BackendUnavailable`` with the reason."""
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
        except PermissionError as error:
            raise self._unavailable(f"cannot be used: permission denied ({error.strerror}: {error.filename})") from None
        except NotADirectoryError:
            raise self._unavailable("has a parent that is not a directory") from None
        except OSError as error:
            raise self._unavailable(f"cannot be used: {error.strerror or error}") from None

    def _check_existing(self) -> None:
        with os.scandir(self.path) as entries:
            names = {entry.name for entry in entries}
        if names and MARKER not in names and not self.allow_nonempty:
            raise self._unavailable(
                f"is not empty ({len(names)} entries) and was not created by kvbench (no {MARKER}); "
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
        marker = {"tool": "kvbench", "run_id": self.run_id, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                  "host": socket.gethostname(), "pid": os.getpid()}
        try:
            fd = os.open(os.path.join(self.path, MARKER), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return
        with os.fdopen(fd, "w") as handle:
            json.dump(marker, handle)

    def close(self) -> None:
        """Remove the directory if kvbench made it (marker present) and only the marker is left."""
        try:
            with os.scandir(self.path) as entries:
                names = {entry.name for entry in entries}
        except OSError:
            return
        if names != {MARKER}:
            return
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(self.path, MARKER))
            os.rmdir(self.path)
        for directory in reversed(self._created):
            if directory != self.path:
                with contextlib.suppress(OSError):  # not empty: someone else uses it now
                    os.rmdir(directory)
