"""``kvbench plugins`` lists what is installed; ``--check`` runs the conformance checks and catches real bugs."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from testkit import free_port

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
    (["--conformance", "cpu", "--options", "{a: [}"], "--options:1:6: not valid JSON or YAML"),
])
def test_check_usage_errors_are_one_line(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plugins", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


@pytest.mark.parametrize(("argv", "code", "line"), [
    # a directory a spec refuses (exit 2, cache.tiers[1].options.path: ...) is refused as a flag's option
    (["--conformance", "nvme", "--options", "{path: /etc/kvb}"], 2,
     "--options.path: /etc/kvb is inside a system directory"),
    (["--conformance", "nvme", "--options", "{path: TIER}", "--dead-options", "{path: /etc/kvb}"], 2,
     "--dead-options.path: /etc/kvb is inside a system directory"),
    # several schema errors on one line, not "invalid spec:" and a list (these are no spec)
    (["--conformance", "nvme", "--options", "{bogus: 1}"], 2, "--options.bogus: unknown field (allowed: "),
    (["--conformance", "nvmee"], 2, "--conformance: unknown backend 'nvmee'; installed: "),
    (["--conformance", "cpu", "--options", "{a: [}"], 2,
     "--options:1:6: not valid JSON or YAML: expected the node content, but found '}'"),
    (["--conformance", "cpu", "--options", "{a: 1, a: 2}"], 2, "--options:1:8: not valid JSON or YAML: "
                                                               "duplicate key 'a'"),  # as strict as a spec
])
def test_conformance_errors_are_one_line_naming_the_flag_and_create_nothing(
        argv: list[str], code: int, line: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    if "nvme" in argv:
        pytest.importorskip("kvbench_nvme")
    monkeypatch.chdir(tmp_path)
    tier = tmp_path / "tier"
    argv = [arg.replace("TIER", str(tier)) for arg in argv]
    assert main(["plugins", *argv]) == code
    err = capsys.readouterr().err
    assert err.startswith(f"kvbench: error: {line}") and err.count("\n") == 1, err
    assert "spec" not in err
    assert list(tmp_path.iterdir()) == []  # no tier directory, no file


def test_several_option_errors_share_the_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("kvbench_nvme")
    assert main(["plugins", "--conformance", "nvme", "--options", "{bogus: 1}"]) == 2
    err = capsys.readouterr().err
    assert "; --options.path: required field is missing" in err and err.count("\n") == 1


def test_a_tier_that_cannot_open_is_named_as_the_command_line_chose_it(capsys: pytest.CaptureFixture[str]) -> None:
    """Not the harness's own tier name ('tier 'conformance' (redis)'), which the user never wrote."""
    pytest.importorskip("kvbench_redis")
    port = free_port()
    assert main(["plugins", "--conformance", "redis", "--options", f"{{port: {port}}}"]) == 3
    captured = capsys.readouterr()
    assert captured.err.startswith(f"kvbench: error: --conformance redis: cannot use the server at 127.0.0.1:{port}")
    assert captured.err.count("\n") == 1 and "round_trip" not in captured.out


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
