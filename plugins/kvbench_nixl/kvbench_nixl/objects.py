"""Where NIXL's OBJ backend puts an entry: one S3 object per transfer-size piece, named after the entry.

NIXL's OBJ backend writes whole objects only (a write at a non-zero offset is
an error) and reads ranges, and it has no delete, list or bucket operation.
So an entry of ``size`` bytes is ``ceil(size / transfer_size)`` objects
``<prefix>kvbench/<run_id>/<key>.p<i>``, each written by one descriptor of a
NIXL request (up to ``queue_depth`` PUTs in flight per entry), and the control
plane (credentials chain, bucket check or creation, deletes, cleanup of the
run's prefix) is the s3 tier's ``S3Backend`` on the same bucket and endpoint.
The suffix ``.p<i>`` makes names unambiguous: keys cannot contain ``/`` and a
key's pieces always end in ``.p`` and digits.

Each object is registered with NIXL as an ``OBJ`` segment (device id -> object
key) when its entry is written and deregistered when it is deleted: that is
NIXL's bookkeeping of where bytes go, not memory registration (the payload
memory is the tier's arena, registered once).
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from kvbench_core.contracts.backend import check_key
from kvbench_nixl.library import Agent

Descriptor = tuple[int, int, int]


@dataclass
class StoredEntry:
    """An entry's objects as NIXL knows them: their device ids and the registration that maps them."""

    dev_ids: list[int]
    registration: Any


class ObjectPieces:
    """The entries of this run as objects: names, NIXL registrations, deletes through the control plane."""

    def __init__(self, agent: Agent, control: Any, piece_bytes: int) -> None:
        self.agent = agent
        self.control = control  # an opened kvbench_s3 S3Backend: bucket, prefix, deletes, cleanup
        self.piece_bytes = piece_bytes
        self._entries: dict[str, StoredEntry] = {}
        self._lock = threading.Lock()
        self._dev_ids = itertools.count(1)

    @staticmethod
    def piece_name(key: str, index: int) -> str:
        return f"{check_key(key)}.p{index}"

    def object_name(self, key: str, index: int) -> str:
        """The full object key of piece ``index`` (what the bucket listing shows)."""
        return self.control.key_prefix + self.piece_name(key, index)

    @contextlib.contextmanager
    def writing(self, key: str, size: int) -> Iterator[Callable[[int, int], Descriptor]]:
        """Register the objects ``key`` is written to and yield ``descriptor(offset, n)``, the remote
        side of the piece at ``offset``.  When the write succeeds they become the entry's objects
        (and an overwritten entry's surplus objects are deleted); when it fails, the entry is gone."""
        count = max(1, -(-size // self.piece_bytes))
        with self._lock:
            dev_ids = [next(self._dev_ids) for _ in range(count)]
        # A zero-byte entry is still one (empty) object; NIXL refuses zero-length registrations.
        pieces = [(0, max(1, min(self.piece_bytes, size - i * self.piece_bytes)), dev_id, self.object_name(key, i))
                  for i, dev_id in enumerate(dev_ids)]
        entry = StoredEntry(dev_ids, self.agent.register(pieces, "OBJ"))

        def descriptor(offset: int, n: int) -> Descriptor:
            return (0, n, dev_ids[offset // self.piece_bytes])

        try:
            yield descriptor
        except BaseException:
            self.agent.deregister(entry.registration)
            self.delete(key)  # an overwrite that failed half way leaves no usable old entry either
            self._delete_objects(key, range(count))
            raise
        with self._lock:
            old = self._entries.get(key)
            self._entries[key] = entry
        if old is not None:
            self.agent.deregister(old.registration)
            self._delete_objects(key, range(count, len(old.dev_ids)))

    def read_descriptor(self, key: str) -> Callable[[int, int], Descriptor]:
        """The remote side of reading ``n`` bytes at ``offset`` of ``key`` (within one piece)."""
        with self._lock:
            entry = self._entries.get(key)
        if entry is None:
            raise FileNotFoundError(f"no entry {key!r} in this tier")

        def descriptor(offset: int, n: int) -> Descriptor:
            return (offset % self.piece_bytes, n, entry.dev_ids[offset // self.piece_bytes])

        return descriptor

    def delete(self, key: str) -> None:
        with self._lock:
            entry = self._entries.pop(key, None)
        if entry is not None:
            self.agent.deregister(entry.registration)
            self._delete_objects(key, range(len(entry.dev_ids)))

    def _delete_objects(self, key: str, indices: range) -> None:
        for index in indices:
            self.control.delete(self.piece_name(key, index))

    def close(self) -> None:
        """Deregister every entry (the objects themselves go with the control plane's cleanup)."""
        with self._lock:
            entries, self._entries = list(self._entries.values()), {}
        for entry in entries:
            self.agent.deregister(entry.registration)
