"""kvbench's pytest plugin (entry point ``pytest11``): the conformance suite from the command line, and
fixtures a vendor's own tests reuse.

``pytest --kvbench-conformance=NAME [--kvbench-options '{...}'] [--kvbench-dead-options '{...}']`` runs
every conformance check against the installed backend ``NAME`` as parametrized tests
(``test_conformance[round_trip]``, ...; ``-k`` selects).  The options are YAML or JSON, as
``kvbench plugins --conformance`` takes them; ``{tmp_path}`` in a value becomes each test's ``tmp_path``,
and a tier that owns a directory gets ``{tmp_path}/tier`` when the options name none.  With no test path
on the command line only the suite runs; with paths, the suite runs beside those tests.

The fixtures, for any test once kvbench-core is installed (fsspec's abstract tests, the pytest way):

- ``kvbench_payload``: the seeded ``NoisePool`` a run's payload bytes come from (1 MiB pieces);
- ``kvbench_verify(backend, key, size)``: read ``key`` back and demand exactly the payload's bytes;
- ``kvbench_scratch_tier(name=None, options=None)``: an opened backend of an installed tier (by default
  the one ``--kvbench-conformance`` names), its directory under ``tmp_path``, closed after the test;
- ``kvbench_fake_clock``: a clock that moves only when told (``advance``), for code that takes a clock.

The module imports pytest alone at load (it is loaded in every pytest session of an environment that has
kvbench); kvbench's own modules are imported when an option or fixture is used.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

#: The test module the suite runs from (collected by path, so its name need not match ``test_*.py``).
SUITE_MODULE = Path(__file__).with_name("command_line_suite.py")


@dataclass
class Settings:
    """What the command line asked for, read by ``command_line_suite`` and ``kvbench_scratch_tier``."""

    backend: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    dead_options: dict[str, Any] | None = None


SETTINGS = Settings()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kvbench", "kvbench storage backend conformance")
    group.addoption("--kvbench-conformance", metavar="BACKEND", default=None,
                    help="run kvbench's conformance suite against the installed backend BACKEND")
    group.addoption("--kvbench-options", metavar="YAML", default=None,
                    help="the tier's options, YAML or JSON ('{path: /mnt/nvme/kvb}'); {tmp_path} = the test's")
    group.addoption("--kvbench-dead-options", metavar="YAML", default=None,
                    help="the tier's options pointed at an endpoint that is down (the dead_endpoint check)")


def _mapping(text: str | None, flag: str) -> dict[str, Any] | None:
    if text is None:
        return None
    import yaml

    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise pytest.UsageError(f"{flag}: not YAML or JSON: {str(error).splitlines()[0]}") from None
    if not isinstance(value, dict):
        raise pytest.UsageError(f"{flag}: give a mapping of the tier's options, like '{{path: /mnt/kvb}}'")
    return value


def pytest_configure(config: pytest.Config) -> None:
    name = config.getoption("kvbench_conformance", None)
    if not name:
        return
    from kvbench_core.contracts.errors import UserError
    from kvbench_core.contracts.plugins import lookup
    from kvbench_core.contracts.validation import schema_errors

    try:
        cls = lookup("backend", name, path="--kvbench-conformance")
    except UserError as error:
        raise pytest.UsageError(str(error)) from None
    options = _mapping(config.getoption("kvbench_options"), "--kvbench-options") or {}
    dead_options = _mapping(config.getoption("kvbench_dead_options"), "--kvbench-dead-options")
    if cls.directory_option and cls.directory_option not in options:
        options[cls.directory_option] = "{tmp_path}/tier"
    for flag, given in (("--kvbench-options", options), ("--kvbench-dead-options", dead_options)):
        # checked once, here, not once per check; dead options are judged only when given
        messages = [] if given is None else schema_errors(given, cls.options_schema, root=flag)
        if messages:
            raise pytest.UsageError("; ".join(messages))
    SETTINGS.backend, SETTINGS.options = name, options
    SETTINGS.dead_options = dead_options
    if config.args_source == pytest.Config.ArgsSource.ARGS:
        config.args.append(str(SUITE_MODULE))
    else:  # no path given: the suite alone, not the testpaths of the project pytest runs in
        config.args[:] = [str(SUITE_MODULE)]


class FakeClock:
    """A clock (seconds, like ``time.perf_counter``) that stands still until ``advance`` moves it."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        if seconds < 0:
            raise ValueError("a clock does not go back")
        self.now += seconds
        return self.now


@pytest.fixture
def kvbench_fake_clock() -> FakeClock:
    """A clock that moves only when the test says (``clock.advance(0.5)``)."""
    return FakeClock()


@pytest.fixture
def kvbench_payload() -> Any:
    """The seeded payload pool a run writes from: ``pool.piece(key, offset, nbytes)`` and friends."""
    from kvbench_core.contracts.payload import NoisePool

    return NoisePool(20240611, pool_bytes=1 << 20, max_piece=1 << 20)


@pytest.fixture
def kvbench_verify(kvbench_payload: Any) -> Callable[[Any, str, int], None]:
    """``verify(backend, key, size)``: the entry reads back as exactly ``kvbench_payload``'s bytes."""
    from kvbench_core.contracts.conformance.suite import verify_read

    return lambda backend, key, size: verify_read(kvbench_payload, backend, key, size)


@pytest.fixture
def kvbench_scratch_tier(tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """``make(name=None, options=None)``: an opened backend of tier ``name`` (default: the one
    ``--kvbench-conformance`` names, with its options), ``{tmp_path}`` substituted and a directory tier's
    directory under ``tmp_path``; a unique run id each; every one closed after the test."""
    from kvbench_core.contracts.backend import BackendContext
    from kvbench_core.contracts.conformance.suite import substitute_tmp_path
    from kvbench_core.contracts.plugins import new_backend

    opened: list[Any] = []

    def make(name: str | None = None, options: dict[str, Any] | None = None, *, concurrency: int = 2) -> Any:
        name = name or SETTINGS.backend
        if not name:
            raise pytest.UsageError("kvbench_scratch_tier: name a backend, or run with --kvbench-conformance")
        chosen = options if options is not None else (SETTINGS.options if name == SETTINGS.backend else {})
        context = BackendContext(tier_name="scratch", run_id=f"scratch-{uuid.uuid4().hex[:8]}",
                                 concurrency=concurrency)
        backend = new_backend(name, substitute_tmp_path(chosen, tmp_path), context, path="kvbench_scratch_tier")
        backend.open()
        opened.append(backend)
        return backend

    yield make
    for backend in opened:
        backend.close()
