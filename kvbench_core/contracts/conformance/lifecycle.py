"""The checks of what a backend owns over its life: ``close()`` removes every entry the run created, and a
dead endpoint fails in ``open()`` with ``BackendUnavailable``; with the probes that find leftovers."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from kvbench_core.contracts.backend import BackendContext, StorageBackend
from kvbench_core.contracts.conformance.harness import BackendHarness, CheckSkipped
from kvbench_core.contracts.conformance.probes import write_entry
from kvbench_core.contracts.errors import BackendUnavailable

#: The entries ``check_cleanup`` writes (the first is deleted again before ``close()``).
CLEANUP_KEYS = ("cl0", "cl1", "cl2")


def check_cleanup(harness: BackendHarness) -> str:
    """``close()`` removes every entry the run created (``keep`` is false)."""
    if harness.remaining_entries is None:
        raise CheckSkipped("no remaining_entries() probe given for this backend")
    backend = harness.factory(harness.context())
    backend.open()
    try:
        for index, key in enumerate(CLEANUP_KEYS):
            write_entry(harness, backend, key, 4096 * (index + 1) + 1)
        backend.delete(CLEANUP_KEYS[0])
    finally:
        backend.close()
    left = list(harness.remaining_entries(backend))
    if left:
        raise AssertionError(f"close() left {len(left)} entries behind: {left[:5]}")
    return "nothing left"


def reopen_probe(factory: Callable[[BackendContext], StorageBackend]) -> Callable[[StorageBackend], list[str]]:
    """A ``remaining_entries`` probe for any backend, for when its own listing is not at hand (the command
    line): open a second backend on the closed one's context (same run id, so the same directory, prefix
    or namespace) and try to read one byte of each entry ``check_cleanup`` wrote.  An entry that still
    reads was left behind; one that raises is gone.  The probe's own ``close()`` then removes leftovers."""

    def remaining(closed: StorageBackend) -> list[str]:
        probe = factory(closed.context)
        probe.open()
        try:
            left = []
            for key in CLEANUP_KEYS:
                try:
                    probe.read_range(key, 0, memoryview(bytearray(1)))
                except Exception:  # any failure to read means the entry is not there
                    continue
                left.append(key)
            return left
        finally:
            probe.close()

    return remaining


def remaining_files(root: str | os.PathLike[str]) -> list[str]:
    """Every file under ``root`` (relative paths): the ``remaining_entries`` probe of directory tiers."""
    base = Path(root)
    if not base.exists():
        return []
    return sorted(str(path.relative_to(base)) for path in base.rglob("*") if path.is_file())


def check_dead_endpoint(harness: BackendHarness) -> str:
    """A backend pointed at a dead endpoint fails in ``open()`` with ``BackendUnavailable``."""
    if harness.dead_factory is None:
        raise CheckSkipped("no dead-endpoint backend given for this backend")
    backend = harness.dead_factory(harness.context())
    try:
        backend.open()
    except BackendUnavailable as error:
        return str(error)
    except Exception as error:
        raise AssertionError(f"open() on a dead endpoint raised {type(error).__name__}: {error}; "
                             "expected kvbench_core.contracts.errors.BackendUnavailable") from error
    backend.close()
    raise AssertionError("open() on a dead endpoint succeeded; expected BackendUnavailable")
