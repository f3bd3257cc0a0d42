"""What all trace sources share: registration, options, files, QoS, determinism, figures, the CLI."""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from kvbench_workloads.burstgpt import BurstGPTSource
from kvbench_workloads.mooncake import MooncakeSource
from kvbench_workloads.replay import DEFAULT_QOS_MIX, TraceClock
from kvbench_workloads.sharegpt import ShareGPTSource
from kvbench_workloads.survey import detect_format, trace_stats
from trace_helpers import DATA, drain_open, drain_user, make_context

from kvbench_core.cli import main
from kvbench_core.contracts.errors import InputFileError, SpecError
from kvbench_core.contracts.plugins import get_plugin_manager, registry
from kvbench_core.contracts.redact import redact
from kvbench_core.contracts.validation import with_defaults
from kvbench_core.contracts.workload import QoSClass

SOURCES = {"sharegpt": ShareGPTSource, "burstgpt": BurstGPTSource, "mooncake": MooncakeSource}
SAMPLES = {"sharegpt": "sharegpt_pairs.json", "burstgpt": "burstgpt_v3.csv", "mooncake": "mooncake_conversation.jsonl"}


def test_the_plugin_registers_the_three_sources() -> None:
    installed = registry("source")
    for name, cls in SOURCES.items():
        assert installed[name] is cls and cls.name == name


@pytest.mark.parametrize("name", SOURCES)
def test_options_schemas_are_closed_and_their_defaults_valid(name: str) -> None:
    schema = SOURCES[name].options_schema
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["additionalProperties"] is False and schema["required"] == ["path"]
    jsonschema.validate({"path": "x", **with_defaults(schema, {})}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"path": "x", "speed_up": 2}, schema)


@pytest.mark.parametrize("name", SOURCES)
def test_descriptions_and_options_pass_result_redaction_unchanged(name: str) -> None:
    """A result re-runs its spec as written, so no option or figure may look like a credential."""
    options = {**with_defaults(SOURCES[name].options_schema, {}), "path": SAMPLES[name], "skip_bad_rows": True}
    described = SOURCES[name](options, make_context()).describe()
    assert redact(described) == described
    assert redact(options) == options


def test_paths_resolve_against_the_spec_folder_and_missing_ones_are_named(tmp_path: Path) -> None:
    source = BurstGPTSource({"path": "../data/burstgpt_v1.csv"}, make_context(spec_dir=str(DATA.parent / "specs")))
    assert source.files == [DATA / "burstgpt_v1.csv"]
    assert source.describe()["files"][0]["sha256"] == (
        "c4345ca5105e811165951cda83aad492c1221b40608bb1aa4c55287238515746"  # PROVENANCE.md
    )
    with pytest.raises(InputFileError, match=r"nope\.csv: no such trace file or directory"):
        BurstGPTSource({"path": "nope.csv"}, make_context(spec_dir=str(tmp_path)))
    with pytest.raises(InputFileError, match=r"directory holds no trace files \(\*\.jsonl\)"):
        MooncakeSource({"path": str(tmp_path)}, make_context())


