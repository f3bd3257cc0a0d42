"""Redis / Valkey tier: standalone (TCP, TLS, unix socket) or Redis Cluster, through redis-py.

Layout: an entry is one or more string values ("parts") under
``{prefix}{<key>}:p<i>``.  The braces are a cluster hash tag, so every part of
an entry hashes to one slot, lives on one node, can be pipelined on one
connection and unlinked with one multi-key command.  A part is at most the
server's ``proto-max-bulk-len`` (or the smaller ``part_size`` option).  The
entries of a shared namespace are reference-counted across client processes.

The tier is written on the backend kit (``PieceBackend``): a part is a piece, one SET or GET, and the kit
runs the piece loop, the host/device split, the per-command log and the abort of a write cut short; this
module says what the commands are.  It ties the parts together: ``options`` (the spec's schema),
``endpoint`` (where to connect), ``server`` (connecting, server facts, connection pools, cleanup scans),
``parts`` (an operation's connection and part names, the replies' checks), ``namespace`` and ``shared``
(the reference-counted shared entries).

A server that stops answering never holds the run past its limits: commands end at ``socket_timeout``, no
entry delete is sent while the server does not answer, and the close's cleanup of the run's private keys
waits at most ``cleanup_timeout``; the keys left then are listed in the result (``leftovers()``) and
recorded (``kvbench_core.contracts.leftovers``), for the next tier opened on the server or ``kvbench clean``.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, ClassVar

from kvbench_core.contracts.backend import BackendContext, ByteSink, ByteSource, ClientBackend, IOTiming
from kvbench_core.contracts.leftovers import ServerCleanup, Unanswered
from kvbench_core.contracts.pieces import PieceBackend
from kvbench_core.contracts.units import parse_duration, parse_size
from kvbench_core.contracts.validation import with_defaults
from kvbench_redis import server
from kvbench_redis.endpoint import Endpoint
from kvbench_redis.namespace import SharedNamespace
from kvbench_redis.options import OPTIONS_SCHEMA
from kvbench_redis.parts import PIECE, READ_AHEAD, Operation, check, part_count
from kvbench_redis.server import DEFAULT_PROTO_MAX_BULK_LEN

__all__ = ["DEFAULT_PROTO_MAX_BULK_LEN", "PIECE", "RedisBackend"]

#: Parts unlinked per round when deleting an entry whose part count this process does not know.
PROBE_PARTS = 16


class RedisBackend(PieceBackend, ClientBackend):
    """A tier on a Redis or Valkey server or cluster; entries are pipelined string parts."""

    name = "redis"
    #: Every SET of an entry goes out before the first reply is read (replies are a few bytes each).
    writes_in_flight = sys.maxsize
    requires: ClassVar[dict[str, str]] = {"redis": "pip install kvbench-redis"}
    options_schema: ClassVar[dict[str, Any]] = OPTIONS_SCHEMA

    @classmethod
    def check_options(cls, options: dict[str, Any], path: str) -> None:
        cls._endpoint(options, path)

    @classmethod
    def _endpoint(cls, options: dict[str, Any], where: str) -> Endpoint:
        return Endpoint.from_options(with_defaults(cls.options_schema, options), given=frozenset(options),
                                     where=where)

    def __init__(self, options: dict[str, Any], context: BackendContext) -> None:
        super().__init__(options, context)
        self.endpoint = self._endpoint(options, context.options_where)
        self.cluster = bool(self.options["cluster"])
        self.namespace = self.options.get("shared_namespace")
        # Only the shared entries go under the shared namespace: every client has its own u5_c1_turn_1,
        # and those collided there (a KeyError, a size mismatch) when the namespace held every key.
        self.key_prefix = f"kvbench:{context.run_id}:"
        self.shared_prefix = f"kvbench:shared:{self.namespace}:" if self.namespace else None
        self.shared_keys = tuple(self.options["shared_keys"])
        self.pool_size = max(1, context.concurrency)
        self._requested_part_size = parse_size(self.options["part_size"]) if "part_size" in self.options else None
        self.ttl = parse_duration(self.options["ttl"])
        ttl_ms = max(1, round(self.ttl * 1000)) if self.ttl > 0 else 0
        self._expiry: tuple[Any, ...] = ("PX", ttl_ms) if ttl_ms else ()
        # the final values from the server (open); transfer_size stays the kit's default until then
        self.part_size = self.piece_size = self._requested_part_size or DEFAULT_PROTO_MAX_BULK_LEN
        self.server = "unknown"
        self.nodes = 0
        # Part counts of the private entries this process wrote: deletes know what to unlink and
        # overwrites drop stale tail parts.  Shared entries are reference-counted on the server instead.
        self._parts: dict[str, int] = {}
        self._lock = threading.Lock()
        self._shared = (SharedNamespace(self.shared_prefix, self.shared_keys, ttl_ms, context.tier_name)
                        if self.shared_prefix else None)
        self._client: Any = None
        self._redirects: tuple[type[BaseException], ...] = ()
        self.cleanup_timeout_s = parse_duration(self.options["cleanup_timeout"])
        self._unanswered = Unanswered(_timeouts())
        self._cleanups = ServerCleanup(context.label("redis"), context.run_id, self.cleanup_timeout_s, "server")

    # -- lifecycle -----------------------------------------------------------------------------

    def open(self) -> None:
        where = self.context.label("redis")
        self._client, self.server = server.connect(self.endpoint, self.options, self.pool_size, where)
        self._redirects = server.redirect_errors(self.cluster)
        try:
            self.nodes = len(server.primaries(self._client, self.cluster))
            limit = server.proto_max_bulk_len(self._client, self.cluster)
            if self._shared is not None:
                server.check_scripting(self._client, where)
                # this instance, as a holder of shared entries
                self._shared.attach(self._client, f"{os.getpid()}-{uuid.uuid4().hex[:12]}")
            self._remove_recorded_leftovers()
        except BaseException:
            self._disconnect()
            raise
        self._set_part_size(min(self._requested_part_size or limit, limit))

    def _set_part_size(self, part_size: int) -> None:
        """A part is one piece command; it is filled and consumed ``PIECE`` bytes at a time, and a read
        requests ``READ_AHEAD`` bytes of parts ahead."""
        self.part_size = self.piece_size = part_size
        self.transfer_size = min(part_size, PIECE)
        self.reads_in_flight = max(2, READ_AHEAD // part_size)

    def _disconnect(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    # -- data path: the entry calls, rerouted on a moved slot, the kit's loop inside ---------------

    def write(self, key: str, source: ByteSource) -> IOTiming:
        return self._guarded(self._write, key, source)

    def read(self, key: str, size: int, sink: ByteSink) -> IOTiming:
        return self._guarded(super().read, key, size, sink)

    def read_range(self, key: str, offset: int, out: memoryview) -> None:
        self._guarded(super().read_range, key, offset, out)

    def _guarded(self, operation: Callable[..., Any], *args: Any) -> Any:
        """Run an operation watched for a server that stopped answering, again when a cluster slot moved."""
        with self._unanswered.watching():
            return server.rerouted(self._client, self._redirects, operation, *args)

    def delete(self, key: str) -> None:
        """Unlink the entry's parts; while the server does not answer, not sent (its part count stays known,
        for the close's cleanup or, failing that, the leftovers)."""
        if self._unanswered.now:
            return
        with self._unanswered.watching():
            self._delete(key)

    def _delete(self, key: str) -> None:
        if self._is_shared(key):
            self._shared.release_latest(key)  # deleting what this process does not hold touches nothing
            return
        with self._lock:
            known = self._parts.pop(key, None)
        batch, first, prefix = known or PROBE_PARTS, 0, self._part_prefix(key)
        while True:
            removed = self._client.unlink(*(f"{prefix}{i}" for i in range(first, first + batch)))
            if known is not None or removed < batch:
                return
            first += batch

    def lookup(self, key: str) -> int | None:
        """In a shared namespace, the size of a complete shared entry another client stored; finding it
        takes a hold, so the entry stays on the server while this process's cache indexes it."""
        return self._shared.claim(key) if self._is_shared(key) else None

    def _write(self, key: str, source: ByteSource) -> IOTiming:
        """A shared entry that another client committed already is held and not sent again (a store without
        a transfer, ``IOTiming.deduplicated``); any other write is the kit's, into ``begin_write``'s parts.
        The check's script is a round trip to the server: device time of the write either way."""
        if not self._is_shared(key):
            return super().write(key, source)
        start = time.perf_counter()
        held = self._shared.hold_if_complete(key, source.size)
        checked = time.perf_counter() - start
        if held:
            return IOTiming.deduplicated(checked, checked, source.size)
        timing = super().write(key, source)
        timing.total += checked
        timing.device += checked
        return timing

    # -- the kit's commands --------------------------------------------------------------------

    def begin_write(self, key: str, size: int) -> Operation:
        """A private entry's parts go under its own names, and the UNLINK of an older entry's extra parts
        follows them.  A shared entry's parts go under this writer's temp keys and one script (the commit)
        renames them into place, or drops them when another client committed the same entry meanwhile (then
        this one holds that): two clients storing one entry at once never interleave parts, and every byte
        booked was sent."""
        count = part_count(size, self.part_size)
        if self._is_shared(key):
            names, commit = self._shared.start_store(key, size, count)
            return self._operation(key, size, names.__getitem__, commit)
        with self._lock:
            previous = self._parts.get(key, 0)
            self._parts[key] = max(previous, count)  # a write that fails half way is still cleaned up
        prefix = self._part_prefix(key)
        stale = [f"{prefix}{i}" for i in range(count, previous)]
        return self._operation(key, size, lambda index: f"{prefix}{index}", ("UNLINK", *stale) if stale else None)

    def store_piece(self, handle: Operation, offset: int, data: memoryview) -> float:
        """Send one part's SET (its reply is read by ``finish_piece``); packing it is host time."""
        begin = time.perf_counter()
        command = handle.connection.pack_command("SET", handle.name(offset // self.part_size), data, *self._expiry)
        packed = time.perf_counter() - begin
        handle.connection.send_packed_command(command)
        return packed

    def finish_piece(self, handle: Operation, offset: int, size: int) -> memoryview | None:
        """The oldest reply in flight: a SET's (an error raises), or a GET's part, checked."""
        data = handle.connection.read_response()
        if handle.writing:
            return None
        self._check(data, size, offset, handle.key)
        return memoryview(data)

    def end_write(self, handle: Operation) -> int:
        """Send the command that follows the parts and read its reply; the stale parts' UNLINK is a data
        command, a shared store's commit a control round trip (in device time, not a command)."""
        committed = None
        if handle.tail is not None:
            handle.connection.send_command(*handle.tail)
            committed = handle.connection.read_response()
        handle.release()
        assert handle.size is not None
        if self._is_shared(handle.key):
            self._shared.finish_store(handle.key, handle.size, committed)
            return 0
        with self._lock:
            self._parts[handle.key] = part_count(handle.size, self.part_size)
        return 1 if handle.tail else 0

    def abort_write(self, handle: Operation) -> None:
        handle.release(broken=True)

    def begin_read(self, key: str, size: int | None) -> Operation:
        prefix = self._part_prefix(key, size)  # once: a shared entry's held size is read under its lock
        return self._operation(key, size, lambda index: f"{prefix}{index}", None, writing=False)

    def request_piece(self, handle: Operation, offset: int, size: int) -> None:
        handle.connection.send_command("GET", handle.name(offset // self.part_size))

    def load_piece(self, handle: Operation, offset: int, out: memoryview) -> memoryview:
        """A range read's command: one GETRANGE within one part (the kit cuts ranges at part boundaries)."""
        index, within = divmod(offset, self.part_size)
        handle.connection.send_command("GETRANGE", handle.name(index), within, within + len(out) - 1)
        data = handle.connection.read_response()
        self._check(data, len(out), offset, handle.key)
        return memoryview(data)

    def end_read(self, handle: Operation) -> None:
        handle.release()

    def abort_read(self, handle: Operation) -> None:
        handle.release(broken=True)

    def _operation(self, key: str, size: int | None, name: Callable[[int], str], tail: tuple[Any, ...] | None,
                   writing: bool = True) -> Operation:
        pool = server.entry_pool(self._client, self.cluster, key)
        return Operation(key, size, pool, pool.get_connection(), name, tail, writing)

    def _check(self, data: bytes | None, expected: int, offset: int, key: str) -> None:
        check(data, expected, offset // self.part_size, key, self.context.tier_name, self._expiry)

    def _is_shared(self, key: str) -> bool:
        return self._shared is not None and self._shared.covers(key)

    def _part_prefix(self, key: str, size: int | None = None) -> str:
        """What part ``i`` of ``key`` is named with ``i`` after it, worked out once per operation; a shared
        entry is named by its size too (the one this process holds, when not given)."""
        if self._is_shared(key):
            return self._shared.part_prefix(key, size)
        return f"{self.key_prefix}{{{key}}}:p"

    # -- server facts, cleanup -----------------------------------------------------------------

    def capacity_bytes(self) -> int | None:
        """The sum of the primaries' maxmemory; None when any is unlimited (0) or CONFIG is denied."""
        return server.max_memory(self._client, self.cluster)

    def describe(self) -> dict[str, Any]:
        login = "acl user" if self.endpoint.username else "password" if "password_env" in self.options else "none"
        return {
            "backend": self.name,
            "access_mechanism": f"Redis protocol (RESP) over {self.endpoint.transport} via redis-py; "
                                "parts of an entry pipelined on one connection",
            "endpoint": str(self.endpoint),
            "server": self.server,
            "cluster": self.cluster,
            "primaries": self.nodes,
            "tls": self.endpoint.tls,
            "login": login,  # not "auth": the result redactor masks credential-looking keys
            "username": self.endpoint.username,
            "part_size": self.part_size,
            "pool_size": self.pool_size,
            "ttl_s": self.ttl or None,
            "namespace": f"shared:{self.namespace}" if self.namespace else "per-run",
            "key_prefix": self.key_prefix,
            **({"shared_key_prefix": self.shared_prefix, "shared_keys": list(self.shared_keys)}
               if self.shared_prefix else {}),
        }

    def close(self) -> None:
        """A store cut short leaves temp parts that are no entry: removed even with ``keep_files``."""
        if self._client is None:
            return
        try:
            if self._shared is not None:
                self._shared.close(keep=self.context.keep)
        finally:
            super().close()

    def _cleanup(self) -> None:
        """Unlink this run's private keys, waiting at most ``cleanup_timeout``; shared entries were released
        by ``close``.  Never FLUSH.  The keys left when the deadline passes are listed and recorded."""
        with self._lock:
            parts, self._parts = dict(self._parts), {}
        self._cleanups.clean(
            self._place, lambda: server.unlink_matching(self._client, self.key_prefix),
            name=f"kvbench-redis-cleanup-{self.context.tier_name}",
            items=lambda: {"prefix": self.key_prefix, "keys": sorted(
                f"{self.key_prefix}{{{key}}}:p{i}" for key, count in parts.items() for i in range(count))},
            said=lambda left: f"{len(left['keys'])} keys left under {self.key_prefix} on {self.endpoint}")

    @property
    def _place(self) -> str:
        """Where leftovers are recorded for: the server (its endpoint and database)."""
        return f"redis {self.endpoint}/{self.endpoint.db}"

    def _remove_recorded_leftovers(self) -> None:
        """What earlier runs recorded as left on this server: unlinked (under the cleanup deadline), said.
        Only a run's private prefix: never a shared namespace, never a user's keys."""
        self._cleanups.remove_recorded(
            self._place, lambda prefix: prefix.startswith("kvbench:") and not prefix.startswith("kvbench:shared:"),
            lambda prefix: server.unlink_matching(self._client, prefix), name="kvbench-redis-leftovers",
            where=lambda prefix: f"{prefix} on {self.endpoint}", what="keys")

    def notes(self) -> list[str]:
        return list(self._cleanups.notes)

    def leftovers(self) -> dict[str, Any] | None:
        return self._cleanups.leftovers()

    def counters(self) -> dict[str, Any] | None:
        """What the shared namespace did to this process's stores and holds (see ``SharedHolds``)."""
        return {"shared": self._shared.counters()} if self._shared is not None else None


def _timeouts() -> tuple[type[BaseException], ...]:
    """redis-py's errors of a server that does not answer: timeouts and lost or refused connections."""
    from redis.exceptions import ConnectionError as NoConnection
    from redis.exceptions import TimeoutError as NoAnswer

    return (NoConnection, NoAnswer)
