"""BurstGPT replay: both column layouts, failed rows, filters, sessions, arrival times, bad input."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from kvbench_workloads.burstgpt import BurstGPTSource
from trace_helpers import DATA, drain_open, make_context

from kvbench_core.contracts.errors import InputFileError
from kvbench_core.contracts.workload import Read, Write

ONCE = {"cycles": 1}
V1 = {"path": "burstgpt_v1.csv", **ONCE}
V3 = {"path": "burstgpt_v3.csv", **ONCE}


def raw_rows(name: str) -> list[dict[str, str]]:
    with (DATA / name).open(newline="") as file:
        return list(csv.DictReader(file))


def test_v1_rows_become_single_requests_and_failed_rows_are_skipped() -> None:
    source = BurstGPTSource(V1, make_context())
    requests = drain_open(source)
    assert len(requests) == 200 - 9
    assert source.describe()["stats"]["skipped"] == {"failed": 9}
    first = requests[0]
    assert (first.context_tokens, first.generate_tokens, first.arrival_s) == (472, 18, 0.0)
    assert first.reads == () and first.write == Write("burstgpt~0_turn_0", 472)
    assert first.conversation is None and first.tags == {"trace": "burstgpt_v1.csv:2"}
    assert source.open_loop
    assert len(drain_open(BurstGPTSource({**V1, "skip_failed": False}, make_context()))) == 200


def test_v1_filters_by_log_type_and_model() -> None:
    conversation_logs = BurstGPTSource({**V1, "log_types": ["conversation log"]}, make_context())
    assert conversation_logs.describe()["stats"]["requests"] == 200 - 9 - 2
    assert conversation_logs.describe()["stats"]["skipped"] == {"failed": 9, "log_types": 2}
    gpt4 = drain_open(BurstGPTSource({**V1, "models": ["GPT-4"]}, make_context()))
    expected = [row for row in raw_rows("burstgpt_v1.csv") if row["Model"] == "GPT-4" and row["Response tokens"] != "0"]
    assert [request.context_tokens for request in gpt4] == [int(row["Request tokens"]) for row in expected]


def test_v3_columns_are_found_by_name_and_sessions_become_conversations() -> None:
    source = BurstGPTSource(V3, make_context())
    requests = drain_open(source)
    stats = source.describe()["stats"]
    assert stats["requests"] == 199 and stats["skipped"] == {"failed": 1}
    assert stats["single_requests"] == 6  # the API log rows have no session
    assert stats["conversations"] == 73  # 74 sessions; one holds only the failed row
    everything = BurstGPTSource({**V3, "skip_failed": False}, make_context()).describe()["stats"]
    assert everything["conversations"] == 74 and everything["requests"] == 200
    first = requests[0]
    assert (first.context_tokens, first.generate_tokens) == (906, 446)
    session = "1722ac82-0a46-4bf0-aa08-89794e7a2b3f"
    turns = [request for request in requests if request.conversation == session]
    assert [request.context_tokens for request in turns] == [906, 1631]
    assert turns[1].reads == (Read(f"{session}_turn_0", 906, "turn"),)
    assert turns[1].write == Write(f"{session}_turn_1", 1631 - 906)
    assert len({request.user_id for request in turns}) == 1


def test_v3_turns_read_only_entries_their_session_stored_and_cover_the_context_exactly() -> None:
    stored: dict[str, int] = {}
    for request in drain_open(BurstGPTSource(V3, make_context())):
        for read in request.reads:
            assert stored[read.key] == read.tokens
            assert read.key.startswith(f"{request.conversation}_turn_")
        written = request.write.tokens if request.write else 0
        assert sum(read.tokens for read in request.reads) + written == request.context_tokens
        # ... and decode reads exactly those entries: the whole context, not only the newest turn
        assert request.decode_keys == tuple(read.key for read in request.reads) + (
            (request.write.key,) if request.write else ())
        if request.write:
            stored[request.write.key] = request.write.tokens


def test_a_shorter_context_branches_the_session_from_the_turns_that_still_fit() -> None:
    session = "313b905a-2252-45ca-bf14-46e87f6233dd"  # contexts 69, 249, 400, 498, 707, 763, 602, ...
    turns = [request for request in drain_open(BurstGPTSource(V3, make_context())) if request.conversation == session]
    assert [request.context_tokens for request in turns[:7]] == [69, 249, 400, 498, 707, 763, 602]
    branch = turns[6]
    assert [read.key for read in branch.reads] == [f"{session}_turn_{n}" for n in range(4)]  # 498 tokens fit
    assert branch.write == Write(f"{session}_turn_6", 602 - 498)


def test_arrivals_follow_the_timestamps_scaled_by_speedup() -> None:
    times = [float(row["Timestamp"]) for row in raw_rows("burstgpt_v3.csv") if row["Response tokens"] != "0"]
    for speedup in (1, 10):
        requests = drain_open(BurstGPTSource({**V3, "speedup": speedup}, make_context()))
        assert [request.arrival_s for request in requests] == pytest.approx([(t - times[0]) / speedup for t in times])
    as_fast_as_possible = drain_open(BurstGPTSource({**V3, "speedup": 0}, make_context()))
    assert {request.arrival_s for request in as_fast_as_possible} == {0.0}


def test_cycles_repeat_the_trace_after_one_mean_gap_with_fresh_keys() -> None:
    requests = drain_open(BurstGPTSource({**V3, "cycles": 2}, make_context()))
    assert len(requests) == 2 * 199
    first, second = requests[:199], requests[199:]
    span = first[-1].arrival_s
    assert second[0].arrival_s == pytest.approx(span + span / 198)
    assert [r.arrival_s - second[0].arrival_s for r in second] == pytest.approx([r.arrival_s for r in first])
    first_keys = {r.write.key for r in first if r.write}
    assert not first_keys & {r.write.key for r in second if r.write}
    assert all(r.conversation.endswith(".c1") for r in second if r.conversation)


def test_cycles_zero_loops_until_the_run_stops_polling() -> None:
    source = BurstGPTSource({"path": "burstgpt_v1.csv"}, make_context())
    assert all(source.next_request(0) is not None for _ in range(3 * 191 + 5))


def test_a_directory_replays_its_files_back_to_back(tmp_path: Path) -> None:
    lines = (DATA / "burstgpt_v1.csv").read_text().splitlines(keepends=True)
    (tmp_path / "part_1.csv").write_text("".join(lines[:101]))
    (tmp_path / "part_2.csv").write_text(lines[0] + "".join(lines[101:]))
    (tmp_path / "README.md").write_text("not a trace")
    whole = drain_open(BurstGPTSource(V1, make_context()))
    parts = BurstGPTSource({**ONCE, "path": str(tmp_path)}, make_context())
    split = drain_open(parts)
    assert [r.context_tokens for r in split] == [r.context_tokens for r in whole]
    assert [f["path"] for f in parts.describe()["files"]] == [str(tmp_path / f"part_{n}.csv") for n in (1, 2)]
    first_file = [r for r in split if r.tags["trace"].startswith("part_1")]
    end, count = first_file[-1].arrival_s, len(first_file)
    assert split[count].arrival_s == pytest.approx(end + end / (count - 1))


HEADER = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", r"t\.csv:1: empty file"),
        ("Timestamp,Model,Request tokens,Total tokens\n1,ChatGPT,3,4\n", r"t\.csv:1: missing column 'response tokens'"),
        (HEADER + "1,ChatGPT,3,4,7,Conversation log\n2,ChatGPT,three,4,7,Conversation log\n",
         r"t\.csv:3: Request tokens: expected a whole number >= 0, got 'three'"),
        (HEADER + "1,ChatGPT,3,-4,7,Conversation log\n", r"t\.csv:2: Response tokens: expected a whole number >= 0"),
        (HEADER + "soon,ChatGPT,3,4,7,Conversation log\n", r"t\.csv:2: Timestamp: expected a number, got 'soon'"),
        (HEADER + "1,ChatGPT,3,4\n", r"t\.csv:2: row: expected 6 fields like the header, got 4"),
    ],
)
def test_malformed_rows_name_file_line_and_field(tmp_path: Path, content: str, message: str) -> None:
    (tmp_path / "t.csv").write_text(content)
    with pytest.raises(InputFileError, match=message):
        BurstGPTSource({"path": "t.csv", **ONCE}, make_context(spec_dir=str(tmp_path)))


def test_a_filter_on_a_column_the_file_lacks_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text("Timestamp,Request tokens,Response tokens\n1,3,4\n")
    assert len(drain_open(BurstGPTSource({"path": "t.csv", **ONCE}, make_context(spec_dir=str(tmp_path))))) == 1
    with pytest.raises(InputFileError, match=r"t\.csv:1: missing column 'model'"):
        BurstGPTSource({"path": "t.csv", "models": ["GPT-4"]}, make_context(spec_dir=str(tmp_path)))


def test_skip_bad_rows_counts_and_reports_them(tmp_path: Path) -> None:
    rows = [HEADER, "1,ChatGPT,3,4,7,Conversation log\n", "2,ChatGPT,x,4,7,Conversation log\n",
            "3,ChatGPT,3\n", "4,GPT-4,5,6,11,Conversation log\n"]
    (tmp_path / "t.csv").write_text("".join(rows))
    source = BurstGPTSource({"path": "t.csv", "skip_bad_rows": True, **ONCE}, make_context(spec_dir=str(tmp_path)))
    assert [r.context_tokens for r in drain_open(source)] == [3, 5]
    stats = source.describe()["stats"]
    assert stats["skipped"] == {"bad_rows": 2}
    assert [example.split(": ", 1)[0].rsplit(":", 1)[1] for example in stats["bad_row_examples"]] == ["3", "4"]
