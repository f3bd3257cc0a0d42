"""Mooncake (Kimi) trace replay: arrival times plus the prefix blocks each request shares.

One JSON object per line: ``timestamp`` (ms), ``input_length``,
``output_length`` and ``hash_ids``, one id per ``block_tokens``-token block of
the prompt (512 in the published traces; the last block may be partial).
Each block is the KV entry ``mc_block_{hash}``: a request reads the blocks
already stored - a real prefix hit, decided by the cache at run time - and
writes the others (``kvplan``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from kvbench_workloads.kvplan import TraceEntry
from kvbench_workloads.replay import OpenLoopTraceSource, options_schema
from kvbench_workloads.rows import LoadReport, RowError, integer, json_lines, number, required


class MooncakeSource(OpenLoopTraceSource):
    """Replays a Mooncake JSONL trace with prefix-block reuse."""

    name = "mooncake"
    suffixes: ClassVar[tuple[str, ...]] = (".jsonl",)
    options_schema = options_schema(
        {
            "block_tokens": {"type": "integer", "minimum": 1, "default": 512,
                             "description": "tokens per hash_ids block (512 in the published Mooncake traces)"},
        },
        open_loop=True,
    )

    def parse_file(self, path: Path, report: LoadReport) -> Iterator[TraceEntry]:
        for line, row in json_lines(path, report):
            try:
                entry = _entry(row, self.options["block_tokens"], f"{path.name}:{line}")
            except RowError as error:
                report.bad_row(path, line, error)
                continue
            yield entry


def _entry(row: Any, block_tokens: int, origin: str) -> TraceEntry:
    if not isinstance(row, dict):
        raise RowError("row", f"expected a JSON object, got {type(row).__name__}")
    input_tokens = integer(required(row, "input_length"), "input_length")
    hash_ids = required(row, "hash_ids")
    if not isinstance(hash_ids, list):
        raise RowError("hash_ids", f"expected a list of block ids, got {type(hash_ids).__name__}")
    ids = [integer(value, f"hash_ids[{index}]") for index, value in enumerate(hash_ids)]
    if ids and (len(ids) - 1) * block_tokens >= input_tokens:
        raise RowError("hash_ids", f"{len(ids)} blocks of {block_tokens} tokens are more than "
                                   f"input_length {input_tokens} fills (is block_tokens right?)")
    return TraceEntry(
        origin=origin,
        input_tokens=input_tokens,
        output_tokens=integer(required(row, "output_length"), "output_length"),
        timestamp_s=number(required(row, "timestamp"), "timestamp") / 1000,
        blocks=tuple(
            (f"mc_block_{block}", min(block_tokens, input_tokens - index * block_tokens))
            for index, block in enumerate(ids)
        ),
    )
