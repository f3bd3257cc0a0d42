"""A file tier's directory, owned and locked: which directory kvbench may delete, which run is using it,
and what a killed run left behind.

Shared by every tier that keeps entries as files (nvme, gds, the NIXL POSIX tier).  Three files, all
named by kvbench and all checked before they are believed:

* ``.kvbench-owner``: written once by the run that *created* the directory (JSON: tool, run id, host,
  pid, time).  It is proof of ownership only when it is a regular file (never a symlink: it is read
  with ``O_NOFOLLOW``) holding valid JSON with ``tool: kvbench``; only the run whose id it names may
  remove the directory, and only when nothing else is left in it.
* ``.kvbench-run-<run id>``: the run record, written while a run uses the directory (``state:
  running``), removed at close, or rewritten as ``state: kept`` when the run keeps its files on purpose.
* an exclusive ``flock`` on the directory itself, held from open to close.  The kernel drops it when the
  process dies however it dies, so a second run is refused while the first lives (naming it from its
  run record), and a ``running`` record found by whoever holds the lock belongs to a dead run.

A dead run's files are provably kvbench's when its record is a regular kvbench file and the files are
regular files named ``<run id>-*.kv`` (or its probe ``.<run id>-probe``): those are removed and
reported; anything else stays.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import stat
import time
from dataclasses import dataclass

OWNER_MARKER = ".kvbench-owner"
RUN_RECORD_PREFIX = ".kvbench-run-"
#: A marker or record is a few hundred bytes; anything larger is not kvbench's.
_MAX_RECORD_BYTES = 4096


class DirectoryBusy(Exception):
    """Another live run holds the directory's lock; the message names it."""


@dataclass(frozen=True)
class RunRecord:
    """What a kvbench file says about the run that wrote it."""

    run_id: str
    pid: int
    host: str
    created: str
    state: str = "running"

    def describe(self) -> str:
        return f"run {self.run_id} (pid {self.pid} on {self.host}, since {self.created})"


@dataclass(frozen=True)
class StaleRun:
    """A dead run's record and the files of it that were removed."""

    record: RunRecord
    files: int
    nbytes: int
    removed: bool = True

    def describe(self) -> str:
        if not self.removed:
            return (f"left alone the files of {self.record.describe()}: it holds no lock but its pid is alive, "
                    "so they are not provably a dead run's")
        return (f"removed {self.files} files ({self.nbytes} B) left by {self.record.describe()}, "
                "which ended without cleaning up (killed?)")


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def new_record(run_id: str, state: str = "running") -> RunRecord:
    return RunRecord(run_id=run_id, pid=os.getpid(), host=socket.gethostname(), created=_now(), state=state)


def read_record(path: str) -> RunRecord | None:
    """The record in ``path`` if it is a regular file kvbench wrote; None for a symlink, a dangling link,
    a directory, a foreign or malformed file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > _MAX_RECORD_BYTES:
            return None
        data = json.loads(os.read(fd, _MAX_RECORD_BYTES))
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    if not isinstance(data, dict) or data.get("tool") != "kvbench":
        return None
    run_id, pid = data.get("run_id"), data.get("pid")
    if not isinstance(run_id, str) or not run_id or not isinstance(pid, int) or isinstance(pid, bool):
        return None
    return RunRecord(run_id=run_id, pid=pid, host=str(data.get("host", "?")), created=str(data.get("created", "?")),
                     state=str(data.get("state", "running")))


def write_record(path: str, record: RunRecord, *, exclusive: bool) -> bool:
    """Write ``record`` to ``path`` (never through a symlink); with ``exclusive``, False if it exists."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_EXCL if exclusive else os.O_TRUNC)
    try:
        fd = os.open(path, flags, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as handle:
        json.dump({"tool": "kvbench", "run_id": record.run_id, "pid": record.pid, "host": record.host,
                   "created": record.created, "state": record.state}, handle)
    return True


def owner_of(directory: str) -> RunRecord | None:
    """The run that created ``directory``, if its owner marker is a genuine one."""
    return read_record(os.path.join(directory, OWNER_MARKER))


def mark_created(directory: str, run_id: str) -> bool:
    """Put this run's owner marker into the directory it just created; False if one is already there."""
    return write_record(os.path.join(directory, OWNER_MARKER), new_record(run_id), exclusive=True)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class DirectoryLock:
    """This run's exclusive hold on a tier directory, with its run record; see the module docstring."""

    def __init__(self, directory: str, run_id: str) -> None:
        self.directory = directory
        self.run_id = run_id
        self.record_path = os.path.join(directory, f"{RUN_RECORD_PREFIX}{run_id}")
        self._fd: int | None = None

    def acquire(self) -> list[StaleRun]:
        """Lock the directory and write the run record; returns the dead runs whose files were removed.

        Raises ``DirectoryBusy`` naming the live run that holds the lock."""
        fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            os.close(fd)
            if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            holders = [record.describe() for record in self._records() if record.state == "running"]
            raise DirectoryBusy(f"is in use by {' and '.join(holders) or 'another kvbench run'}; "
                                "wait for it to end or give this run another directory") from None
        self._fd = fd
        try:
            stale = [self._remove_stale(record) for record in self._records()
                     if record.state == "running" and record.run_id != self.run_id]
            write_record(self.record_path, new_record(self.run_id), exclusive=False)
        except BaseException:
            self.drop_record(keep=False)
            self.unlock()
            raise
        return stale

    def drop_record(self, *, keep: bool) -> None:
        """Remove the run record, or with ``keep`` mark it kept (its entries stay on purpose)."""
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            if keep:
                write_record(self.record_path, new_record(self.run_id, state="kept"), exclusive=False)
            else:
                os.unlink(self.record_path)

    def unlock(self) -> None:
        """Let the next run in (after the directory was tidied, so it never sees a half-removed one)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _records(self) -> list[RunRecord]:
        found = []
        with os.scandir(self.directory) as entries:
            for entry in entries:
                if entry.name.startswith(RUN_RECORD_PREFIX):
                    record = read_record(entry.path)
                    if record is not None and entry.name == f"{RUN_RECORD_PREFIX}{record.run_id}":
                        found.append(record)
        return found

    def _remove_stale(self, record: RunRecord) -> StaleRun:
        """Remove a dead run's own files (we hold the lock, so it no longer does) and its record.

        A record whose pid still lives on this host is left alone and only reported: the lock says the
        run is over, but a pid that lives is not proof enough to delete anything."""
        if record.host == socket.gethostname() and _pid_alive(record.pid):
            return StaleRun(record, 0, 0, removed=False)
        files = nbytes = 0
        entry_prefix, probe = f"{record.run_id}-", f".{record.run_id}-probe"
        with os.scandir(self.directory) as entries:
            for entry in entries:
                ours = (entry.name.startswith(entry_prefix) and entry.name.endswith(".kv")) or entry.name == probe
                if ours and entry.is_file(follow_symlinks=False):
                    size = entry.stat(follow_symlinks=False).st_size
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(entry.path)
                        files += 1
                        nbytes += size
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(self.directory, f"{RUN_RECORD_PREFIX}{record.run_id}"))
        return StaleRun(record, files, nbytes)
