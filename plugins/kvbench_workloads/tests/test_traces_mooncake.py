"""Mooncake replay: prefix blocks as shared entries, hits decided by the cache, timestamps, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kvbench_workloads.mooncake import MooncakeSource
from trace_helpers import DATA, drain_open, make_context

from kvbench_core.contracts.errors import InputFileError
from kvbench_core.contracts.workload import Read, Request, Write

TRACE = {"path": "mooncake_conversation.jsonl", "cycles": 1}


def raw_rows() -> list[dict]:
    return [json.loads(line) for line in (DATA / "mooncake_conversation.jsonl").read_text().splitlines()]


def replay_through_a_cache(requests: list[Request]) -> list[tuple[int, int]]:
    """(blocks read, blocks written) per request, with on_miss followed as the runner's cache does."""
    stored: set[str] = set()
    outcome = []
    for request in requests:
        hits = misses = 0
        for read in request.reads:
            if read.key in stored:
                hits += 1
            else:
                assert read.on_miss == Write(read.key, read.tokens, "prefix")
                stored.add(read.key)
                misses += 1
        outcome.append((hits, misses))
    return outcome


def test_each_hashed_block_is_a_prefix_entry_and_the_last_one_may_be_partial() -> None:
    first = drain_open(MooncakeSource(TRACE, make_context()))[0]
    assert (first.context_tokens, first.generate_tokens) == (6758, 500)
    assert len(first.reads) == 14
    assert first.reads[0] == Read("mc_block_0", 512, "prefix", on_miss=Write("mc_block_0", 512, "prefix"))
    assert first.reads[-1].key == "mc_block_13" and first.reads[-1].tokens == 6758 - 13 * 512
    assert first.write is None  # the blocks cover the whole prompt, and decode reads all of them
    assert first.decode_keys == tuple(f"mc_block_{i}" for i in range(14))


def test_a_request_sharing_hash_ids_reads_the_stored_blocks_instead_of_writing_them() -> None:
    first, second, *_ = drain_open(MooncakeSource(TRACE, make_context()))
    assert first.reads[0].key == second.reads[0].key == "mc_block_0"
    (first_hits, first_writes), (second_hits, second_writes) = replay_through_a_cache([first, second])
    assert (first_hits, first_writes) == (0, 14)
    assert (second_hits, second_writes) == (1, len(second.reads) - 1)


def test_block_reuse_rate_is_the_share_of_blocks_seen_before() -> None:
    seen: set[int] = set()
    repeats = total = 0
    for row in raw_rows():
        for block in row["hash_ids"]:
            repeats += block in seen
            total += 1
            seen.add(block)
    source = MooncakeSource(TRACE, make_context())
    reuse = source.describe()["stats"]["prefix_reuse_rate"]
    assert reuse["by_blocks"] == round(repeats / total, 4)
    hits = sum(hits for hits, _ in replay_through_a_cache(drain_open(source)))
    assert hits == repeats


def test_timestamps_are_milliseconds() -> None:
    times = [row["timestamp"] / 1000 for row in raw_rows()]
    requests = drain_open(MooncakeSource({**TRACE, "speedup": 2}, make_context()))
    assert [request.arrival_s for request in requests] == pytest.approx([t / 2 for t in times])


def test_tokens_beyond_the_hashed_blocks_are_the_request_s_own_write(tmp_path: Path) -> None:
    (tmp_path / "t.jsonl").write_text('{"timestamp": 0, "input_length": 1100, "output_length": 7, "hash_ids": [4, 9]}\n'
                                      '{"timestamp": 5, "input_length": 30, "output_length": 2, "hash_ids": []}\n')
    blocks, plain = drain_open(MooncakeSource({"path": "t.jsonl", "cycles": 1}, make_context(spec_dir=str(tmp_path))))
    assert [(read.key, read.tokens) for read in blocks.reads] == [("mc_block_4", 512), ("mc_block_9", 512)]
    assert blocks.write == Write("mooncake~0_turn_0", 1100 - 1024)
    assert plain.reads == () and plain.write == Write("mooncake~1_turn_0", 30)


def test_block_keys_repeat_across_cycles_but_request_keys_do_not(tmp_path: Path) -> None:
    (tmp_path / "t.jsonl").write_text('{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1]}\n')
    first, second = drain_open(MooncakeSource({"path": "t.jsonl", "cycles": 2}, make_context(spec_dir=str(tmp_path))))
    assert first.reads == second.reads
    assert first.write is not None and second.write is not None and first.write.key != second.write.key
    assert replay_through_a_cache([first, second]) == [(0, 1), (1, 0)]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]', r"t\.jsonl:2: json: invalid JSON"),
        ('{"timestamp": 0, "output_length": 1, "hash_ids": [1]}',
         r"t\.jsonl:2: input_length: required field is missing"),
        ('{"timestamp": 0, "input_length": "ten", "output_length": 1, "hash_ids": [1]}',
         r"t\.jsonl:2: input_length: expected a whole number >= 0, got 'ten'"),
        ('{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1, "x"]}',
         r"t\.jsonl:2: hash_ids\[1\]: expected a whole number"),
        ('{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": 1}',
         r"t\.jsonl:2: hash_ids: expected a list"),
        ('{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1, 2, 3]}',
         r"t\.jsonl:2: hash_ids: 3 blocks of 512 tokens are more than input_length 600 fills"),
        ('[1, 2]', r"t\.jsonl:2: row: expected a JSON object, got list"),
    ],
)
def test_malformed_lines_name_file_line_and_field(tmp_path: Path, line: str, message: str) -> None:
    good = '{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}'
    (tmp_path / "t.jsonl").write_text(f"{good}\n{line}\n")
    with pytest.raises(InputFileError, match=message):
        MooncakeSource({"path": "t.jsonl"}, make_context(spec_dir=str(tmp_path)))
    skipping = MooncakeSource({"path": "t.jsonl", "skip_bad_rows": True}, make_context(spec_dir=str(tmp_path)))
    assert skipping.describe()["stats"]["skipped"] == {"bad_rows": 1}
    assert skipping.describe()["stats"]["requests"] == 1
