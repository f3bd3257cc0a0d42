"""The redis tier against a real standalone redis-server: layout, sizes, cleanup, failures, TLS, auth."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import redis
from kvbench_redis.backend import DEFAULT_PROTO_MAX_BULK_LEN, PIECE, RedisBackend
from redis_servers import RedisServer, free_port

from kvbench_core.contracts.backend import DISCARD, BackendContext, StorageBackend
from kvbench_core.contracts.conformance import BackendConformance
from kvbench_core.contracts.errors import BackendUnavailable, SpecError
from kvbench_core.contracts.payload import NoisePool
from kvbench_core.contracts.plugins import registry
from kvbench_core.engine.run.factory import create_backend

pytestmark = pytest.mark.redis

PART = 4096  # forced part size: multi-part entries stay small
Open = Callable[..., RedisBackend]
Verify = Callable[[RedisBackend, str, int], None]


class TestRedisConformance(BackendConformance):
    """The core's conformance suite, through the real selection path, with 64 KiB parts."""

    backend_name = "redis"

    @pytest.fixture(autouse=True)
    def _server(self, redis_server: RedisServer) -> None:
        self.server = redis_server

    def make_backend(self, context: BackendContext, tmp_path: Path) -> StorageBackend:
        options = {"port": self.server.port, "part_size": "64KiB"}
        return create_backend({"name": "redis0", "backend": "redis", "options": options}, context)

    def remaining_entries(self, backend: StorageBackend) -> Iterable[str]:
        return [key.decode() for key in self.server.client().scan_iter(match=f"{backend.key_prefix}*")]

    def make_dead_backend(self, context: BackendContext, tmp_path: Path) -> StorageBackend:
        return create_backend({"name": "redis0", "backend": "redis", "options": {"port": free_port()}}, context)


def part_keys(server: RedisServer, backend: RedisBackend, key: str) -> list[str]:
    """The server's parts of ``key`` (of any size, for a shared entry)."""
    shared = backend._is_shared(key)
    pattern = f"{backend.shared_prefix}{{{key}}}:s*:p[0-9]*" if shared else f"{backend.key_prefix}{{{key}}}:p*"
    return sorted(k.decode() for k in server.client().scan_iter(match=pattern))


