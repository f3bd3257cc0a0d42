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

For the duration of one operation the entry's objects are registered with the
operation's agent as ``OBJ`` segments (device id -> object key): NIXL's
bookkeeping of where the bytes go, not memory registration (the payload memory
is the lane's arena, registered once).  Per operation, because every lane has
an agent of its own and any of them may read an entry another one wrote.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import threading
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

from kvbench_s3.backend import S3Backend

from kvbench_core.contracts.backend import BackendContext, check_key
from kvbench_core.contracts.errors import Cancelled
from kvbench_nixl.library import Agent
from kvbench_nixl.transfer import Descriptor


class ObjectPieces:
    """The entries of this run as objects: names, sizes, per-operation NIXL registration, deletes."""

    def __init__(self, control: Any, piece_bytes: int) -> None:
        self.control = control  # an opened kvbench_s3 S3Backend: bucket, prefix, deletes, cleanup
        self.piece_bytes = piece_bytes
        self._sizes: dict[str, int] = {}
        self._lock = threading.Lock()
        self._dev_ids = itertools.count(1)

    @staticmethod
    def piece_name(key: str, index: int) -> str:
        return f"{check_key(key)}.p{index}"

    def _count(self, size: int) -> int:
        return max(1, -(-size // self.piece_bytes))

    @contextlib.contextmanager
    def _registered(self, agent: Agent, key: str, size: int) -> Iterator[Callable[[int, int], Descriptor]]:
        """The entry's objects registered with ``agent``; yields ``descriptor(offset, n)``, the remote side
        of the ``n`` bytes at ``offset`` (which lie within one piece)."""
        count = self._count(size)
        with self._lock:
            dev_ids = [next(self._dev_ids) for _ in range(count)]
        # NIXL refuses zero-length registrations; an empty entry is still one (empty) object.
        pieces = [(0, max(1, min(self.piece_bytes, size - i * self.piece_bytes)), dev_id,
                   self.control.key_prefix + self.piece_name(key, i)) for i, dev_id in enumerate(dev_ids)]
        registration = agent.register(pieces, "OBJ")
        try:
            yield lambda offset, n: (offset % self.piece_bytes, n, dev_ids[offset // self.piece_bytes])
        finally:
            agent.deregister(registration)

    @contextlib.contextmanager
    def writing(self, agent: Agent, key: str, size: int) -> Iterator[Callable[[int, int], Descriptor]]:
        """Registered objects to write ``key`` to.  When the write succeeds they are the entry (and an
        overwritten entry's surplus objects are deleted); when it fails, the entry is gone.

        A failed write deletes only the objects it was given descriptors for (the others were never sent);
        a cancelled one deletes none: the run is ending and its close removes the prefix in batches, while
        one DeleteObject per piece here, inside the operation, outlived the drain's cancel grace (a
        GB entry is thousands of pieces) and the run's figures were read with the write still booking."""
        sent = [0]  # pieces 0 .. sent-1 may exist: a descriptor was handed out for them

        def tracked(descriptor: Callable[[int, int], Descriptor], offset: int, n: int) -> Descriptor:
            sent[0] = max(sent[0], offset // self.piece_bytes + 1)
            return descriptor(offset, n)

        try:
            with self._registered(agent, key, size) as descriptor:
                yield functools.partial(tracked, descriptor)
        except Cancelled:
            with self._lock:
                self._sizes.pop(key, None)  # an overwrite cancelled half way leaves no usable old entry
            raise
        except BaseException:
            with contextlib.suppress(Exception):  # best effort: the run's prefix is cleaned up at close anyway
                self.delete(key)  # an overwrite that failed half way leaves no usable old entry either
                self._delete_objects(key, range(sent[0]))
            raise
        with self._lock:
            old = self._sizes.get(key)
            self._sizes[key] = size
        if old is not None:
            self._delete_objects(key, range(self._count(size), self._count(old)))

    @contextlib.contextmanager
    def reading(self, agent: Agent, key: str) -> Iterator[Callable[[int, int], Descriptor]]:
        """Registered objects of ``key`` to read from; ``FileNotFoundError`` when there is no such entry."""
        with self._lock:
            size = self._sizes.get(key)
        if size is None:
            raise FileNotFoundError(f"no entry {key!r} in this tier")
        with self._registered(agent, key, size) as descriptor:
            yield descriptor

    def delete(self, key: str) -> None:
        with self._lock:
            size = self._sizes.pop(key, None)
        if size is not None:
            self._delete_objects(key, range(self._count(size)))

    def _delete_objects(self, key: str, indices: range) -> None:
        for index in indices:
            self.control.delete(self.piece_name(key, index))


def open_bucket(options: dict[str, Any], context: BackendContext) -> tuple[S3Backend, dict[str, str]]:
    """Open the control plane on the tier's bucket (credentials chain, bucket check or creation) and return
    it with the OBJ plugin's parameters, credentials included: they go to NIXL in memory, nowhere else."""
    import boto3

    control_options = {key: options[key] for key in ("bucket", "endpoint_url", "region", "profile",
                                                      "create_bucket", "prefix") if key in options}
    control_options["addressing_style"] = "virtual" if options["virtual_addressing"] else "path"
    control = S3Backend(control_options, context)
    control.open()
    session = boto3.session.Session(profile_name=options.get("profile"), region_name=options.get("region"))
    frozen = session.get_credentials().get_frozen_credentials()  # the chain control.open() just vetted
    params = {"bucket": options["bucket"], "access_key": frozen.access_key, "secret_key": frozen.secret_key,
              "use_virtual_addressing": "true" if options["virtual_addressing"] else "false",
              "region": options.get("region") or session.region_name or "us-east-1"}
    if frozen.token:
        params["session_token"] = frozen.token
    if "endpoint_url" in options:
        params["endpoint_override"] = options["endpoint_url"]
        params["scheme"] = urlsplit(options["endpoint_url"]).scheme
    return control, params
