"""Workload figures of a trace: lengths, conversations, prefix reuse, arrivals.

They are computed from the requests a source actually replays (after filters,
truncation and skipped rows), not from the raw file, so ``kvbench workload
stats`` shows exactly what a run with the same options puts in its result.
Percentiles are the nearest rank (docs/metrics.md), the rule a run's result
uses, so each is a length some request had.  Reuse assumes an
unbounded cache: it is the trace's ceiling, which a run's hit rate is
measured against.
"""

from __future__ import annotations

from array import array
from collections import Counter
from typing import Any

import numpy as np

from kvbench_core.contracts.percentiles import sample_percentiles
from kvbench_core.contracts.workload import Request
from kvbench_workloads.rows import LoadReport


def distribution(values: np.ndarray) -> dict[str, float]:
    """mean / p50 / p90 / p99 / max; the percentiles by the nearest rank, as a run's result computes them."""
    p50, p90, p99 = sample_percentiles(values, (50, 90, 99))
    return {"mean": round(float(values.mean()), 3), "p50": round(float(p50), 3), "p90": round(float(p90), 3),
            "p99": round(float(p99), 3), "max": round(float(values.max()), 3)}


class TraceStats:
    """Accumulates one cycle of requests, in trace order."""

    def __init__(self) -> None:
        self._inputs = array("q")
        self._outputs = array("q")
        self._times = array("d")
        self._turns: Counter[str] = Counter()
        self._single = 0
        self._reused_tokens = 0
        self._blocks = 0
        self._blocks_seen = 0
        self._stored_blocks: set[str] = set()

    @property
    def requests(self) -> int:
        return len(self._inputs)

    def add(self, request: Request, trace_s: float | None) -> None:
        self._inputs.append(request.context_tokens)
        self._outputs.append(request.generate_tokens)
        if trace_s is not None:
            self._times.append(trace_s)
        if request.conversation is None:
            self._single += 1
        else:
            self._turns[request.conversation] += 1
        for read in request.reads:
            if read.on_miss is None:  # an earlier turn of this conversation, stored by this replay
                self._reused_tokens += read.tokens
                continue
            self._blocks += 1
            if read.key in self._stored_blocks:
                self._blocks_seen += 1
                self._reused_tokens += read.tokens
            else:
                self._stored_blocks.add(read.key)

    def summary(self, report: LoadReport) -> dict[str, Any]:
        """The figures; needs at least one request."""
        turns = np.fromiter(self._turns.values(), dtype=np.int64, count=len(self._turns))
        input_total = sum(self._inputs)
        gaps = np.diff(np.asarray(self._times))
        figures: dict[str, Any] = {
            "requests": self.requests,
            "conversations": len(turns),
            "multi_turn_conversations": int((turns >= 2).sum()),
            "turns_per_conversation": (
                {"mean": round(float(turns.mean()), 3), "max": int(turns.max())} if len(turns) else None
            ),
            "single_requests": self._single,
            "input_tokens": distribution(np.asarray(self._inputs)),
            "output_tokens": distribution(np.asarray(self._outputs)),
            "prefix_reuse_rate": {
                "by_tokens": round(self._reused_tokens / input_total, 4) if input_total else 0.0,
                "by_blocks": round(self._blocks_seen / self._blocks, 4) if self._blocks else None,
            },
            "span_s": round(self._times[-1] - self._times[0], 3) if self._times else None,
            "inter_arrival_s": distribution(gaps) if len(gaps) else None,
            "skipped": dict(sorted(report.skipped.items())),
        }
        if report.bad_row_examples:
            figures["bad_row_examples"] = list(report.bad_row_examples)
        return figures