@pytest.mark.parametrize("size", [1, PART - 1, PART, PART + 1, 3 * PART + 17])
def test_entries_are_stored_as_part_keys_and_read_back_byte_exact(
        size: int, redis_server: RedisServer, open_backend: Open, pool: NoisePool, verify: Verify) -> None:
    backend = open_backend({"port": redis_server.port, "part_size": PART})
    timing = backend.write("entry", pool.payload("entry", size))
    parts = -(-size // PART)
    assert timing.commands == parts and timing.nbytes == size
    assert timing.host > 0 and timing.device > 0 and timing.host + timing.device <= timing.total
    assert part_keys(redis_server, backend, "entry") == sorted(f"{backend.key_prefix}{{entry}}:p{i}"
                                                               for i in range(parts))
    verify(backend, "entry", size)


def test_the_part_size_follows_the_servers_proto_max_bulk_len(
        start_server: Callable[..., RedisServer], redis_server: RedisServer, open_backend: Open,
        pool: NoisePool, verify: Verify) -> None:
    default = open_backend({"port": redis_server.port})
    assert (default.part_size, default.transfer_size) == (DEFAULT_PROTO_MAX_BULK_LEN, PIECE)

    small = start_server("--proto-max-bulk-len", "1mb")
    backend = open_backend({"port": small.port, "part_size": "8MiB"})  # more than the server takes: clamped
    assert backend.part_size == 1 << 20 and backend.describe()["part_size"] == 1 << 20
    size = (5 << 20) // 2
    assert backend.write("big", pool.payload("big", size)).commands == 3
    verify(backend, "big", size)


def test_an_overwrite_with_fewer_parts_leaves_no_stale_parts(
        redis_server: RedisServer, open_backend: Open, pool: NoisePool, verify: Verify) -> None:
    backend = open_backend({"port": redis_server.port, "part_size": PART})
    backend.write("entry", pool.payload("entry", 5 * PART))
    timing = backend.write("entry", pool.payload("entry", PART + 1))
    assert timing.commands == 3  # two SETs and one UNLINK of the three stale parts
    assert len(part_keys(redis_server, backend, "entry")) == 2
    verify(backend, "entry", PART + 1)


def test_deleted_entries_are_gone_and_deleting_twice_or_never_written_is_fine(
        redis_server: RedisServer, open_backend: Open, pool: NoisePool) -> None:
    backend = open_backend({"port": redis_server.port, "part_size": PART})
    backend.write("entry", pool.payload("entry", 3 * PART))
    backend.delete("entry")
    assert part_keys(redis_server, backend, "entry") == []
    with pytest.raises(KeyError, match="no entry 'entry'"):
        backend.read("entry", 3 * PART, DISCARD)
    with pytest.raises(KeyError):
        backend.read_range("entry", 10, memoryview(bytearray(10)))
    backend.delete("entry")
    backend.delete("never-written")


def test_a_shared_entry_goes_with_its_last_holder_all_parts_at_once(
        redis_server: RedisServer, open_backend: Open, pool: NoisePool) -> None:
    """Was: another process's delete removed the writer's entry (and so pulled it from under the writer's
    cache, the shipped redis-shared-prefix spec's KeyError).  A process that holds nothing removes nothing;
    the last holder's delete removes every part, its meta and holders keys."""
    options = {"port": redis_server.port, "part_size": PART, "shared_namespace": "probe-delete"}
    writer, other = open_backend(options), open_backend(options)
    # (issue 19: only shared entries, named by their content, live in the shared namespace)
    writer.write("kv_system_1", pool.payload("kv_system_1", 40 * PART))
    other.delete("kv_system_1")  # holds nothing
    assert len(part_keys(redis_server, writer, "kv_system_1")) == 40
    writer.delete("kv_system_1")
    assert part_keys(redis_server, writer, "kv_system_1") == []
    assert list(redis_server.client().scan_iter(match="kvbench:shared:probe-delete:*")) == []


def test_read_range_spans_parts(redis_server: RedisServer, open_backend: Open, pool: NoisePool) -> None:
    backend = open_backend({"port": redis_server.port, "part_size": PART})
    size = 3 * PART + 100
    backend.write("entry", pool.payload("entry", size))
    expected = np.empty(size, dtype=np.uint8)
    pool.payload("entry", size).fill(0, memoryview(expected))
    for offset, length in [(0, 1), (PART - 5, 10), (10, 2 * PART + 7), (size - 3, 3)]:
        out = bytearray(length)
        backend.read_range("entry", offset, memoryview(out))
        assert bytes(out) == expected[offset:offset + length].tobytes()


def test_ttl_sets_an_expiry_on_every_part(redis_server: RedisServer, open_backend: Open, pool: NoisePool) -> None:
    backend = open_backend({"port": redis_server.port, "part_size": PART, "ttl": "90s"})
    backend.write("entry", pool.payload("entry", 2 * PART))
    ttls = [redis_server.client().pttl(key) for key in part_keys(redis_server, backend, "entry")]
    assert len(ttls) == 2 and all(0 < ttl <= 90_000 for ttl in ttls)
    assert backend.describe()["ttl_s"] == 90


def test_capacity_auto_is_the_servers_maxmemory(
        start_server: Callable[..., RedisServer], redis_server: RedisServer, open_backend: Open) -> None:
    limited = start_server("--maxmemory", "64mb")
    assert open_backend({"port": limited.port}).capacity_bytes() == 64 << 20
    assert open_backend({"port": redis_server.port}).capacity_bytes() is None  # maxmemory 0: unlimited


def test_close_removes_this_runs_keys_and_nothing_else(
        redis_server: RedisServer, open_backend: Open, pool: NoisePool) -> None:
    client = redis_server.client()
    # The run id holds glob characters: an unescaped SCAN MATCH would also take the look-alike key.
    foreign = ["user:1", "kvbench:other-run:{a}:p0", "kvbench:r1x:{a}:p0"]
    for key in foreign:
        client.set(key, b"theirs")
    backend = open_backend({"port": redis_server.port, "part_size": PART}, run_id="r[1]*")
    for index in range(5):
        backend.write(f"e{index}", pool.payload(f"e{index}", (index + 1) * PART))
    backend.close()
    assert [key.decode() for key in client.scan_iter(match="kvbench:r\\[1\\]\\**")] == []
    assert all(client.get(key) == b"theirs" for key in foreign)
    client.delete(*foreign)


def test_keep_leaves_the_entries_for_inspection(
        redis_server: RedisServer, open_backend: Open, pool: NoisePool) -> None:
    backend = open_backend({"port": redis_server.port}, keep=True)
    backend.write("kept", pool.payload("kept", 100))
    backend.close()
    key = f"{backend.key_prefix}{{kept}}:p0"
    assert redis_server.client().strlen(key) == 100
    redis_server.client().delete(key)


def test_what_an_earlier_run_recorded_as_left_is_unlinked_at_open_and_said(
        redis_server: RedisServer, open_backend: Open, pool: NoisePool, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A run whose cleanup could not reach the server recorded its keys (``ServerCleanup``); the next tier
    opened on that server unlinks them, drops the record and says so, and touches nothing else."""
    from kvbench_core.contracts.leftovers import Leftovers, pending, record

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    dead = open_backend({"port": redis_server.port}, keep=True)
    dead.write("lost", pool.payload("lost", 100))
    dead.close()
    redis_server.client().set("user:mine", b"theirs")
    place = f"redis {dead.endpoint}/{dead.endpoint.db}"
    lost = f"{dead.key_prefix}{{lost}}:p0"
    record(Leftovers(place, dead.context.run_id, {"prefix": dead.key_prefix, "keys": [lost]}))
    record(Leftovers(place, "user", {"prefix": "user:", "keys": ["user:mine"]}))  # not a run's: never removed
    backend = open_backend({"port": redis_server.port})
    assert list(redis_server.client().scan_iter(match=f"{dead.key_prefix}*")) == []
    assert redis_server.client().get("user:mine") == b"theirs"
    assert [left.run_id for left in pending(place)] == ["user"]
    assert backend.notes() == [f"tier 'redis0' (redis): removed what run {dead.context.run_id} left under "
                               f"{dead.key_prefix} on {dead.endpoint} (1 keys listed)"]
    redis_server.client().delete("user:mine")


def test_the_unix_socket_is_a_first_class_endpoint(
        redis_server: RedisServer, open_backend: Open, pool: NoisePool, verify: Verify) -> None:
    backend = open_backend({"unix_socket": redis_server.unix_socket, "part_size": PART})
    backend.write("entry", pool.payload("entry", 2 * PART + 1))
    verify(backend, "entry", 2 * PART + 1)
    info = backend.describe()
    assert info["endpoint"] == f"unix:{redis_server.unix_socket}" and "unix socket" in info["access_mechanism"]


def test_url_form_reaches_the_same_server(redis_server: RedisServer, open_backend: Open, pool: NoisePool,
                                         verify: Verify) -> None:
    backend = open_backend({"url": f"redis://127.0.0.1:{redis_server.port}/3", "part_size": PART})
    backend.write("entry", pool.payload("entry", PART + 1))
    verify(backend, "entry", PART + 1)
    assert redis.Redis(port=redis_server.port, db=3).exists(f"{backend.key_prefix}{{entry}}:p1") == 1


def test_a_server_that_is_not_running_is_unavailable_naming_the_endpoint(tmp_path: Path, unused_port: int) -> None:
    for options, endpoint in (({"port": unused_port}, f"127.0.0.1:{unused_port}"),
                              ({"unix_socket": str(tmp_path / "nope.sock")}, f"unix:{tmp_path / 'nope.sock'}")):
        backend = RedisBackend(options, BackendContext(tier_name="redis0", run_id="r"))
        with pytest.raises(BackendUnavailable, match=f"tier 'redis0' \\(redis\\): .*{endpoint}"):
            backend.open()


def test_a_server_killed_mid_use_fails_the_operation(
        start_server: Callable[..., RedisServer], open_backend: Open, pool: NoisePool) -> None:
    server = start_server()
    backend = open_backend({"port": server.port, "part_size": PART})
    backend.write("before", pool.payload("before", 2 * PART))
    server.kill()
    with pytest.raises((redis.ConnectionError, OSError)):
        backend.write("after", pool.payload("after", 2 * PART))
    with pytest.raises((redis.ConnectionError, OSError)):
        backend.read("before", 2 * PART, DISCARD)
    backend._client.close()  # nothing left to clean up on a dead server
    backend._client = None


def _strings_of(error: BaseException) -> str:
    return "".join(traceback.format_exception(error)) + repr(error.args)


def test_password_comes_from_the_environment_and_never_shows(
        start_server: Callable[..., RedisServer], open_backend: Open, pool: NoisePool,
        monkeypatch: pytest.MonkeyPatch, verify: Verify) -> None:
    secret = "kvb-s3cret-Pa55word"
    server = start_server("--user", "default", "off", "--user", "kvuser", "on", f">{secret}", "~*", "&*", "+@all",
                          client_kwargs={"username": "kvuser", "password": secret})
    options = {"port": server.port, "username": "kvuser", "password_env": "KVB_TEST_REDIS_PASSWORD",
               "part_size": PART}
    seen: list[str] = []

    with pytest.raises(BackendUnavailable, match="KVB_TEST_REDIS_PASSWORD") as unset:
        open_backend(options)
    seen.append(_strings_of(unset.value))
    monkeypatch.setenv("KVB_TEST_REDIS_PASSWORD", secret + "-wrong")
    with pytest.raises(BackendUnavailable, match="authentication") as wrong:
        open_backend(options)
    seen.append(_strings_of(wrong.value))

    monkeypatch.setenv("KVB_TEST_REDIS_PASSWORD", secret)
    backend = open_backend(options)
    backend.write("entry", pool.payload("entry", PART + 1))
    verify(backend, "entry", PART + 1)
    with pytest.raises(KeyError) as missing:
        backend.read("missing", 1, DISCARD)
    seen += [_strings_of(missing.value), json.dumps(backend.describe()), repr(backend.options)]
    assert backend.describe()["login"] == "acl user" and backend.describe()["username"] == "kvuser"
    assert not [text for text in seen if secret in text]


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is needed to make a test certificate")
def test_tls_with_a_ca_file(start_server: Callable[..., RedisServer], open_backend: Open, pool: NoisePool,
                            tmp_path: Path, verify: Verify) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    server = start_server("--tls-cert-file", str(cert), "--tls-key-file", str(key), "--tls-ca-cert-file",
                          str(cert), "--tls-auth-clients", "no", tls=True)
    backend = open_backend({"port": server.port, "ssl": True, "ssl_ca_file": str(cert), "part_size": PART})
    backend.write("entry", pool.payload("entry", PART + 1))
    verify(backend, "entry", PART + 1)
    assert backend.describe()["tls"] is True and "TLS" in backend.describe()["access_mechanism"]
    with pytest.raises(BackendUnavailable, match=f"127.0.0.1:{server.port}"):  # TLS port, plain client
        open_backend({"port": server.port})


def test_describe_declares_the_access_path_without_secrets(redis_server: RedisServer, open_backend: Open) -> None:
    info = open_backend({"port": redis_server.port, "part_size": PART}, concurrency=6).describe()
    assert info["server"].startswith(("redis 7", "redis 8", "valkey"))
    assert (info["endpoint"], info["cluster"], info["part_size"], info["pool_size"], info["login"]) == (
        f"127.0.0.1:{redis_server.port}", False, PART, 6, "none")
    assert info["namespace"] == "per-run" and info["key_prefix"].startswith("kvbench:")


def tier(**options: Any) -> dict[str, Any]:
    return {"name": "redis0", "backend": "redis", "options": options}


@pytest.mark.parametrize(("options", "message"), [
    ({"password": "x"}, "tier.options: never put a password in the spec: name an environment variable"),
    ({"url": "redis://user:pw@host:6379/0"}, "tier.options.url: expected a redis://, rediss:// or unix:// URL "
                                             "without a password"),
    ({"url": "redis://host/0?password=pw"}, "tier.options.url: expected"),
    ({"url": "redis://h:1", "port": 2}, "tier.options.port: not allowed together with url"),
    # written at its default value, still written: refused like any other (a filled default never is)
    ({"url": "redis://h:6380/2", "db": 0}, "tier.options.db: not allowed together with url"),
    ({"unix_socket": "/s", "host": "h"}, "options.host: not allowed together with unix_socket"),
    ({"ssl_ca_file": "/ca.pem"}, "options.ssl_ca_file: needs TLS"),
    ({"cluster": True, "unix_socket": "/s"}, "options.cluster: a Redis Cluster is reached over TCP"),
    ({"unix_socket": "/s", "ssl": True}, "does not apply to a unix socket"),
    ({"part_size": "lots"}, 'tier.options.part_size: expected a size >= 1 such as 4MiB (default: the '
                            'server\'s proto-max-bulk-len), got "lots"'),
    # the option's description is the expectation: it once read "expected expire entries after this long"
    ({"ttl": "-1s"}, 'tier.options.ttl: expected a duration >= 0 such as 1h or 500ms (0: entries never '
                     'expire), got "-1s"'),
    ({"ttl": -1}, "tier.options.ttl: expected a value >= 0, got -1"),
    ({"shared_namespace": "a b"}, "tier.options.shared_namespace"),
])
def test_bad_options_are_spec_errors(options: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match=re.escape(message)):
        create_backend(tier(**options), BackendContext(tier_name="redis0", run_id="r"))


def test_url_forms_resolve_to_endpoints() -> None:
    context = BackendContext(tier_name="redis0", run_id="r")
    tls = create_backend(tier(url="rediss://kv%40user@cache.example:6380/2", ssl_ca_file="/ca.pem"), context)
    assert (str(tls.endpoint), tls.endpoint.db, tls.endpoint.username, tls.endpoint.tls) == (
        "cache.example:6380", 2, "kv@user", True)
    unix = create_backend(tier(url="unix:///run/redis.sock?db=4"), context)
    assert (str(unix.endpoint), unix.endpoint.db) == ("unix:/run/redis.sock", 4)
    shared = create_backend(tier(shared_namespace="prompts"), context)
    assert shared.shared_prefix == "kvbench:shared:prompts:"  # was key_prefix: private keys now stay per-run


def test_the_plugin_is_found_through_its_entry_point_without_importing_redis() -> None:
    assert registry("backend")["redis"] is RedisBackend
    probe = ("import sys, kvbench_redis.plugin as p; p.kvbench_storage_backends(); "
             "assert 'redis' not in sys.modules, 'redis imported at selection'")
    subprocess.run([sys.executable, "-c", probe], check=True)


def test_a_shared_namespace_shares_only_the_prefix_entries(redis_server: RedisServer, open_backend: Open,
                                                           pool: NoisePool) -> None:
    """Issue 19: with every key in the shared namespace, three clients' own ``u5_c1_turn_1`` collided
    (a KeyError on a shared key, a size mismatch).  Private entries stay under each run's prefix."""
    options = {"port": redis_server.port, "part_size": PART, "shared_namespace": "only-prefix"}
    first, second = open_backend(options, run_id="client-0"), open_backend(options, run_id="client-1")
    first.write("u5_c1_turn_1", pool.payload("u5_c1_turn_1", 3 * PART))
    second.write("u5_c1_turn_1", pool.payload("u5_c1_turn_1", PART + 1))  # another size: no collision
    first.read("u5_c1_turn_1", 3 * PART, DISCARD)
    second.read("u5_c1_turn_1", PART + 1, DISCARD)
    assert second.lookup("u5_c1_turn_1") is None  # never adopted from another client
    for shared in ("kv_system_0123456789abcdef", "mc_block_42"):
        first.write(shared, pool.payload(shared, 2 * PART))
        assert second.lookup(shared) == 2 * PART
    assert part_keys(redis_server, first, "u5_c1_turn_1") == [f"kvbench:client-0:{{u5_c1_turn_1}}:p{i}"
                                                              for i in range(3)]
    first.close()
    # Was "the writer removed its own": now second's lookups hold the shared entries, so they outlive the
    # writer and go with their last holder.
    assert len(part_keys(redis_server, second, "kv_system_0123456789abcdef")) == 2
    assert len(part_keys(redis_server, second, "u5_c1_turn_1")) == 2
    second.close()
    assert list(redis_server.client().scan_iter(match="kvbench:shared:only-prefix:*")) == []
