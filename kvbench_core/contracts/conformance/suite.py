"""The pytest face of the conformance suite: the class a tier's test module subclasses, and its fixtures."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import numpy as np

from kvbench_core.contracts.backend import BackendContext, StorageBackend
from kvbench_core.contracts.conformance.checks import CHECKS
from kvbench_core.contracts.conformance.harness import BackendHarness, CheckSkipped
from kvbench_core.contracts.conformance.lifecycle import remaining_files
from kvbench_core.contracts.payload import NoisePool, VerifySink
from kvbench_core.contracts.plugins import new_backend


def substitute_tmp_path(value: Any, tmp_path: Path) -> Any:
    """``value`` with every "{tmp_path}" in its strings replaced by ``tmp_path`` (the tier's options)."""
    if isinstance(value, str):
        return value.replace("{tmp_path}", str(tmp_path))
    if isinstance(value, dict):
        return {key: substitute_tmp_path(item, tmp_path) for key, item in value.items()}
    if isinstance(value, list):
        return [substitute_tmp_path(item, tmp_path) for item in value]
    return value




class BackendConformance:
    """Subclass in a tier's test module; set ``backend_name`` and ``backend_options`` (see module doc)."""

    #: Name the backend is registered under (``kvbench_storage_backends``).
    backend_name: ClassVar[str] = ""
    #: The tier's ``options``; the string "{tmp_path}" inside values becomes pytest's ``tmp_path``.
    backend_options: ClassVar[dict[str, Any]] = {}
    #: Optional override of the round-trip sizes: ``f(transfer_size) -> [sizes]``.
    sizes: ClassVar[Callable[[int], list[int]] | None] = None

    def make_backend(self, context: BackendContext, tmp_path: Path) -> StorageBackend:
        """The unopened backend under test; by default through the same factory a run spec uses."""
        return new_backend(self.backend_name, substitute_tmp_path(self.backend_options, tmp_path), context,
                           path=f"{type(self).__name__}.backend_options")

    def remaining_entries(self, backend: StorageBackend) -> Iterable[str] | None:
        """Override: what ``backend`` (already closed) left stored.  None skips the cleanup check."""
        return None

    def make_dead_backend(self, context: BackendContext, tmp_path: Path) -> StorageBackend | None:
        """Override: a backend whose ``open()`` must raise ``BackendUnavailable``.  None skips the check."""
        return None

    def conformance_harness(self, tmp_path: Path) -> BackendHarness:
        """The harness the checks run against, assembled from the hooks above."""
        probe_defined = type(self).remaining_entries is not BackendConformance.remaining_entries
        dead_defined = type(self).make_dead_backend is not BackendConformance.make_dead_backend

        def remaining(backend: StorageBackend) -> Iterable[str]:
            return self.remaining_entries(backend) or []

        def dead(context: BackendContext) -> StorageBackend:
            backend = self.make_dead_backend(context, tmp_path)
            if backend is None:
                raise CheckSkipped("make_dead_backend() returned None on this machine")
            return backend

        sizes = type(self).sizes
        return BackendHarness(
            factory=lambda context: self.make_backend(context, tmp_path),
            remaining_entries=remaining if probe_defined else None,
            dead_factory=dead if dead_defined else None,
            sizes=sizes,
        )

    def pytest_generate_tests(self, metafunc: Any) -> None:
        """pytest hook (found on the class): one ``test_conformance`` case per check."""
        if "conformance_check" in metafunc.fixturenames:
            metafunc.parametrize("conformance_check", list(CHECKS))

    def test_conformance(self, conformance_check: str, tmp_path: Path) -> None:
        import pytest

        try:
            CHECKS[conformance_check](self.conformance_harness(tmp_path))
        except CheckSkipped as skipped:
            pytest.skip(str(skipped))


class FileTierConformance(BackendConformance):
    """For a tier that owns a directory (its class sets ``directory_option``): the cleanup check lists that
    directory, and the dead endpoint is the same tier with its directory under a plain file."""

    def _directory_option(self) -> str:
        from kvbench_core.contracts.plugins import registry

        option = registry("backend")[self.backend_name].directory_option
        if not option:
            raise TypeError(f"{self.backend_name} declares no directory_option: use BackendConformance")
        return option

    def remaining_entries(self, backend: StorageBackend) -> Iterable[str] | None:
        return remaining_files(backend.options[self._directory_option()])

    def make_dead_backend(self, context: BackendContext, tmp_path: Path) -> StorageBackend | None:
        (tmp_path / "plain-file").write_text("not a directory")
        options = {**substitute_tmp_path(self.backend_options, tmp_path),
                   self._directory_option(): str(tmp_path / "plain-file" / "tier")}
        return new_backend(self.backend_name, options, context, path="tier")


# --- helpers for a tier's own tests -----------------------------------------------------------

B = TypeVar("B", bound=StorageBackend)


@contextmanager
def backend_opener(cls: Callable[[dict[str, Any], BackendContext], B], tier_name: str) -> Iterator[Callable[..., B]]:
    """``make(options, *, run_id=None, keep=False, concurrency=2)``: build and open a ``cls`` backend.

    Each backend gets a unique run id unless the test names one (two backends
    sharing a run id see each other's entries), so tests against one shared
    server never collide.  Every backend ``make`` opened is closed on exit,
    also one the test closed itself: its ``close()`` must then do nothing.
    """
    opened: list[B] = []

    def make(options: dict[str, Any], *, run_id: str | None = None, keep: bool = False,
             concurrency: int = 2) -> B:
        context = BackendContext(tier_name=tier_name, run_id=run_id or f"t{uuid.uuid4().hex[:8]}", keep=keep,
                                 concurrency=concurrency)
        backend = cls(options, context)
        backend.open()
        opened.append(backend)
        return backend

    try:
        yield make
    finally:
        for backend in opened:
            backend.close()


def verify_read(pool: NoisePool, backend: StorageBackend, key: str, size: int) -> None:
    """Read ``key`` back through a ``VerifySink`` and fail unless it returns exactly the payload's ``size`` bytes."""
    sink = VerifySink(pool, key, np.empty(pool.max_piece, dtype=np.uint8))
    timing = backend.read(key, size, sink)
    if (sink.mismatches, sink.first_bad_offset) != (0, None):
        raise AssertionError(f"{key} ({size} B) came back wrong ({sink.mismatches} bad pieces, "
                             f"first at offset {sink.first_bad_offset})")
    if timing.nbytes != size:
        raise AssertionError(f"read of {key} ({size} B): IOTiming.nbytes is {timing.nbytes}")


def backend_fixtures(cls: Callable[[dict[str, Any], BackendContext], B], tier_name: str) -> tuple[Any, Any]:
    """The pytest fixtures ``open_backend`` (``backend_opener``) and ``verify`` (``verify_read``), for a conftest::

        open_backend, verify = backend_fixtures(MyBackend, "mytier")

    ``verify(backend, key, size)`` uses the conftest's ``pool`` fixture: the
    ``NoisePool`` the test's writes were generated from.
    """
    import pytest

    @pytest.fixture
    def open_backend() -> Iterator[Callable[..., B]]:
        """Build and open a backend (``run_id`` unique unless given); closed after the test."""
        with backend_opener(cls, tier_name) as make:
            yield make

    @pytest.fixture
    def verify(pool: NoisePool) -> Callable[[StorageBackend, str, int], None]:
        """Read ``key`` back through a VerifySink and demand the exact payload bytes."""
        return functools.partial(verify_read, pool)

    return open_backend, verify
