"""Tiers that keep each entry as one file in a ``TierDirectory`` (nvme, gds): the bookkeeping they share.

The directory may hold other files (a user-supplied one with
``allow_nonempty``), so a backend deletes only the files it created.  It
tracks each file from before it exists, so a write that fails half way is
removed as well: ``new_entry_file`` is that bookkeeping, once for every file tier.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
from collections.abc import Iterator
from typing import Any, ClassVar

from kvbench_core.contracts.backend import BackendContext, StorageBackend, check_key
from kvbench_core.contracts.errors import Cancelled
from kvbench_core.filetiers import deleter
from kvbench_core.filetiers.directory import TierDirectory


class EntryFilesBackend(StorageBackend):
    """Base of a backend whose entries are ``<directory>/<run_id>-<key>.kv``.

    The subclass sets ``self.directory`` in ``__init__``, writes each entry's file
    inside ``with self.new_entry_file(key) as path`` and calls ``_remove_files()``
    from ``close``; it gets ``path_of``, ``delete`` and ``capacity_bytes``.

    Once the run's cleanup begins (``cleanup_begins``), ``delete`` leaves the file to ``close``, which
    hands every file to a background deleter (``filetiers/deleter.py``) so the result need not wait.
    """

    directory: TierDirectory
    directory_option: ClassVar[str | None] = "path"

    def __init__(self, options: dict[str, Any], context: BackendContext) -> None:
        super().__init__(options, context)
        self._files: set[str] = set()
        self._cut_short: set[str] = set()  # files of cancelled writes: deleted at close, even with keep
        self._files_lock = threading.Lock()  # writers on many threads create and delete files
        self._cleaning_up = False  # the run is over: deletes are left to close's background deleter
        self.deletion: deleter.Deletion | None = None  # close's background deletion, when it started one
        deleter.wait_for_pending()  # a previous trial's deletion still holds its directory's lock

    def path_of(self, key: str) -> str:
        """The entry's file; the key check keeps it inside the tier directory."""
        return os.path.join(self.directory.path, f"{self.context.run_id}-{check_key(key)}.kv")

    @contextlib.contextmanager
    def new_entry_file(self, key: str) -> Iterator[str]:
        """The path to (re)write ``key``'s file at, tracked as this backend's before the file exists; when
        the block raises, the file is deleted, so a half-written entry is never left behind
        (``entry_file_failed``)."""
        path = self.track_entry_file(key)
        try:
            yield path
        except BaseException as error:
            self.entry_file_failed(path, error)
            raise

    def track_entry_file(self, key: str) -> str:
        """``key``'s file path, tracked as this backend's before the file exists (``new_entry_file``'s first
        half, for a write whose end runs elsewhere: a pipelined write's fsync on a completion thread)."""
        path = self.path_of(key)
        with self._files_lock:
            self._files.add(path)
            self._cut_short.discard(path)
        return path

    def entry_file_failed(self, path: str, error: BaseException) -> None:
        """The write of ``path`` raised ``error``: the half-written file is deleted now.

        A write cancelled at the drain limit leaves its file to ``close`` instead: unlinking a multi-GiB
        file takes seconds on a busy disk (1.4 s for 2 GiB in Test 4's reproduction, issue 16), and several
        cancelled writes deleting theirs at once kept the drain 5 s past its limit."""
        if isinstance(error, Cancelled):
            with self._files_lock:
                self._cut_short.add(path)
        else:
            self._forget(path)

    def delete(self, key: str) -> None:
        if not self._cleaning_up:  # at the end of the run, the file stays tracked for close to hand over
            self._forget(self.path_of(key))

    def cleanup_begins(self) -> None:
        self._cleaning_up = True

    def _forget(self, path: str) -> None:
        """Delete one entry's file (already gone is fine) and stop tracking it."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        with self._files_lock:
            self._files.discard(path)
            self._cut_short.discard(path)

    def capacity_bytes(self) -> int | None:
        return shutil.disk_usage(self.directory.path).free

    def notes(self) -> list[str]:
        return self.directory.notes()

    def _remove_files(self) -> None:
        """At close: unless ``context.keep``, delete every file this backend created, then the
        directory if kvbench made it and nothing else is left in it; the directory is unlocked either way.
        A cancelled write's half-written file is deleted even with ``keep``."""
        with self._files_lock:
            doomed = self._cut_short if self.context.keep else self._files
            self._files, self._cut_short = self._files - doomed, set()
        if self._cleaning_up and doomed and not self.context.keep:
            self.deletion = deleter.delete_in_background(doomed, self.directory, self.context.run_id,
                                                         self.directory.label)
            return
        for path in doomed:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        self.directory.close(keep=self.context.keep)
