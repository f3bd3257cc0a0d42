"""Where the Redis tier connects: host/port, unix socket or URL options -> one ``Endpoint``.

Kept apart from the data path so the one place that turns options into
connection arguments is also the one place that decides what may be shown:
``str(endpoint)`` is what errors and ``describe()`` print, and it never
contains a password (the schema forbids passwords in URLs; the password itself
is read from the environment only when connecting).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from kvbench_core.contracts.errors import SpecError

DEFAULT_PORT = 6379


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One Redis server (or cluster seed node) and how to talk to it."""

    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    unix_socket: str | None = None
    db: int = 0
    username: str | None = None
    tls: bool = False

    def __str__(self) -> str:
        return f"unix:{self.unix_socket}" if self.unix_socket else f"{self.host}:{self.port}"

    @property
    def transport(self) -> str:
        return "unix socket" if self.unix_socket else "TLS" if self.tls else "TCP"

    @classmethod
    def from_options(cls, options: dict[str, Any], *, given: frozenset[str], where: str) -> Endpoint:
        """The endpoint the options name, after the cross-field rules a per-field schema cannot state.

        ``options`` carry the values (the schema's defaults filled); the rules judge ``given``, the keys the
        spec wrote: a ``url`` beside the *default* host is no clash, beside an explicit ``db: 0`` it is.
        ``where`` prefixes errors (``cache.tiers[1].options``).
        """
        _check_combinations(given, where)
        username = options.get("username")
        tls = bool(options["ssl"])
        if "url" in options:
            endpoint = cls._from_url(options["url"], where=f"{where}.url")
            endpoint = cls(endpoint.host, endpoint.port, endpoint.unix_socket, endpoint.db,
                           username or endpoint.username, tls or endpoint.tls)
        else:
            endpoint = cls(
                host=options["host"],
                port=options["port"],
                unix_socket=options.get("unix_socket"),
                db=options["db"],
                username=username,
                tls=tls,
            )
        if endpoint.unix_socket and endpoint.tls:
            raise SpecError(f"{where}: TLS (ssl / rediss://) does not apply to a unix socket")
        if options["cluster"] and (endpoint.unix_socket or endpoint.db):
            raise SpecError(f"{where}.cluster: a Redis Cluster is reached over TCP and has only db 0")
        tls_files = sorted(name for name in _TLS_FILES if name in options)
        if tls_files and not endpoint.tls:
            raise SpecError(f"{where}.{tls_files[0]}: needs TLS: set ssl: true or use a rediss:// url")
        return endpoint

    @classmethod
    def _from_url(cls, url: str, *, where: str) -> Endpoint:
        parts = urlsplit(url)
        username = unquote(parts.username) if parts.username else None
        try:
            if parts.scheme == "unix":
                if not parts.path:
                    raise ValueError("a unix:// url needs the socket path, e.g. unix:///run/redis.sock")
                db = int(parse_qs(parts.query).get("db", ["0"])[0])
                return cls(unix_socket=parts.path, db=db, username=username)
            db = int(parts.path.lstrip("/") or 0)
            return cls(parts.hostname or "127.0.0.1", parts.port or DEFAULT_PORT, None, db, username,
                       parts.scheme == "rediss")
        except ValueError as error:
            raise SpecError(f"{where}: {error}") from None


_TLS_FILES = ("ssl_ca_file", "ssl_certfile", "ssl_keyfile")
_EXCLUSIVE = (("url", ("host", "port", "unix_socket", "db")), ("unix_socket", ("host", "port")))


def _check_combinations(written: frozenset[str], where: str) -> None:
    for given, excluded in _EXCLUSIVE:
        clash = [name for name in excluded if name in written]
        if given in written and clash:
            raise SpecError(f"{where}.{clash[0]}: not allowed together with {given} (it already names the endpoint)")
