"""The conformance suite as ``pytest --kvbench-conformance=NAME`` runs it (see ``pytest_plugin``): one test
class for the backend the command line names, with its options from ``--kvbench-options``.

Collected by path, never by name (it does not match ``test_*.py``): a project's own test run leaves it out.
The backend is known when pytest imports this module (``pytest_configure`` ran first), so a tier that owns
a directory gets ``FileTierConformance``'s cleanup listing and dead endpoint; any other tier's cleanup is
checked by reopening it (as ``kvbench plugins --conformance`` does), its dead endpoint by
``--kvbench-dead-options``.
"""

from __future__ import annotations

from pathlib import Path

from kvbench_core.contracts.backend import BackendContext, StorageBackend
from kvbench_core.contracts.conformance.harness import BackendHarness, CheckSkipped
from kvbench_core.contracts.conformance.lifecycle import reopen_probe
from kvbench_core.contracts.conformance.pytest_plugin import SETTINGS
from kvbench_core.contracts.conformance.suite import BackendConformance, FileTierConformance, substitute_tmp_path
from kvbench_core.contracts.plugins import new_backend, registry

_OWNS_A_DIRECTORY = bool(SETTINGS.backend and registry("backend")[SETTINGS.backend].directory_option)


def _create(options: dict[str, object], context: BackendContext, tmp_path: Path, flag: str) -> StorageBackend:
    return new_backend(SETTINGS.backend, substitute_tmp_path(options, tmp_path), context,
                       path="--kvbench-conformance", options_path=flag)


class TestConformance(FileTierConformance if _OWNS_A_DIRECTORY else BackendConformance):  # type: ignore[misc]
    """Every conformance check, one test each, against ``--kvbench-conformance``'s backend."""

    backend_name = SETTINGS.backend or ""
    backend_options = SETTINGS.options

    def make_backend(self, context: BackendContext, tmp_path: Path) -> StorageBackend:
        return _create(SETTINGS.options, context, tmp_path, "--kvbench-options")

    def make_dead_backend(self, context: BackendContext, tmp_path: Path) -> StorageBackend | None:
        if SETTINGS.dead_options is not None:
            return _create(SETTINGS.dead_options, context, tmp_path, "--kvbench-dead-options")
        if not _OWNS_A_DIRECTORY:
            raise CheckSkipped("no --kvbench-dead-options given: pass this tier's options pointed at an endpoint "
                               "that is down to check that open() fails with BackendUnavailable")
        return super().make_dead_backend(context, tmp_path)

    def conformance_harness(self, tmp_path: Path) -> BackendHarness:
        harness = super().conformance_harness(tmp_path)
        if harness.remaining_entries is None:  # no listing of its own: what a fresh instance still finds
            harness.remaining_entries = reopen_probe(harness.factory)
        return harness
