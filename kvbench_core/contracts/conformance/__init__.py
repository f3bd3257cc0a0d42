"""Conformance suite for storage backends: one class to subclass, the same checks from the CLI.

Every tier, built-in or vendor, must behave the same way towards the cache:
byte-exact round trips at every size, overwrite, idempotent delete, correct
``read_range``, honest ``IOTiming``, thread safety, cleanup on ``close`` and a
clear ``BackendUnavailable`` when the endpoint is dead.  Like fsspec's abstract
test classes, this module holds those checks once so each backend's test
module only says how to build the backend.

Usage from pytest (the whole test module of a tier)::

    from typing import ClassVar
    from kvbench_core.contracts.conformance import BackendConformance

    class TestMyTier(BackendConformance):
        backend_name = "mytier"                                  # name registered by the entry point
        backend_options: ClassVar = {"path": "{tmp_path}/data"}  # "{tmp_path}" becomes pytest's tmp_path

(``ClassVar`` only keeps ruff's RUF012 quiet; a plain assignment works too.)

That collects ``test_conformance[<check>]`` once per check in ``CHECKS``
(``pytest -k round_trip`` selects one).  Optional hooks, override as needed:

- ``make_backend(context, tmp_path)``: build the unopened backend yourself
  (default: the registry's selection path, ``kvbench_core.contracts.plugins.new_backend``,
  so option validation and ``requires`` are exercised too).
- ``remaining_entries(backend)``: after ``close()``, what of this run is still
  stored (file names, keys, objects).  Without it the ``cleanup`` check skips.
  For directory tiers ``remaining_files(root)`` is ready-made.
- ``make_dead_backend(context, tmp_path)``: a backend pointed at an endpoint
  that is down (closed port, missing device); its ``open()`` must raise
  ``BackendUnavailable``.  Without it the ``dead_endpoint`` check skips.
- ``sizes``: entry sizes for the round trip (default: 1 byte up to two
  transfer sizes plus an unaligned tail).

Mark a whole class skipped with ``pytestmark = pytest.mark.skipif(...)`` when
its server or device is absent.  pytest is imported only inside the test
method, so this module is importable (and the CLI's ``kvbench plugins check``
runs the same checks) without pytest installed.

From the command line, no test module needed: ``pytest --kvbench-conformance=mytier
[--kvbench-options '{...}']`` (``conformance.pytest_plugin``, entry point ``pytest11``, with the
``kvbench_scratch_tier``, ``kvbench_payload``, ``kvbench_verify`` and ``kvbench_fake_clock`` fixtures).

Without pytest::

    harness = BackendHarness(factory=lambda ctx: MyBackend({...}, ctx))
    for result in run_checks(harness):
        print(result.name, result.status, result.detail)

A tier's own tests beyond the conformance checks share ``backend_fixtures``
(the ``open_backend`` and ``verify`` fixtures of a conftest), ``backend_opener``
and ``verify_read``.  A tier that owns a directory (``directory_option``) subclasses
``FileTierConformance`` instead: cleanup and the dead endpoint then come ready-made.

The data checks live in ``conformance.checks``, the cleanup and dead-endpoint checks in
``conformance.lifecycle``, the payloads and sinks they share in ``conformance.probes``, the
harness in ``conformance.harness``, the pytest face in ``conformance.suite``; this package's
names are the public ones a vendor imports (the modules behind them may move).
"""

from kvbench_core.contracts.conformance.checks import CHECKS, run_checks
from kvbench_core.contracts.conformance.harness import BackendHarness, CheckResult, CheckSkipped
from kvbench_core.contracts.conformance.lifecycle import remaining_files, reopen_probe
from kvbench_core.contracts.conformance.probes import TIMING_RELATIVE_SLACK, check_timing
from kvbench_core.contracts.conformance.suite import (
    BackendConformance,
    FileTierConformance,
    backend_fixtures,
    backend_opener,
    verify_read,
)

__all__ = [
    "CHECKS",
    "TIMING_RELATIVE_SLACK",
    "BackendConformance",
    "BackendHarness",
    "CheckResult",
    "CheckSkipped",
    "FileTierConformance",
    "backend_fixtures",
    "backend_opener",
    "check_timing",
    "remaining_files",
    "reopen_probe",
    "run_checks",
    "verify_read",
]
