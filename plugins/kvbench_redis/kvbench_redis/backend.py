"""Redis / Valkey tier: standalone (TCP, TLS, unix socket) or Redis Cluster, through redis-py.

Layout: an entry is one or more string values ("parts") under
``{prefix}{<key>}:p<i>``.  The braces are a cluster hash tag, so every part of
an entry hashes to one slot, lives on one node, can be pipelined on one
connection and unlinked with one multi-key command.  A part is at most the
server's ``proto-max-bulk-len`` (or the smaller ``part_size`` option).  The
entries of a shared namespace are reference-counted across client processes
(``kvbench_redis.shared``).

Data path: the parts of one entry are pipelined on one pooled connection, but
not through redis-py's ``Pipeline``, which keeps every command until
``execute`` and so would hold the whole entry in memory.  A write fills part i
into the thread's reused buffer, sends it (``sendall`` returns once the kernel
holds the bytes, so the buffer is free again), fills part i+1 while the server
stores part i, and reads the replies at the end.  A read keeps a bounded number
of GETs in flight and hands each reply to the sink.  Memory per operation is
therefore one part, whatever the entry size.

L4 split: ``host`` is filling/consuming the bytes and packing SET commands;
``device`` is time in socket sends and reply reads (network round trip plus
server), which includes redis-py's reply parsing because redis-py cannot hand
a reply out without it.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from itertools import islice
from typing import Any, ClassVar

from kvbench_core.contracts.backend import BackendContext, ByteSink, ByteSource, ClientBackend, IOTiming
from kvbench_core.contracts.buffers import ThreadBuffers, consume_pieces, fill_pieces
from kvbench_core.contracts.errors import BackendUnavailable
from kvbench_core.contracts.validation import with_defaults
from kvbench_core.spec.units import DURATION_PATTERN, SIZE_PATTERN, parse_duration, parse_size
from kvbench_redis.endpoint import Endpoint
from kvbench_redis.shared import CLAIM, COMMIT, HOLD_IF_COMPLETE, RELEASE, SharedEntryKeys, SharedHolds

#: Largest piece handed to ``source.fill`` / ``sink.consume``: parts may be far larger than the
#: payload generator's piece limit, so they are filled and consumed in pieces of this size.
PIECE = 16 << 20
#: Redis's own default for proto-max-bulk-len, used when CONFIG GET is not permitted.
DEFAULT_PROTO_MAX_BULK_LEN = 512 << 20
#: Bytes of GET replies a read keeps requested ahead of the part it consumes (at least two parts).
READ_AHEAD = 64 << 20
#: Keys per UNLINK during cleanup.
UNLINK_BATCH = 512
#: Parts unlinked per round when deleting an entry whose part count this process does not know.
PROBE_PARTS = 16
#: The entries the shipped workloads name by their content, the same in every client: the synthetic source's
#: system prompts and the Mooncake trace's prefix blocks.  A conversation's turns are not among them.
SHARED_KEY_PREFIXES = ("kv_system_", "mc_block_")

_SIZE: dict[str, Any] = {
    "oneOf": [{"type": "integer", "minimum": 1}, {"type": "string", "pattern": SIZE_PATTERN}],
    "description": "a size such as 4MiB or 1048576",
}
_DURATION: dict[str, Any] = {
    "oneOf": [{"type": "number", "minimum": 0}, {"type": "string", "pattern": DURATION_PATTERN}],
    "description": "a duration such as 30s, 5m or 1h",
}
# A password may appear neither as a field nor in a URL: results embed the resolved spec.
_URL_PATTERN = r"^(rediss?://(?![^/?#]*:[^/?#]*@)|unix://)(?!.*[?&]password=)"


class RedisBackend(ClientBackend):
    """A tier on a Redis or Valkey server or cluster; entries are pipelined string parts."""

    name = "redis"
    requires: ClassVar[dict[str, str]] = {"redis": "pip install kvbench-redis"}
    options_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "additionalProperties": False,
        "propertyNames": {
            "not": {"enum": ["password", "pass", "requirepass", "auth", "secret"]},
            "description": "never put a password in the spec: name an environment variable in password_env",
        },
        "properties": {
            "host": {"type": "string", "minLength": 1, "default": "127.0.0.1",
                     "description": "server host (the seed node for a cluster)"},
            "port": {"type": "integer", "minimum": 1, "maximum": 65535, "default": 6379},
            "unix_socket": {"type": "string", "minLength": 1, "description": "path of the server's unix socket"},
            "url": {"type": "string", "pattern": _URL_PATTERN,
                    "description": "a redis://, rediss:// or unix:// URL without a password (use password_env)"},
            "db": {"type": "integer", "minimum": 0, "default": 0},
            "username": {"type": "string", "minLength": 1, "description": "ACL user name"},
            "password_env": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$",
                             "description": "the name of an environment variable holding the password"},
            "ssl": {"type": "boolean", "default": False, "description": "TLS to the server"},
            "ssl_ca_file": {"type": "string", "minLength": 1, "description": "CA bundle that signed the server"},
            "ssl_certfile": {"type": "string", "minLength": 1, "description": "client certificate (mutual TLS)"},
            "ssl_keyfile": {"type": "string", "minLength": 1, "description": "client certificate's key"},
            "ssl_check_hostname": {"type": "boolean", "default": True},
            "cluster": {"type": "boolean", "default": False,
                        "description": "the endpoint is a Redis Cluster node; entries spread over its shards"},
            "part_size": {**_SIZE, "description": "largest value per key; default: the server's proto-max-bulk-len"},
            "ttl": {**_DURATION, "default": 0, "description": "expire entries after this long (0: never)"},
            "shared_namespace": {"type": "string", "pattern": "^[A-Za-z0-9_.-]{1,64}$",
                                 "description": "a fixed key namespace shared by every process that names it, "
                                                "for the entries shared_keys selects"},
            "shared_keys": {"type": "array", "minItems": 1, "maxItems": 64, "uniqueItems": True,
                            "items": {"type": "string", "pattern": "^[A-Za-z0-9_.:-]{1,64}$"},
                            "default": list(SHARED_KEY_PREFIXES),
                            "description": "key prefixes of the entries that are the same in every client (shared "
                                           "prefixes: system prompts, Mooncake blocks); every other entry stays "
                                           "private to its run"},
            "connect_timeout": {**_DURATION, "default": "5s"},
            "socket_timeout": {**_DURATION, "default": "30s"},
        },
    }

    @classmethod
    def check_options(cls, options: dict[str, Any], tier_name: str) -> None:
        cls._endpoint(options, tier_name)

    @classmethod
    def _endpoint(cls, options: dict[str, Any], tier_name: str) -> Endpoint:
        return Endpoint.from_options(with_defaults(cls.options_schema, options), given=frozenset(options),
                                     where=f"tier '{tier_name}': options")

    def __init__(self, options: dict[str, Any], context: BackendContext) -> None:
        super().__init__(options, context)
        self.endpoint = self._endpoint(options, context.tier_name)
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
        self._expiry: tuple[Any, ...] = ("PX", max(1, round(self.ttl * 1000))) if self.ttl > 0 else ()
        self.part_size = self._requested_part_size or DEFAULT_PROTO_MAX_BULK_LEN  # final value from the server
        self.server = "unknown"
        self.nodes = 0
        # Part counts of the private entries this process wrote: deletes know what to unlink and
        # overwrites drop stale tail parts.  Shared entries are reference-counted on the server instead.
        self._parts: dict[str, int] = {}
        self._shared = SharedHolds(token="")  # a holder exists from open(), which names it
        self._lock = threading.Lock()
        self._buffers = ThreadBuffers()  # one part-sized buffer per thread, reused by every write
        self._client: Any = None
        self._redirects: tuple[type[BaseException], ...] = ()

    # -- lifecycle -----------------------------------------------------------------------------

    def open(self) -> None:
        import redis
        from redis.backoff import NoBackoff
        from redis.exceptions import AuthenticationError, MovedError, RedisClusterException, RedisError, ResponseError
        from redis.retry import Retry

        where = f"tier '{self.context.tier_name}' (redis)"
        self._shared.token = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"  # this instance, as a holder of shared entries
        password = None
        if "password_env" in self.options:
            password = os.environ.get(self.options["password_env"])
            if password is None:
                raise BackendUnavailable(
                    f"{where}: environment variable {self.options['password_env']} (password_env) is not set")
        common: dict[str, Any] = {
            "username": self.endpoint.username,
            "password": password,
            "socket_connect_timeout": parse_duration(self.options["connect_timeout"]),
            "socket_timeout": parse_duration(self.options["socket_timeout"]),
            # A benchmark must see a failure when it happens, not after retries with backoff.
            "retry": Retry(NoBackoff(), 0),
            "client_name": "kvbench",
        }
        if self.endpoint.tls:
            common.update(ssl_ca_certs=self.options.get("ssl_ca_file"), ssl_certfile=self.options.get("ssl_certfile"),
                          ssl_keyfile=self.options.get("ssl_keyfile"),
                          ssl_check_hostname=self.options["ssl_check_hostname"])
        try:
            if self.cluster:
                self._client = redis.RedisCluster(
                    host=self.endpoint.host, port=self.endpoint.port, ssl=self.endpoint.tls,
                    max_connections=self.pool_size, connection_pool_class=redis.BlockingConnectionPool, **common)
                self._redirects = (MovedError,)
            else:
                self._client = redis.Redis.from_pool(redis.BlockingConnectionPool(
                    max_connections=self.pool_size, **self._standalone_kwargs(redis), **common))
            self._client.ping()
            self.server = self._server_version()
        except AuthenticationError as error:
            self._disconnect()
            raise BackendUnavailable(f"{where}: authentication to {self.endpoint} failed: {error}") from None
        except (RedisError, RedisClusterException, OSError) as error:
            self._disconnect()
            raise BackendUnavailable(f"{where}: cannot use the server at {self.endpoint}: {error}") from None
        self.nodes = len(self._servers())
        try:
            limit = min(self._config_ints("proto-max-bulk-len") or [DEFAULT_PROTO_MAX_BULK_LEN])
        except ResponseError:  # CONFIG is often renamed or denied by ACLs on managed services
            limit = DEFAULT_PROTO_MAX_BULK_LEN
        self.part_size = min(self._requested_part_size or limit, limit)
        self.transfer_size = min(self.part_size, PIECE)
        if self.shared_prefix:
            self._check_scripting(where)

    def _check_scripting(self, where: str) -> None:
        """A shared namespace's reference counting runs Lua scripts: say so before the run, not mid-run."""
        from redis.exceptions import ResponseError

        try:
            self._client.eval("return 1", 0)
        except ResponseError as error:
            self._disconnect()
            raise BackendUnavailable(f"{where}: options.shared_namespace needs Lua scripting (EVAL) on the "
                                     f"server, refused: {error}") from None

    def _standalone_kwargs(self, redis: Any) -> dict[str, Any]:
        if self.endpoint.unix_socket:
            return {"connection_class": redis.UnixDomainSocketConnection, "path": self.endpoint.unix_socket,
                    "db": self.endpoint.db}
        return {"connection_class": redis.SSLConnection if self.endpoint.tls else redis.Connection,
                "host": self.endpoint.host, "port": self.endpoint.port, "db": self.endpoint.db}

    def _disconnect(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    # -- data path -----------------------------------------------------------------------------

    def write(self, key: str, source: ByteSource) -> IOTiming:
        return self._rerouted(self._write, key, source)

    def read(self, key: str, size: int, sink: ByteSink) -> IOTiming:
        return self._rerouted(self._read, key, size, sink)

    def read_range(self, key: str, offset: int, out: memoryview) -> None:
        if len(out):
            self._rerouted(self._read_range, key, offset, out)

    def delete(self, key: str) -> None:
        if self._is_shared(key):
            size = self._shared.drop_latest(key)
            if size is not None:  # deleting what this process does not hold touches nothing
                self._release(key, size)
            return
        with self._lock:
            known = self._parts.pop(key, None)
        batch, first = known or PROBE_PARTS, 0
        while True:
            removed = self._client.unlink(*(self._part_key(key, i) for i in range(first, first + batch)))
            if known is not None or removed < batch:
                return
            first += batch

    def lookup(self, key: str) -> int | None:
        """In a shared namespace, the size of a complete shared entry another client stored; finding it
        takes a hold, so the entry stays on the server while this process's cache indexes it."""
        if not self._is_shared(key):
            return None
        size = self._claim(key)
        if size is not None:
            self._shared.count("lookups_held")
        return size

    def _write(self, key: str, source: ByteSource) -> IOTiming:
        if self._is_shared(key):
            return self._write_shared(key, source)
        start = time.perf_counter()
        count = self._part_count(source.size)
        with self._lock:
            previous = self._parts.get(key, 0)
            self._parts[key] = max(previous, count)  # a write that fails half way is still cleaned up
        stale = [self._part_key(key, i) for i in range(count, previous)]
        tail = ("UNLINK", *stale) if stale else None
        host, device, _ = self._send_parts(key, source, [self._part_key(key, i) for i in range(count)], tail)
        with self._lock:
            self._parts[key] = count
        return IOTiming(time.perf_counter() - start, host, device, source.size, count + bool(stale))

    def _write_shared(self, key: str, source: ByteSource) -> IOTiming:
        """Store a shared entry.  One that another client committed already is held and not sent again (a
        store without a transfer, ``IOTiming.deduplicated``).  Otherwise its parts go under this writer's temp
        keys and one script renames them into place, or drops them when another client committed the same
        entry meanwhile (then this one holds that).  Two clients storing one entry at once never interleave
        parts, and every byte booked was sent."""
        start = time.perf_counter()
        size = source.size
        names = self._shared_keys(key, size)
        if self._client.eval(HOLD_IF_COMPLETE, 1, names.sizes, self._shared.token, names.base, size):
            self._shared.hold(key, size)
            self._shared.count("deduplicated")
            elapsed = time.perf_counter() - start  # the script's round trip: waiting on the server
            return IOTiming.deduplicated(elapsed, elapsed, size)
        count = self._part_count(size)
        with self._shared.lock:
            self._shared.pending[key, size] = count  # removed by close if the write stops half way
        commit = ("EVAL", COMMIT, 1, names.sizes, self._shared.token, names.base, size, count,
                  self._expiry[1] if self._expiry else 0)
        host, device, committed = self._send_parts(
            key, source, [f"{names.temp_prefix}{i}" for i in range(count)], commit)
        with self._shared.lock:
            del self._shared.pending[key, size]
        self._shared.hold(key, size)
        self._shared.count("stored" if committed else "duplicate")
        # The commit is a control round trip (in device time), not a data command: commands are the SETs.
        return IOTiming(time.perf_counter() - start, host, device, size, count)

    def _send_parts(self, key: str, source: ByteSource, names: list[str],
                    tail: tuple[Any, ...] | None) -> tuple[float, float, Any]:
        """SET ``source``'s parts under ``names`` pipelined on one connection, then the ``tail`` command;
        returns host and device seconds and the tail's reply."""
        size, part = source.size, self.part_size
        buffer = self._buffers.get(min(size, part))
        host = device = 0.0
        sent: list[tuple[int, int, float]] = []  # (offset, bytes, sent at) per SET, for per-command latency
        with self._connection(key) as connection:
            for index, name in enumerate(names):
                t0 = time.perf_counter()
                offset = index * part
                view = buffer[: min(part, size - offset)]
                fill_pieces(source, offset, view, PIECE)
                command = connection.pack_command("SET", name, view, *self._expiry)
                t1 = time.perf_counter()
                connection.send_packed_command(command)
                sent.append((offset, len(view), t1))
                host += t1 - t0
                device += time.perf_counter() - t1
            t0 = time.perf_counter()
            if tail is not None:
                connection.send_command(*tail)
            log = self.context.io_log
            for offset, nbytes, at in sent:
                connection.read_response()
                if log is not None:  # a SET's latency: sent until its reply arrived
                    log.record(key, "write", offset, nbytes, at, time.perf_counter())
            reply = connection.read_response() if tail is not None else None
            device += time.perf_counter() - t0
        return host, device, reply

    def _claim(self, key: str) -> int | None:
        """Hold the largest complete shared entry under ``key``; its size, None if there is none."""
        names = self._shared_keys(key, 0)
        found = self._client.eval(CLAIM, 1, names.sizes, self._shared.token, names.base)
        if found is None:
            return None
        self._shared.hold(key, int(found))
        return int(found)

    def _release(self, key: str, size: int) -> None:
        """Drop this process's hold on a shared entry; the last holder's release deletes it."""
        names = self._shared_keys(key, size)
        last = self._client.eval(RELEASE, 1, names.sizes, self._shared.token, names.base, size)
        self._shared.count("released")
        self._shared.count("deleted_last" if last else "kept_for_others")

    def _shared_keys(self, key: str, size: int) -> SharedEntryKeys:
        return SharedEntryKeys(f"{self.shared_prefix}{{{key}}}", size, self._shared.token)

    def _shared_size(self, key: str) -> int:
        """The size of the shared entry this process's cache indexes under ``key``."""
        size = self._shared.latest(key)
        if size is None:
            raise KeyError(f"no entry {key!r} held in tier {self.context.tier_name!r}")
        return size

    def _read(self, key: str, size: int, sink: ByteSink) -> IOTiming:
        start = time.perf_counter()
        part = self.part_size
        count = self._part_count(size)
        ahead = max(2, READ_AHEAD // part)
        host = device = 0.0
        log = self.context.io_log
        with self._connection(key) as connection:
            t0 = time.perf_counter()
            sent_at = [t0] * count  # when each GET went out, for per-command latency
            for index in range(min(ahead, count)):
                connection.send_command("GET", self._part_key(key, index, size))
            for index in range(count):
                data = connection.read_response()
                if index + ahead < count:
                    sent_at[index + ahead] = time.perf_counter()
                    connection.send_command("GET", self._part_key(key, index + ahead, size))
                t1 = time.perf_counter()
                device += t1 - t0
                offset = index * part
                self._check_part(key, index, data, min(part, size - offset))
                if log is not None:
                    log.record(key, "read", offset, min(part, size - offset), sent_at[index], t1)
                consume_pieces(sink, offset, memoryview(data), PIECE)
                t0 = time.perf_counter()
                host += t0 - t1
        return IOTiming(time.perf_counter() - start, host, device, size, count)

    def _read_range(self, key: str, offset: int, out: memoryview) -> None:
        part, end = self.part_size, offset + len(out)
        spans = [(index, max(offset, index * part) - index * part, min(end, (index + 1) * part) - index * part)
                 for index in range(offset // part, (end - 1) // part + 1)]
        log = self.context.io_log
        with self._connection(key) as connection:
            sent = time.perf_counter()
            for index, lo, hi in spans:
                connection.send_command("GETRANGE", self._part_key(key, index), lo, hi - 1)
            at = 0
            for index, lo, hi in spans:
                data = connection.read_response()
                self._check_part(key, index, data, hi - lo)
                if log is not None:  # pipelined: each GETRANGE's latency runs from the batch's send
                    log.record(key, "read", index * part + lo, hi - lo, sent, time.perf_counter())
                out[at:at + len(data)] = data
                at += len(data)

    def _check_part(self, key: str, index: int, data: bytes | None, expected: int) -> None:
        if data is None or (not data and expected):  # GET says None, GETRANGE says b"" for a missing key
            raise KeyError(f"no entry {key!r} (part {index}) in tier {self.context.tier_name!r}")
        if len(data) != expected:
            raise OSError(f"tier {self.context.tier_name!r}: part {index} of {key!r} holds {len(data)} bytes, "
                          f"expected {expected} (rewritten with another size or part_size?)")

    def _rerouted(self, operation: Callable[..., Any], *args: Any) -> Any:
        """Run a data-path operation; when a cluster slot has moved, refresh the slot map and run it again.

        Every part of an entry is in one slot, so a MOVED reply arrives before any part was stored
        or consumed and the operation can simply be repeated.
        """
        try:
            return operation(*args)
        except self._redirects:
            self._client.nodes_manager.initialize()
            return operation(*args)

    @contextmanager
    def _connection(self, key: str) -> Iterator[Any]:
        """A pooled connection to the node holding the entry; dropped instead of reused if interrupted."""
        if self.cluster:
            # Every name of an entry carries the hash tag {key}, which alone decides the slot.
            pool = self._client.get_node_from_key(f"{{{key}}}").redis_connection.connection_pool
        else:
            pool = self._client.connection_pool
        connection = pool.get_connection()
        try:
            yield connection
        except BaseException:
            connection.disconnect()  # replies may still be in flight: never give this socket to the next user
            raise
        finally:
            pool.release(connection)

    def _is_shared(self, key: str) -> bool:
        return self.shared_prefix is not None and key.startswith(self.shared_keys)

    def _part_key(self, key: str, index: int, size: int | None = None) -> str:
        """Part ``index`` of ``key``; a shared entry is named by its size too (its cache's, when not given)."""
        if not self._is_shared(key):
            return f"{self.key_prefix}{{{key}}}:p{index}"
        return f"{self._shared_keys(key, self._shared_size(key) if size is None else size).part_prefix}{index}"

    def _part_count(self, size: int) -> int:
        return max(1, -(-size // self.part_size))

    # -- server facts, cleanup -----------------------------------------------------------------

    def _servers(self) -> list[Any]:
        """One client per primary: the server itself, or every primary node of the cluster."""
        if self.cluster:
            return [node.redis_connection for node in self._client.get_primaries()]
        return [self._client]

    def _server_version(self) -> str:
        info = self._servers()[0].info("server")
        name = info.get("server_name", "redis")  # Valkey reports server_name and valkey_version
        return f"{name} {info.get(f'{name}_version', info.get('redis_version', 'unknown'))}"

    def _config_ints(self, name: str) -> list[int]:
        """A numeric CONFIG parameter on every primary (raises ResponseError when CONFIG is denied)."""
        values = []
        for server in self._servers():
            reply = server.config_get(name)
            values.append(int(reply.get(name, reply.get(name.encode(), 0))))
        return values

    def capacity_bytes(self) -> int | None:
        """The sum of the primaries' maxmemory; None when any is unlimited (0) or CONFIG is denied."""
        from redis.exceptions import ResponseError

        try:
            limits = self._config_ints("maxmemory")
        except ResponseError:
            return None
        return None if not limits or 0 in limits else sum(limits)

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
            held, pending = self._shared.take_all()
            for (key, size), count in pending.items():
                temp = self._shared_keys(key, size).temp_prefix
                self._client.unlink(*(f"{temp}{i}" for i in range(count)))
            if not self.context.keep:  # with keep_files the holds stay on the server with their entries
                for key, size in held:
                    self._release(key, size)
        finally:
            super().close()

    def _cleanup(self) -> None:
        """Unlink this run's private keys; shared entries were released by ``close``.  Never FLUSH."""
        with self._lock:
            self._parts.clear()
        keys: Iterable[Any] = self._client.scan_iter(match=_glob_escape(self.key_prefix) + "*", count=1000)
        for batch in _batches(keys, UNLINK_BATCH):
            self._client.unlink(*batch)

    def counters(self) -> dict[str, Any] | None:
        """What the shared namespace did to this process's stores and holds (see ``SharedHolds``)."""
        return {"shared": self._shared.snapshot()} if self.shared_prefix else None


def _glob_escape(text: str) -> str:
    """``text`` as a literal inside a SCAN MATCH pattern."""
    return "".join("\\" + char if char in "*?[]\\" else char for char in text)


def _batches(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    iterator = iter(items)
    while batch := list(islice(iterator, size)):
        yield batch
