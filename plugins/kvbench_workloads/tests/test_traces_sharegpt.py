"""ShareGPT replay: cumulative contexts, turn chains, limits, users, tokenizers, bad input."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from kvbench_workloads import tokens
from kvbench_workloads.sharegpt import ShareGPTSource
from trace_helpers import DATA, drain_user, make_context

from kvbench_core.contracts.errors import InputFileError, MissingDependency
from kvbench_core.contracts.workload import Read, Write

# The estimate, so counts do not depend on tiktoken being installed; one cycle, so users' streams end.
CHARS = {"count_tokens": "chars", "cycles": 1}


def chat(tmp_path: Path, conversations: list, name: str = "chat.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(conversations, indent=2))
    return str(path)


def turns(*pairs: tuple[str, str]) -> list[dict[str, str]]:
    return [{"from": role, "value": text} for role, text in pairs]


# 10, 20, 5, 3, 2 and 1 tokens at 4 characters per token
THREE_TURNS = turns(("human", "a" * 40), ("gpt", "b" * 80), ("human", "c" * 20), ("gpt", "d" * 12),
                    ("human", "e" * 8), ("gpt", "f" * 4))


def test_real_pairs_become_one_request_per_exchange() -> None:
    source = ShareGPTSource({"path": "sharegpt_pairs.json", **CHARS}, make_context(users=1))
    requests = drain_user(source, 0)
    conversations = json.loads((DATA / "sharegpt_pairs.json").read_text())
    assert len(requests) == len(conversations) == 10
    for request, conversation in zip(requests, conversations, strict=True):
        human, gpt = (message["value"] for message in conversation["conversations"])
        assert request.context_tokens == math.ceil(len(human) / 4)
        assert request.generate_tokens == min(2048, math.ceil(len(gpt) / 4))
        assert request.reads == ()
        assert request.write == Write(f"{conversation['id']}_turn_0", request.context_tokens)
        assert request.conversation == conversation["id"]
        assert request.arrival_s is None
    assert source.describe()["count_tokens"] == "chars/4"


def test_later_turns_carry_the_whole_conversation_and_read_the_earlier_turns(tmp_path: Path) -> None:
    path = chat(tmp_path, [{"id": "x", "conversations": THREE_TURNS}])
    first, second, third = drain_user(ShareGPTSource({"path": path, **CHARS}, make_context(users=1)), 0)
    assert (first.context_tokens, first.generate_tokens) == (10, 20)
    assert first.reads == () and first.write == Write("x_turn_0", 10)
    assert (second.context_tokens, second.generate_tokens) == (10 + 20 + 5, 3)
    assert second.reads == (Read("x_turn_0", 10, "turn"),)
    assert second.write == Write("x_turn_1", 25)
    assert (third.context_tokens, third.generate_tokens) == (35 + 3 + 2, 1)
    assert third.reads == (Read("x_turn_0", 10, "turn"), Read("x_turn_1", 25, "turn"))
    assert third.write == Write("x_turn_2", 5)


def test_system_text_joins_the_context_and_replies_without_a_prompt_are_history(tmp_path: Path) -> None:
    messages = turns(("gpt", "g" * 8), ("system", "s" * 12), ("human", "h" * 4), ("gpt", "r" * 4))
    path = chat(tmp_path, [{"id": "y", "conversations": messages}])
    (request,) = drain_user(ShareGPTSource({"path": path, **CHARS}, make_context(users=1)), 0)
    assert (request.context_tokens, request.generate_tokens) == (2 + 3 + 1, 1)


def test_context_limit_cuts_a_first_request_and_drops_later_ones(tmp_path: Path) -> None:
    path = chat(tmp_path, [{"id": "x", "conversations": THREE_TURNS}])
    source = ShareGPTSource({"path": path, "max_context_tokens": 30, **CHARS}, make_context(users=1))
    assert [request.context_tokens for request in drain_user(source, 0)] == [10]
    assert source.describe()["stats"]["skipped"] == {"over_context_limit": 2}
    cut = ShareGPTSource({"path": path, "max_context_tokens": 4, **CHARS}, make_context(users=1))
    (request,) = drain_user(cut, 0)
    assert request.context_tokens == 4 and request.write == Write("x_turn_0", 4)


def test_generation_limit_cuts_replies_and_the_history_keeps_the_cut_reply(tmp_path: Path) -> None:
    path = chat(tmp_path, [{"id": "x", "conversations": THREE_TURNS}])
    source = ShareGPTSource({"path": path, "max_generate_tokens": 15, **CHARS}, make_context(users=1))
    first, second, _ = drain_user(source, 0)
    assert first.generate_tokens == 15
    assert second.context_tokens == 10 + 15 + 5


def test_users_take_every_nth_conversation_and_cycles_get_fresh_keys() -> None:
    ids = [entry["id"] for entry in json.loads((DATA / "sharegpt_pairs.json").read_text())]
    source = ShareGPTSource({"path": "sharegpt_pairs.json", **CHARS, "cycles": 2, "think_time": 0.5},
                            make_context(users=3))
    user0 = drain_user(source, 0)
    # ordinals 0, 3, ..., 18 over two cycles of 10 conversations
    expected = [ids[ordinal % 10] + ("" if ordinal < 10 else ".c1") for ordinal in range(0, 20, 3)]
    assert [request.conversation for request in user0] == expected
    assert [request.seq for request in user0] == list(range(len(expected)))
    assert {request.user_id for request in user0} == {0}
    assert all(request.think_s == 0.5 for request in user0)
    assert user0[-1].write is not None and user0[-1].write.key.endswith(".c1_turn_0")
    assert len(drain_user(source, 1)) + len(drain_user(source, 2)) + len(user0) == 20


def test_cycles_zero_keeps_going_and_users_beyond_the_conversations_are_not_idle() -> None:
    source = ShareGPTSource({"path": "sharegpt_pairs.json", **CHARS, "cycles": 0}, make_context(users=25))
    first = source.next_request(24)  # ordinal 24: cycle 2, conversation 4
    assert first is not None and first.conversation is not None and first.conversation.endswith(".c2")
    assert all(source.next_request(3) is not None for _ in range(50))


def test_users_added_by_the_autoscaler_replay_a_lane_as_their_own_conversations() -> None:
    source = ShareGPTSource({"path": "sharegpt_pairs.json", **CHARS}, make_context(users=3))
    lane = drain_user(source, 1)
    added = drain_user(source, 4)
    assert [r.context_tokens for r in added] == [r.context_tokens for r in lane]
    assert {r.user_id for r in added} == {4}
    assert [r.conversation for r in added] == [f"{r.conversation}.u4" for r in lane]


def test_max_conversations_limits_what_is_loaded() -> None:
    source = ShareGPTSource({"path": "sharegpt_pairs.json", "max_conversations": 3, **CHARS}, make_context())
    assert source.describe()["stats"]["requests"] == 3


def test_first_turn_files_need_a_generation_length_for_their_unanswered_prompts() -> None:
    with pytest.raises(InputFileError, match=r"no requests to replay.*unanswered_prompts 20.*unanswered_generate"):
        ShareGPTSource({"path": "sharegpt_first_turn.json", **CHARS}, make_context())
    source = ShareGPTSource({"path": "sharegpt_first_turn.json", "unanswered_generate_tokens": 128, **CHARS},
                            make_context(users=1))
    requests = drain_user(source, 0)
    assert len(requests) == 20 and {request.generate_tokens for request in requests} == {128}


def test_duplicate_and_unsafe_ids_get_distinct_safe_keys(tmp_path: Path) -> None:
    exchange = turns(("human", "hi"), ("gpt", "hello"))
    path = chat(tmp_path, [{"id": "a/b", "conversations": exchange}, {"id": "a/b", "conversations": exchange},
                           {"conversations": exchange}])
    requests = drain_user(ShareGPTSource({"path": path, **CHARS}, make_context(users=1)), 0)
    keys = [request.write.key for request in requests if request.write]
    assert keys == ["a%2Fb_turn_0", "a%2Fb~1_turn_0", "~2_turn_0"]


def test_token_counter_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokens, "_tiktoken_encoding", lambda: None)
    assert tokens.token_counter("auto", 4).name == "chars/4"
    with pytest.raises(MissingDependency, match="tiktoken"):
        tokens.token_counter("tiktoken", 4)

    class Encoding:
        def encode(self, text: str, disallowed_special: tuple = ()) -> list[int]:
            return list(range(len(text.split())))

    monkeypatch.setattr(tokens, "_tiktoken_encoding", Encoding)
    counter = tokens.token_counter("auto", 4)
    assert counter.name == "tiktoken/cl100k_base" and counter.count("three words here") == 3
    assert counter.count("") == 1
    assert tokens.token_counter("chars", 2.5).count("x" * 6) == 3


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('[{"id": "a", "conversations": []},\n {"id": "b", "conversations": [}]', r"chat\.json:2: invalid JSON"),
        ('{"id": "a"}', r"chat\.json:1: expected a JSON array"),
        ('[\n{"id": "a"}\n]', r"chat\.json:2: conversations: required field is missing"),
        ('[{"id": "a", "conversations": [{"from": "robot", "value": "x"}]}]',
         r"chat\.json:1: conversations\[0\]\.from: expected a role .*got 'robot'"),
        ('[{"id": "a", "conversations": [{"from": "human", "value": 3}]}]',
         r"chat\.json:1: conversations\[0\]\.value: expected a string, got int"),
        ('[{"id": "a", "conversations": []} {"id": "b"}]', r"chat\.json:1: invalid JSON \(expected ','"),
    ],
)
def test_malformed_files_name_file_line_and_field(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "chat.json"
    path.write_text(content)
    with pytest.raises(InputFileError, match=message):
        ShareGPTSource({"path": str(path), **CHARS}, make_context())


def line_of(path: str, text: str) -> int:
    """The line an element starts on: the one before its first key, in json.dumps(indent=2) layout."""
    return next(number for number, line in enumerate(Path(path).read_text().splitlines(), 1) if text in line) - 1


def test_skip_bad_rows_counts_bad_conversations(tmp_path: Path) -> None:
    good = {"id": "ok", "conversations": turns(("human", "hi"), ("gpt", "hello"))}
    path = chat(tmp_path, [good, {"id": "bad"}, {"id": "worse", "conversations": "nope"}])
    source = ShareGPTSource({"path": path, "skip_bad_rows": True, **CHARS}, make_context())
    stats = source.describe()["stats"]
    assert stats["requests"] == 1
    assert stats["skipped"] == {"bad_rows": 2}
    bad, worse = line_of(path, '"bad"'), line_of(path, '"worse"')
    assert stats["bad_row_examples"] == [
        f"{path}:{bad}: conversations: required field is missing",
        f"{path}:{worse}: conversations: expected a list of messages, got str",
    ]


def test_elements_larger_than_a_read_chunk_keep_their_line_numbers(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from kvbench_workloads import rows

    path = chat(tmp_path, [{"id": f"c{n}", "conversations": THREE_TURNS} for n in range(3)])
    expected = [line_of(path, f'"c{n}"') for n in range(3)]
    monkeypatch.setattr(rows, "_CHUNK_CHARS", 7)
    assert [line for line, _ in rows.json_array(Path(path))] == expected
    source = ShareGPTSource({"path": path, **CHARS}, make_context(users=1))
    assert source.describe()["stats"]["requests"] == 9
