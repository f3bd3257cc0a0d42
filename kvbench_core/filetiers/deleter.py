"""Deleting a file tier's entries after the run, while the result is written (issue 32 §4).

Unlinking is slow where the filesystem frees extents and discards them on the way (about 1 s per GiB on
this machine's ext4 mounted ``discard``; four deleting threads were no faster), and a 30 s run spent up
to 7 s of its wall time there after the drain, before its result existed.  So a file tier's ``close``
hands its files to one background thread and returns: the result and the reports are written while it
unlinks.  Nothing is left behind because:

* the thread is not a daemon, and the session joins every deletion (``finish_all``) before it returns,
  so the process does not exit before the files are gone (a signal stops the run, not the join; only
  the third, which leaves at once, skips it);
* the directory stays locked, its run record ``running``, until the last file is gone: a process killed
  mid-deletion leaves a dead run's files, which the next run on the directory removes and reports
  (``filetiers/dirlock.py``); so does a file the thread could not delete (its record is left behind);
* a new file tier waits for the deletions still running before it opens (the next trial on the same
  directory would otherwise find it locked).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from kvbench_core.filetiers.directory import TierDirectory


@dataclass
class Deletion:
    """One tier's end-of-run deletion: what it removed, how long it took, what it could not remove."""

    run_id: str
    label: str
    files: int = 0
    nbytes: int = 0
    seconds: float = 0.0
    failed: list[str] = field(default_factory=list)  # "path: reason", one per file left behind
    thread: threading.Thread | None = None

    def warnings(self, directory: str) -> list[str]:
        """The result's warnings for the files this deletion could not remove (none when it removed all)."""
        if not self.failed:
            return []
        return [f"{self.label}: could not delete {len(self.failed)} entry files (first: {self.failed[0]}); "
                f"the next run on {directory} removes them"]


_pending: list[tuple[Deletion, TierDirectory]] = []
_pending_lock = threading.Lock()


def delete_in_background(paths: Iterable[str], directory: TierDirectory, run_id: str, label: str) -> Deletion:
    """Start unlinking ``paths`` on a thread of its own; the directory is closed (unlocked, its record
    dropped) once they are all gone, or unlocked with its record left for the next run when some are not."""
    deletion = Deletion(run_id=run_id, label=label)
    doomed = list(paths)
    deletion.thread = threading.Thread(target=_delete, args=(doomed, directory, deletion),
                                       name=f"kvbench-delete-{label}", daemon=False)
    with _pending_lock:
        _pending.append((deletion, directory))
    deletion.thread.start()
    return deletion


def _delete(paths: list[str], directory: TierDirectory, deletion: Deletion) -> None:
    start = time.perf_counter()
    try:
        for path in paths:
            try:
                size = os.stat(path).st_size
                os.unlink(path)
            except FileNotFoundError:
                continue
            except OSError as error:
                deletion.failed.append(f"{path}: {error.strerror or error}")
                continue
            deletion.files += 1
            deletion.nbytes += size
    finally:
        deletion.seconds = time.perf_counter() - start
        if deletion.failed:
            directory.release_leaving_record()
        else:
            with contextlib.suppress(OSError):
                directory.close()


def finish_all() -> list[tuple[Deletion, str]]:
    """Wait for every background deletion started so far; each with its tier directory's path, once."""
    with _pending_lock:
        finished, _pending[:] = list(_pending), []
    for deletion, _ in finished:
        if deletion.thread is not None:
            deletion.thread.join()
    return [(deletion, directory.path) for deletion, directory in finished]


def wait_for_pending() -> None:
    """Before a file tier opens: let the deletions still running finish (they keep their directory
    locked), keeping them for ``finish_all`` to report."""
    with _pending_lock:
        running = [deletion.thread for deletion, _ in _pending if deletion.thread is not None]
    for thread in running:
        thread.join()
