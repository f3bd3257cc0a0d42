"""One backend instance's view of a shared Redis namespace: which keys are shared, what their entries are
called on the server, and the scripts of ``kvbench_redis.shared`` run for this instance as one holder.

The backend decides when to store, read or delete; this class says how a shared entry is found, held,
committed and released, and counts what happened (``SharedHolds``).
"""

from __future__ import annotations

from typing import Any

from kvbench_redis.shared import (
    CLAIM,
    COMMIT,
    EXPIRED_BEFORE_COMMIT,
    HOLD_IF_COMPLETE,
    RELEASE,
    SharedEntryKeys,
    SharedHolds,
)


class SharedNamespace:
    """The entries under ``prefix`` whose keys start with one of ``key_prefixes``, reference-counted."""

    def __init__(self, prefix: str, key_prefixes: tuple[str, ...], ttl_ms: int, tier_name: str) -> None:
        self.prefix = prefix  # "kvbench:shared:<name>:"
        self.tier_name = tier_name
        self.key_prefixes = key_prefixes
        self.ttl_ms = ttl_ms  # 0: entries never expire
        self.holds = SharedHolds(token="")  # a holder exists from ``attach``, which names it
        self._client: Any = None

    def attach(self, client: Any, token: str) -> None:
        """Use ``client`` for the scripts, as the holder ``token`` (one per backend instance)."""
        self._client = client
        self.holds.token = token

    def covers(self, key: str) -> bool:
        return key.startswith(self.key_prefixes)

    def names(self, key: str, size: int) -> SharedEntryKeys:
        return SharedEntryKeys(f"{self.prefix}{{{key}}}", size, self.holds.token)

    def part_prefix(self, key: str, size: int | None = None) -> str:
        """The name of the entry ``key``'s parts less their index, for ``size`` bytes (default: the size this
        instance holds)."""
        return self.names(key, self.held_size(key) if size is None else size).part_prefix

    def held_size(self, key: str) -> int:
        """The size of the shared entry this process's cache indexes under ``key``."""
        size = self.holds.latest(key)
        if size is None:
            raise KeyError(f"no entry {key!r} held in tier {self.tier_name!r}")
        return size

    # -- stores --------------------------------------------------------------------------------------------
    def hold_if_complete(self, key: str, size: int) -> bool:
        """Hold the entry when another client committed it already (then a store need send nothing)."""
        names = self.names(key, size)
        if not self._client.eval(HOLD_IF_COMPLETE, 1, names.sizes, self.holds.token, names.base, size):
            return False
        self.holds.hold(key, size)
        self.holds.count("deduplicated")
        return True

    def start_store(self, key: str, size: int, count: int) -> tuple[list[str], tuple[Any, ...]]:
        """The temp part names a store of ``count`` parts sends to, and the commit command that follows them
        on the same connection.  Until ``finish_store`` the temp parts are pending (close removes them)."""
        names = self.names(key, size)
        with self.holds.lock:
            self.holds.pending[key, size] = count
        commit = ("EVAL", COMMIT, 1, names.sizes, self.holds.token, names.base, size, count, self.ttl_ms)
        return [f"{names.temp_prefix}{i}" for i in range(count)], commit

    def finish_store(self, key: str, size: int, committed: Any) -> None:
        """The commit's reply: this store became the entry, or another client's commit won (held either way),
        or a temp part expired before the commit (an ``OSError``: nothing is held, nothing left behind)."""
        with self.holds.lock:
            del self.holds.pending[key, size]
        if committed == EXPIRED_BEFORE_COMMIT:
            raise OSError(f"tier {self.tier_name!r}: the parts of {key!r} expired before their commit "
                          f"(ttl {self.ttl_ms} ms is shorter than the store took)")
        self.holds.hold(key, size)
        self.holds.count("stored" if committed else "duplicate")

    # -- lookups and releases ------------------------------------------------------------------------------
    def claim(self, key: str) -> int | None:
        """Hold the largest complete shared entry under ``key``; its size, None if there is none."""
        names = self.names(key, 0)
        found = self._client.eval(CLAIM, 1, names.sizes, self.holds.token, names.base)
        if found is None:
            return None
        self.holds.hold(key, int(found))
        self.holds.count("lookups_held")
        return int(found)

    def release_latest(self, key: str) -> None:
        """The cache deleted the entry it indexes under ``key``: drop that hold (nothing if none is held)."""
        size = self.holds.drop_latest(key)
        if size is not None:
            self._release(key, size)

    def _release(self, key: str, size: int) -> None:
        """Drop this process's hold on a shared entry; the last holder's release deletes it."""
        names = self.names(key, size)
        last = self._client.eval(RELEASE, 1, names.sizes, self.holds.token, names.base, size)
        self.holds.count("released")
        self.holds.count("deleted_last" if last else "kept_for_others")

    def close(self, keep: bool) -> None:
        """Remove the temp parts of stores cut short (no entry, so even with ``keep``), and release every
        hold unless ``keep`` (then the holds stay on the server with their entries)."""
        held, pending = self.holds.take_all()
        for (key, size), count in pending.items():
            temp = self.names(key, size).temp_prefix
            self._client.unlink(*(f"{temp}{i}" for i in range(count)))
        if not keep:
            for key, size in held:
                self._release(key, size)

    def counters(self) -> dict[str, int]:
        return self.holds.snapshot()
