"""Reaching the Redis server: connecting (standalone or cluster), its facts, pooled connections, cleanup scans.

Everything here talks to redis-py's client object and knows nothing of entries or parts, so the data path
(``kvbench_redis.parts``) and the shared namespace (``kvbench_redis.namespace``) read as what they do.
redis-py is imported only inside the functions: listing plugins must not need it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from itertools import islice
from typing import Any

from kvbench_core.contracts.errors import BackendUnavailable
from kvbench_core.contracts.units import parse_duration
from kvbench_redis.endpoint import Endpoint

#: Redis's own default for proto-max-bulk-len, used when CONFIG GET is not permitted.
DEFAULT_PROTO_MAX_BULK_LEN = 512 << 20
#: Keys per UNLINK during cleanup.
UNLINK_BATCH = 512


def connect(endpoint: Endpoint, options: dict[str, Any], pool_size: int, where: str) -> tuple[Any, str]:
    """A pinged client for ``endpoint`` with ``pool_size`` pooled connections (per node for a cluster), and
    the server's name and version.

    The password is read from the environment variable ``password_env`` names, here and nowhere else.
    A failure is ``BackendUnavailable`` naming the endpoint, never the password.
    """
    import redis
    from redis.backoff import NoBackoff
    from redis.exceptions import AuthenticationError, RedisClusterException, RedisError
    from redis.retry import Retry

    password = None
    if "password_env" in options:
        password = os.environ.get(options["password_env"])
        if password is None:
            raise BackendUnavailable(
                f"{where}: environment variable {options['password_env']} (password_env) is not set")
    common: dict[str, Any] = {
        "username": endpoint.username,
        "password": password,
        "socket_connect_timeout": parse_duration(options["connect_timeout"]),
        "socket_timeout": parse_duration(options["socket_timeout"]),
        # A benchmark must see a failure when it happens, not after retries with backoff.
        "retry": Retry(NoBackoff(), 0),
        "client_name": "kvbench",
    }
    if endpoint.tls:
        common.update(ssl_ca_certs=options.get("ssl_ca_file"), ssl_certfile=options.get("ssl_certfile"),
                      ssl_keyfile=options.get("ssl_keyfile"), ssl_check_hostname=options["ssl_check_hostname"])
    client = None
    try:
        if options["cluster"]:
            client = redis.RedisCluster(host=endpoint.host, port=endpoint.port, ssl=endpoint.tls,
                                        max_connections=pool_size,
                                        connection_pool_class=redis.BlockingConnectionPool, **common)
        else:
            client = redis.Redis.from_pool(redis.BlockingConnectionPool(
                max_connections=pool_size, **_standalone_kwargs(redis, endpoint), **common))
        client.ping()
        return client, server_version(client, bool(options["cluster"]))
    except AuthenticationError as error:
        _close_quietly(client)
        raise BackendUnavailable(f"{where}: authentication to {endpoint} failed: {error}") from None
    except (RedisError, RedisClusterException, OSError) as error:
        _close_quietly(client)
        raise BackendUnavailable(f"{where}: cannot use the server at {endpoint}: {error}") from None


def _standalone_kwargs(redis: Any, endpoint: Endpoint) -> dict[str, Any]:
    if endpoint.unix_socket:
        return {"connection_class": redis.UnixDomainSocketConnection, "path": endpoint.unix_socket,
                "db": endpoint.db}
    return {"connection_class": redis.SSLConnection if endpoint.tls else redis.Connection,
            "host": endpoint.host, "port": endpoint.port, "db": endpoint.db}


def _close_quietly(client: Any) -> None:
    if client is not None:
        client.close()


def redirect_errors(cluster: bool) -> tuple[type[BaseException], ...]:
    """The replies that mean "the slot moved, ask again": MOVED on a cluster, none on a standalone server."""
    if not cluster:
        return ()
    from redis.exceptions import MovedError

    return (MovedError,)


def check_scripting(client: Any, where: str) -> None:
    """A shared namespace's reference counting runs Lua scripts: say so before the run, not mid-run."""
    from redis.exceptions import ResponseError

    try:
        client.eval("return 1", 0)
    except ResponseError as error:
        raise BackendUnavailable(f"{where}: options.shared_namespace needs Lua scripting (EVAL) on the "
                                 f"server, refused: {error}") from None


def rerouted(client: Any, redirects: tuple[type[BaseException], ...], operation: Callable[..., Any],
             *args: Any) -> Any:
    """Run a data-path operation; when a cluster slot has moved, refresh the slot map and run it again.

    Every part of an entry is in one slot, so a MOVED reply arrives before any part was stored
    or consumed and the operation can simply be repeated.
    """
    try:
        return operation(*args)
    except redirects:
        client.nodes_manager.initialize()
        return operation(*args)


def entry_pool(client: Any, cluster: bool, key: str) -> Any:
    """The connection pool of the node holding the entry ``key``: an operation takes one connection from it
    for all its commands and gives it back (``kvbench_redis.parts.Operation.release``)."""
    if cluster:
        # Every name of an entry carries the hash tag {key}, which alone decides the slot.
        return client.get_node_from_key(f"{{{key}}}").redis_connection.connection_pool
    return client.connection_pool


def primaries(client: Any, cluster: bool) -> list[Any]:
    """One client per primary: the server itself, or every primary node of the cluster."""
    if cluster:
        return [node.redis_connection for node in client.get_primaries()]
    return [client]


def server_version(client: Any, cluster: bool) -> str:
    info = primaries(client, cluster)[0].info("server")
    name = info.get("server_name", "redis")  # Valkey reports server_name and valkey_version
    return f"{name} {info.get(f'{name}_version', info.get('redis_version', 'unknown'))}"


def config_ints(client: Any, cluster: bool, name: str) -> list[int]:
    """A numeric CONFIG parameter on every primary (raises ResponseError when CONFIG is denied)."""
    values = []
    for server in primaries(client, cluster):
        reply = server.config_get(name)
        values.append(int(reply.get(name, reply.get(name.encode(), 0))))
    return values


def proto_max_bulk_len(client: Any, cluster: bool) -> int:
    """The largest value every primary takes: the smallest ``proto-max-bulk-len``, Redis's default when
    CONFIG is renamed or denied by ACLs (as on many managed services)."""
    from redis.exceptions import ResponseError

    try:
        return min(config_ints(client, cluster, "proto-max-bulk-len") or [DEFAULT_PROTO_MAX_BULK_LEN])
    except ResponseError:
        return DEFAULT_PROTO_MAX_BULK_LEN


def max_memory(client: Any, cluster: bool) -> int | None:
    """The sum of the primaries' maxmemory; None when any is unlimited (0) or CONFIG is denied."""
    from redis.exceptions import ResponseError

    try:
        limits = config_ints(client, cluster, "maxmemory")
    except ResponseError:
        return None
    return None if not limits or 0 in limits else sum(limits)


def unlink_matching(client: Any, prefix: str) -> None:
    """Unlink every key that starts with ``prefix`` (SCAN MATCH, the prefix glob-escaped); never FLUSH."""
    keys: Iterable[Any] = client.scan_iter(match=_glob_escape(prefix) + "*", count=1000)
    for batch in _batches(keys, UNLINK_BATCH):
        client.unlink(*batch)


def _glob_escape(text: str) -> str:
    """``text`` as a literal inside a SCAN MATCH pattern."""
    return "".join("\\" + char if char in "*?[]\\" else char for char in text)


def _batches(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    iterator = iter(items)
    while batch := list(islice(iterator, size)):
        yield batch
