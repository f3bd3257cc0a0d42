"""Per-command I/O log: one JSONL line for every device command a file tier issues.

kvio validates a projection against what really happened.  A tier that was
given ``BackendContext.io_log`` calls ``record`` once per ``pread``/``pwrite``
(or equivalent) with the cache key; the log stamps the key's ``trace_id`` so
the validator can join each command to the KV object that caused it, the way
LMCache's raw_block engine plants ``trace_id`` in the high half of io_uring's
``user_data``.  The manifest supplies the key -> trace_id map; without one the
id is derived from the key, so a run and a later manifest agree.  An object
that is part of an entry (a codec stage's segment) carries its entry's id.

The log never replaces a file kvbench did not create: it is opened with
``O_EXCL`` (and ``O_NOFOLLOW``), except that a later trial of the same session
rewrites the log its first trial created.

Lines go through the file object's buffer (bounded, ``BUFFER_BYTES``), under
a lock because many tier threads record at once; ``close`` flushes.

A run's log also says where each command ran: the ``tier``, the ``thread`` that issued it and the
``request`` (``u<user>.<seq>``) whose storage steps that thread was running, which the executor names in
``CURRENT_REQUEST``; ``kvbench export --to perfetto`` draws a track per tier and thread from them and
a flow from each request to its commands (docs/export-perfetto.md).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping
from types import TracebackType

from kvbench_core.contracts.errors import InputFileError
from kvbench_core.contracts.payload import entry_id_for

TRACE_ID_BITS = 32
BUFFER_BYTES = 1 << 20
#: The request whose storage steps this thread runs (``RequestExecutor.execute`` sets ``id``); a command a
#: tier issues from a thread of its own (an upload pool) has none.
CURRENT_REQUEST = threading.local()
#: Logs this process created: the next trial of the same session may truncate its own log, nothing else.
_CREATED: set[str] = set()


def _open_flags(path: str) -> int:
    """Create the log (never through a symlink, never over an existing file) unless this process made it."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    return flags | (os.O_TRUNC if os.path.realpath(path) in _CREATED else os.O_EXCL)


def trace_id_for(key: str) -> int:
    """A stable 32-bit id for ``key`` (it must fit the high half of a 64-bit ``user_data``).

    Never 0: tracers read ``trace_id`` 0 as untagged traffic.
    """
    return (entry_id_for(key) & ((1 << TRACE_ID_BITS) - 1)) or 1


def _where(tier: str | None) -> str:
    """The ``tier``, ``thread`` and ``request`` fields of a run's command ('' outside a run: a replay)."""
    if tier is None:
        return ""
    request = getattr(CURRENT_REQUEST, "id", None)
    return (f',"tier":{json.dumps(tier)},"thread":{json.dumps(threading.current_thread().name)},'
            f'"request":{json.dumps(request)}')


class IOLog:
    """Thread-safe JSONL writer of ``{trace_id, key, op, offset, bytes, start_s, end_s}`` records, plus
    ``requested`` and ``align`` where the tier asked for another length than the syscall returned
    (docs/kvio.md, "the I/O log")."""

    def __init__(self, path: str, trace_ids: Mapping[str, int] | None = None) -> None:
        path = os.path.expanduser(path)
        self.path = path
        self._trace_ids = trace_ids or {}
        self._lock = threading.Lock()
        try:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            fd = os.open(path, _open_flags(path), 0o644)
        except FileExistsError:
            raise InputFileError(f"{path}: the I/O log exists and kvbench did not create it; kvbench never "
                                 "overwrites a file it did not create: remove it or name a new file") from None
        except OSError as error:
            raise InputFileError(f"{path}: cannot write the I/O log: {error.strerror or error}") from None
        _CREATED.add(os.path.realpath(path))
        self._file = open(fd, "w", encoding="utf-8", buffering=BUFFER_BYTES)  # noqa: SIM115 - see close()

    def record(self, key: str, op: str, offset: int, nbytes: int, start_s: float, end_s: float,
               requested: int | None = None, align: int | None = None, *, owner: str | None = None,
               tier: str | None = None) -> None:
        """Log one device command of ``op`` (``write``/``read``) on object ``key``: ``nbytes`` is what the
        syscall returned; ``requested`` the length it was asked for and ``align`` the alignment that length
        was rounded to (an O_DIRECT tail), given only when the tier rounded it.  ``owner`` is the entry the
        object belongs to where they differ (a codec stage's segment ``key.kvcN``): the trace id is the
        entry's, so ``kvbench score`` joins every segment's commands to it; the logged key stays the object's.
        ``tier`` (a run's recorder gives it) adds the tier, the issuing thread and its request."""
        entry = key if owner is None else owner
        trace_id = self._trace_ids.get(entry) or trace_id_for(entry)
        asked = "" if requested is None else f',"requested":{requested},"align":{align}'
        line = (f'{{"trace_id":{trace_id},"key":{json.dumps(key)},"op":{json.dumps(op)},"offset":{offset},'
                f'"bytes":{nbytes}{asked},"start_s":{start_s:.9f},"end_s":{end_s:.9f}{_where(tier)}}}\n')
        with self._lock:
            self._file.write(line)

    def close(self) -> None:
        with self._lock:
            self._file.close()

    def __enter__(self) -> IOLog:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()
