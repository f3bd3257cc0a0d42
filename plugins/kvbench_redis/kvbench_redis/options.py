"""The Redis tier's options: the JSON Schema fragment a spec's ``cache.tiers[].options`` is validated against.

Kept apart so the one place that says what a spec may write (and what it may never write: a password)
is short enough to read whole.  Defaults live here once; the backend reads ``self.options[...]``.
"""

from __future__ import annotations

from typing import Any

from kvbench_core.contracts.units import duration_schema, size_schema

#: The entries the shipped workloads name by their content, the same in every client: the synthetic source's
#: system prompts and the Mooncake trace's prefix blocks.  A conversation's turns are not among them.
SHARED_KEY_PREFIXES = ("kv_system_", "mc_block_")

_SIZE = size_schema("a size such as 4MiB or 1048576")
_DURATION = duration_schema("a duration such as 30s, 5m or 1h")
# A password may appear neither as a field nor in a URL: results embed the resolved spec.
_URL_PATTERN = r"^(rediss?://(?![^/?#]*:[^/?#]*@)|unix://)(?!.*[?&]password=)"

OPTIONS_SCHEMA: dict[str, Any] = {
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
        # A description is also what a bad value's message says was expected ("ttl: expected ..."), so
        # these say what a value is, not what it does (that is in docs/tiers/redis.md).
        "part_size": {**_SIZE, "description": "a size >= 1 such as 4MiB (default: the server's "
                                              "proto-max-bulk-len)"},
        "ttl": {**_DURATION, "default": 0, "description": "a duration >= 0 such as 1h or 500ms (0: entries "
                                                          "never expire)"},
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
        "cleanup_timeout": {**_DURATION, "default": "30s",
                            "description": "the most the close's cleanup waits for the server: the keys left "
                                           "then are listed in the result and removed by the next run on the "
                                           "server, or by kvbench clean SPEC"},
    },
}
