"""``kvbench plugins`` lists what is installed; ``--check`` runs the conformance checks and catches real bugs."""

from __future__ import annotations

import importlib.util
import json

import pytest

from kvbench_core.builtins.memory import CPUMemoryBackend
from kvbench_core.cli import main
from kvbench_core.contracts import plugins
from kvbench_core.contracts.backend import BackendContext, ByteSink, ByteSource, IOTiming
from kvbench_core.contracts.conformance import BackendHarness, run_checks


class CorruptingTier(CPUMemoryBackend):
    """Flips the last byte of every piece it reads: a silent-corruption bug."""

    def read(self, key: str, size: int, sink: ByteSink) -> IOTiming:
        return super().read(key, size, FlippingSink(sink))


class FlippingSink:
    def __init__(self, inner: ByteSink) -> None:
        self.inner = inner

    def consume(self, offset: int, data: memoryview) -> None:
        corrupted = bytearray(data)
        corrupted[-1] ^= 0xFF
        self.inner.consume(offset, memoryview(corrupted))


class StickyDeleteTier(CPUMemoryBackend):
    """Forgets to delete."""

    def delete(self, key: str) -> None:
        return None


class DoubleCountingTier(CPUMemoryBackend):
    """Reports host and device time that overlap, so they add up to more than the total."""

    def write(self, key: str, source: ByteSource) -> IOTiming:
        timing = super().write(key, source)
        return IOTiming(total=timing.total, host=timing.total, device=timing.total + 1.0, nbytes=timing.nbytes)


class LeakyTier(CPUMemoryBackend):
    """Leaves its entries behind on close."""

    def close(self) -> None:
        return None


def harness_for(cls: type[CPUMemoryBackend]) -> BackendHarness:
    return BackendHarness(factory=lambda context: cls({}, context),
                          remaining_entries=lambda backend: list(backend._entries), quick=True)


@pytest.mark.parametrize(("cls", "failing"), [
    (CorruptingTier, {"round_trip", "overwrite", "timing", "concurrency"}),
    (StickyDeleteTier, {"delete"}),
    (DoubleCountingTier, {"round_trip", "overwrite", "delete", "read_range", "timing", "concurrency", "cleanup"}),
    (LeakyTier, {"cleanup"}),
])
def test_the_checks_catch_each_kind_of_bug(cls: type[CPUMemoryBackend], failing: set[str]) -> None:
    results = {result.name: result for result in run_checks(harness_for(cls))}
    assert {name for name, result in results.items() if result.status == "fail"} == failing
    assert results["dead_endpoint"].status == "skip"


def test_a_correct_tier_passes_every_check_it_can_run() -> None:
    statuses = {result.name: result.status for result in run_checks(harness_for(CPUMemoryBackend))}
    assert statuses.pop("dead_endpoint") == "skip"
    assert set(statuses.values()) == {"pass"}


def test_listing_shows_the_core_plugin_and_its_tiers(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plugins", "--json"]) == 0
    listed = {info["distribution"]: info for info in json.loads(capsys.readouterr().out)}
    assert {"cpu", "gpu"} <= set(listed["kvbench-core"]["provides"]["backend"])


def test_check_of_a_good_tier_prints_one_line_per_check_and_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plugins", "--conformance", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "PASS  round_trip" in out
    assert "PASS  cleanup" in out  # the command line reopens the tier's namespace to look (issue 20)
    assert "SKIP  dead_endpoint  no --dead-options given" in out  # and says why it skips what it cannot run
    assert out.rstrip().endswith("cpu: 9 passed, 0 failed, 1 skipped")


def test_check_of_a_broken_tier_exits_non_zero_naming_the_failed_checks(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(plugins, "registry", lambda kind: {"corrupting": CorruptingTier})
    assert main(["plugins", "--conformance", "corrupting", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["passed"] is False
    failed = {check["name"]: check["detail"] for check in report["checks"] if check["status"] == "fail"}
    assert "wrong bytes" in failed["round_trip"]


def test_check_options_may_be_yaml_or_a_file(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plugins", "--conformance", "cpu", "--options", "{}"]) == 0
    options = tmp_path / "options.yaml"
    options.write_text("bogus: 1\n")
    assert main(["plugins", "--conformance", "cpu", "--options", str(options)]) == 2
    assert "--options.bogus: unknown field" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "message"), [
    (["--conformance", "nosuch"], "unknown backend 'nosuch'; installed:"),
    (["--conformance", "cpu", "--options", "[1, 2]"], "--options: expected a mapping"),
    (["--conformance", "cpu", "--options", "{a: [}"], "--options: not valid JSON or YAML"),
])
def test_check_usage_errors_are_one_line(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plugins", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_check_of_an_unusable_tier_stops_before_any_check(capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA is available here, so the gpu tier opens")
    assert main(["plugins", "--conformance", "gpu", "--options", '{"device": "cuda"}']) == 3
    captured = capsys.readouterr()
    assert "CUDA is not available" in captured.err
    assert "round_trip" not in captured.out


def test_harness_contexts_are_unique_per_backend() -> None:
    harness = harness_for(CPUMemoryBackend)
    contexts: list[BackendContext] = [harness.context() for _ in range(3)]
    assert len({context.run_id for context in contexts}) == 3