def test_an_unreadable_encoding_is_an_input_error(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_bytes(b"Timestamp,Request tokens,Response tokens\n1,2,\xff\xfe\n")
    with pytest.raises(InputFileError, match=r"t\.csv: not UTF-8 text"):
        BurstGPTSource({"path": str(tmp_path / "t.csv")}, make_context())


@pytest.mark.parametrize("name", SOURCES)
def test_the_same_seed_gives_the_same_request_stream(name: str) -> None:
    def stream(seed: int) -> list:
        source = SOURCES[name]({"path": SAMPLES[name], "cycles": 2}, make_context(seed=seed, users=3))
        if source.open_loop:
            return drain_open(source)
        return [request for user in range(3) for request in drain_user(source, user)]

    first, again, other = stream(7), stream(7), stream(8)
    assert first == again
    assert [r.qos for r in first] != [r.qos for r in other]
    def storage(requests: list) -> list:
        return [(r.context_tokens, r.reads, r.write) for r in requests]

    assert storage(first) == storage(other)  # the seed picks QoS classes, never what is stored


def test_requests_are_spread_over_users_by_conversation() -> None:
    requests = drain_open(BurstGPTSource({"path": "burstgpt_v3.csv", "cycles": 1}, make_context(users=5)))
    by_conversation: dict[str, set[int]] = {}
    for request in requests:
        if request.conversation:
            by_conversation.setdefault(request.conversation, set()).add(request.user_id)
    assert all(len(users) == 1 for users in by_conversation.values())
    counts = Counter(request.user_id for request in requests)
    assert set(counts) == set(range(5))
    for user, seqs in ((u, [r.seq for r in requests if r.user_id == u]) for u in range(5)):
        assert seqs == list(range(counts[user]))


def test_qos_is_one_class_or_a_seeded_mix_of_known_classes() -> None:
    path = {"path": "burstgpt_v1.csv", "cycles": 1}
    only = drain_open(BurstGPTSource({**path, "qos": "interactive"}, make_context()))
    assert {r.qos for r in only} == {"interactive"}
    weighted = drain_open(BurstGPTSource({**path, "qos": {"batch": 1, "responsive": 0}}, make_context()))
    assert {r.qos for r in weighted} == {"batch"}
    mix = Counter(r.qos for r in drain_open(BurstGPTSource({**path, "cycles": 20}, make_context())))
    total = sum(mix.values())
    for name, share in DEFAULT_QOS_MIX.items():
        assert mix[name] / total == pytest.approx(share, abs=0.03)
    with pytest.raises(SpecError, match=r"workload\.options\.qos: unknown QoS class 'urgent'"):
        BurstGPTSource({**path, "qos": "urgent"}, make_context())
    with pytest.raises(SpecError, match="add up to 0"):
        BurstGPTSource({**path, "qos": {"batch": 0}}, make_context())
    custom = {"gold": QoSClass("gold", 9, 0.01, 0.02)}
    with pytest.raises(SpecError, match="unknown QoS class 'batch'"):
        BurstGPTSource(path, make_context(qos_classes=custom))
    assert {r.qos for r in drain_open(BurstGPTSource({**path, "qos": "gold"}, make_context(qos_classes=custom)))} == {
        "gold"
    }


def test_decode_only_mode_is_refused_with_the_reason() -> None:
    with pytest.raises(SpecError, match=r"workload\.mode: decode-only"):
        BurstGPTSource({"path": "burstgpt_v1.csv"}, make_context(mode="decode-only"))


def test_the_clock_keeps_time_monotonic_and_joins_files_one_mean_gap_apart() -> None:
    clock = TraceClock()
    clock.start_file()
    assert [clock.place(t) for t in (100.0, 110.0, 105.0, 130.0)] == [0.0, 10.0, 10.0, 30.0]
    clock.start_file()  # mean gap of the first file: 30 / 3
    assert [clock.place(t) for t in (0.0, 4.0)] == [40.0, 44.0]


def test_burstgpt_figures_match_the_raw_trace() -> None:
    with (DATA / "burstgpt_v1.csv").open(newline="") as file:
        rows = [row for row in csv.DictReader(file) if row["Response tokens"] != "0"]
    stats = BurstGPTSource({"path": "burstgpt_v1.csv"}, make_context()).describe()["stats"]
    inputs = np.array([int(row["Request tokens"]) for row in rows])
    gaps = np.diff([float(row["Timestamp"]) for row in rows])
    assert stats["requests"] == len(rows) == 191
    assert stats["input_tokens"] == {
        "mean": round(inputs.mean(), 3), "p50": float(np.percentile(inputs, 50, method="inverted_cdf")),
        "p90": float(np.percentile(inputs, 90, method="inverted_cdf")),
        "p99": float(np.percentile(inputs, 99, method="inverted_cdf")),
        "max": float(inputs.max()),
    }
    assert stats["output_tokens"]["max"] == max(int(row["Response tokens"]) for row in rows)
    assert stats["inter_arrival_s"]["mean"] == round(gaps.mean(), 3)
    assert stats["inter_arrival_s"]["max"] == gaps.max()
    assert stats["span_s"] == 33784 - 5
    assert stats["prefix_reuse_rate"] == {"by_tokens": 0.0, "by_blocks": None}
    assert (stats["conversations"], stats["single_requests"]) == (0, 191)


def test_session_figures_count_turns_and_history_reuse() -> None:
    stats = BurstGPTSource({"path": "burstgpt_v3.csv"}, make_context()).describe()["stats"]
    assert stats["multi_turn_conversations"] == 42  # sessions with two or more rows in the sample
    assert stats["turns_per_conversation"]["max"] == 24
    assert 0 < stats["prefix_reuse_rate"]["by_tokens"] < 1
    assert stats["inter_arrival_s"] is not None and stats["span_s"] == 19476557.0 - 19440110.0


def test_format_detection_by_name_then_content(tmp_path: Path) -> None:
    assert detect_format(DATA / "burstgpt_v1.csv") == "burstgpt"
    assert detect_format(DATA / "mooncake_conversation.jsonl") == "mooncake"
    assert detect_format(DATA / "sharegpt_pairs.json") == "sharegpt"
    for name, sample in SAMPLES.items():
        (tmp_path / name).write_bytes((DATA / sample).read_bytes())
        assert detect_format(tmp_path / name) == name
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "README").write_text("about the trace")
    (tmp_path / "dir" / "day1.csv").write_text("Timestamp,Request tokens,Response tokens\n")
    assert detect_format(tmp_path / "dir") == "burstgpt"
    # A directory mixing formats (like a data folder holding BurstGPT and Mooncake samples) was read as its
    # first format's files only, the others skipped without a word: refused, naming both.
    (tmp_path / "dir" / "day2.jsonl").write_text("{}\n")
    with pytest.raises(InputFileError, match=r"holds traces of 2 formats \(burstgpt: day1.csv; mooncake: "
                                             r"day2.jsonl\); pass one file, or --format burstgpt\|mooncake"):
        detect_format(tmp_path / "dir")
    (tmp_path / "notes").write_text("hello")
    with pytest.raises(InputFileError, match="cannot tell the trace format"):
        detect_format(tmp_path / "notes")


