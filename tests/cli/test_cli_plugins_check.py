"""``kvbench plugins --conformance`` runs the cleanup and dead-endpoint checks the pytest suite runs: cleanup by
reopening the tier's namespace (any backend), dead-endpoint with ``--dead-options``; a skip says why."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from kvbench_core.builtins.memory import CPUMemoryBackend
from kvbench_core.cli import main
from kvbench_core.contracts import plugins
from kvbench_core.contracts.backend import BackendContext
from kvbench_core.contracts.conformance import BackendHarness, reopen_probe, run_checks
from kvbench_core.contracts.errors import BackendUnavailable


class PersistentTier(CPUMemoryBackend):
    """Entries outlive the instance, per run id (as files or objects do), and close() removes them."""

    store: ClassVar[dict[str, dict[str, Any]]] = {}

    def open(self) -> None:
        super().open()
        self._entries = self.store.setdefault(self.context.run_id, {})

    def close(self) -> None:
        self._entries.clear()


class LeakyPersistentTier(PersistentTier):
    """Forgets to remove its entries on close."""

    def close(self) -> None:
        return None


class DeadTier(CPUMemoryBackend):
    options_schema: ClassVar[dict[str, Any]] = {"type": "object", "properties": {"dead": {"type": "boolean"}}}

    def open(self) -> None:
        if self.options.get("dead"):
            raise BackendUnavailable("endpoint is down")


@pytest.mark.parametrize(("cls", "status"), [(PersistentTier, "pass"), (LeakyPersistentTier, "fail")])
def test_the_reopen_probe_sees_what_close_left_behind(cls: type[PersistentTier], status: str) -> None:
    def factory(context: BackendContext) -> PersistentTier:
        return cls({}, context)

    results = {r.name: r for r in run_checks(BackendHarness(factory=factory, remaining_entries=reopen_probe(factory),
                                                            quick=True), ["cleanup"])}
    assert results["cleanup"].status == status
    if status == "fail":
        assert "left 2 entries behind: ['cl1', 'cl2']" in results["cleanup"].detail


def test_dead_options_run_the_dead_endpoint_check(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    monkeypatch.setattr(plugins, "registry", lambda kind: {"deadable": DeadTier})
    assert main(["plugins", "--conformance", "deadable", "--dead-options", "{dead: true}"]) == 0
    out = capsys.readouterr().out
    assert "PASS  dead_endpoint  endpoint is down" in out
    assert out.rstrip().endswith("deadable: 10 passed, 0 failed, 0 skipped")
    # options that do open are a failed check, not a pass
    assert main(["plugins", "--conformance", "deadable", "--dead-options", "{dead: false}"]) == 1
    assert "FAIL  dead_endpoint  open() on a dead endpoint succeeded" in capsys.readouterr().out