def test_trace_stats_is_the_source_description() -> None:
    figures = trace_stats(str(DATA / "burstgpt_v1.csv"), None, {"log_types": ["Conversation log"]})
    assert figures == BurstGPTSource(
        {"path": str(DATA / "burstgpt_v1.csv"), "log_types": ["Conversation log"]}, make_context()
    ).describe()
    with pytest.raises(SpecError, match=r"option\.speed: unknown field"):
        trace_stats(str(DATA / "burstgpt_v1.csv"), None, {"speed": 2})


def test_cli_prints_the_figures(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(DATA / "mooncake_conversation.jsonl")
    assert main(["workload", "stats", path, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == trace_stats(path)
    assert main(["workload", "stats", str(DATA / "burstgpt_v1.csv"), "-o", "models=[GPT-4]"]) == 0
    text = capsys.readouterr().out
    assert "source" in text and "inter-arrival (s)" in text and "failed" in text
    assert main(["workload", "stats", str(DATA / "sharegpt_first_turn.json"), "--format", "sharegpt"]) == 2
    assert "unanswered_generate_tokens" in capsys.readouterr().err
    assert main(["workload", "stats", path, "-o", "block_tokens"]) == 2
    assert "expected KEY=VALUE" in capsys.readouterr().err


def test_the_command_is_the_plugins_own(capsys: pytest.CaptureFixture[str]) -> None:
    """``kvbench workload`` comes through the kvbench_cli_commands hook: without the plugin there is none."""
    manager = get_plugin_manager()
    plugin = manager.unregister(name="workloads")
    try:
        with pytest.raises(SystemExit) as exit_info:
            main(["workload", "stats", str(DATA / "burstgpt_v1.csv")])
    finally:
        manager.register(plugin, name="workloads")
    assert exit_info.value.code == 2
    assert "invalid choice: 'workload'" in capsys.readouterr().err
