"""Invariants every result must satisfy, re-derived from the result's own sections.

A result is attached to a claim; these checks make it a contract.  Each one
compares two figures that are counted or computed separately (the tiers'
operation totals against the time series' per-interval counts, the cache's
read outcomes against the per-kind read counters, a headline figure
against the sections it is derived from) and fails on any disagreement
beyond rounding.  They read only the result document, so the run writes
them into ``checks`` and ``kvbench check`` recomputes them on a file it
never trusts.  docs/results.md ("checks") defines each one.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

from kvbench_core.results.capacity_check import capacity_answer

GB = 1e9
#: Relative slack for figures computed along two float paths (counts compare exactly).
REL_TOL = 1e-6
#: Rounding of the time series' ``interval_s`` (milliseconds).
SERIES_ROUNDING_S = 0.0005
READ_KINDS = ("prefix", "turn", "rag")
#: How late a duration-stopped window may close.  It ends at its planned end now (open + duration,
#: ``Telemetry.start_measuring``, issue #29); results written before closed it at the loop's next turn, up to
#: this late, and ``kvbench check`` still reads them.
WINDOW_LATE_S = 0.5
WINDOW_LATE_SHARE = 0.02
#: The largest tail padding of one O_DIRECT operation is one block of this minus a byte.
DIRECT_ALIGN = 4096


@dataclass(frozen=True)
class Check:
    """One invariant: passed, or the two sides that disagree and why they should not."""

    name: str
    passed: bool
    expected: float | int | None
    observed: float | int | None
    detail: str

    def line(self) -> str:
        return f"{self.name}: {self.detail} (expected {_show(self.expected)}, found {_show(self.observed)})"


def _show(value: float | int | None) -> str:
    if value is None:
        return "-"
    return f"{value:,}" if isinstance(value, int) else f"{value:,.6g}"


def _close(expected: float, observed: float, slack: float) -> bool:
    return abs(expected - observed) <= slack + REL_TOL * max(abs(expected), abs(observed))


def _check(name: str, expected: float | int, observed: float | int | None, detail: str,
           slack: float = 0.0) -> Check:
    """Counts (two ints, no slack) must be equal; figures computed along two float paths within rounding."""
    if isinstance(expected, int) and isinstance(observed, int) and not slack:
        return Check(name, expected == observed, expected, observed, detail)
    passed = observed is not None and _close(float(expected), float(observed), slack)
    return Check(name, passed, expected, observed, detail)


def _tier_bytes(metrics: dict[str, Any], series: list[dict[str, Any]]) -> Iterator[Check]:
    """Per tier and op, the bytes the tier's device moved in the window = the sum of the bytes its commands
    moved in each interval of the time series (both booked by time; the series covers the window).  A result
    from before the by-time booking compares its operation stats' device bytes."""
    if not series or not all("tiers" in p for p in series):
        return
    for name, tier in metrics["tiers"].items():
        for op in ("read", "write"):
            counted = sum((p["tiers"].get(name) or {}).get(f"{op}_bytes", 0) for p in series)
            device = (tier[op].get("device") or {}).get("window")
            moved = device["bytes"] if device else tier[op].get("physical_bytes", tier[op]["bytes"])
            yield _check(f"tier_bytes.{name}.{op}", moved, counted,
                         f"{name} {op} bytes = sum of the time series' {name} {op} bytes")
    if all("generated_tokens" in p for p in series):
        yield _check("series_tokens", metrics["requests"]["generated_tokens"],
                     sum(p["generated_tokens"] for p in series),
                     "generated tokens of completed requests = sum of the time series' generated tokens")


def _requests(metrics: dict[str, Any], series: list[dict[str, Any]]) -> Iterator[Check]:
    """A completed request is counted and timed at one place (``Telemetry.record_request``): the count of
    completed requests = the end-to-end histogram's count = the sum of the time series' requests."""
    completed = metrics["requests"]["completed"]
    timed = (metrics.get("histograms") or {}).get("end_to_end")
    if timed is not None:
        yield _check("requests_timed", completed, timed["count"],
                     "completed requests = requests the end-to-end latency histogram timed")
    if series and all("requests" in p for p in series):
        yield _check("series_requests", completed, sum(p["requests"] for p in series),
                     "completed requests = sum of the time series' requests")


def _logical_bytes(metrics: dict[str, Any]) -> Iterator[Check]:
    """Without a codec a tier's KV bytes are the bytes its device moved (``physical_bytes``, which the time
    series and the commands' bytes check): one tally cannot be edited alone."""
    for name, tier in metrics["tiers"].items():
        if ((tier.get("describe") or {}).get("codec") or {}).get("name", "none") != "none":
            continue
        for op in ("read", "write"):
            if "physical_bytes" in tier[op]:
                yield _check(f"logical_bytes.{name}.{op}", tier[op]["physical_bytes"], tier[op]["bytes"],
                             f"{name} {op} bytes = the bytes its device moved (no codec)")


def _command_bytes(metrics: dict[str, Any]) -> Iterator[Check]:
    """Per tier and op, for a tier that reports its device commands: as many commands counted as timed, and
    the bytes of its operations = the sum of its commands' bytes (an O_DIRECT tier pads each operation's
    tail to one 4 KiB block at most).
    A failed operation may have issued commands it is not counted for, so tiers with errors are skipped."""
    for name, tier in metrics["tiers"].items():
        padded = bool((tier.get("describe") or {}).get("direct"))
        for op in ("read", "write"):
            stats = tier[op]
            if "command_bytes" not in stats or not stats["histograms"].get("command", {}).get("count") \
                    or stats["errors"]:
                continue
            yield _check(f"command_count.{name}.{op}", stats["commands"], stats["histograms"]["command"]["count"],
                         f"{name} {op} commands counted = commands the tier's recorder timed")
            moved, commands = stats.get("physical_bytes", stats["bytes"]), stats["command_bytes"]
            if padded:
                ok = moved <= commands <= moved + stats["ops"] * (DIRECT_ALIGN - 1)
                yield Check(f"command_bytes.{name}.{op}", ok, moved, commands,
                            f"{name} {op} bytes = its commands' bytes, less each O_DIRECT tail's padding")
            else:
                yield _check(f"command_bytes.{name}.{op}", moved, commands,
                             f"{name} {op} bytes = the sum of its commands' bytes")


def bytes_by_time(metrics: dict[str, Any]) -> Iterator[Check]:
    """Per tier and op, what its device moved before the window (set-up, warm-up), in it and after it (the
    drain), each command booked in the phase it completed in, = every byte the tier's commands reported
    moving (its recorder's count, kept before any booking): no byte is lost or counted twice whatever its
    request did (cancelled, failed, begun in warm-up); a worker the drain abandoned had moved bytes no operation
    booked, which ``metrics.drain.abandoned_bytes`` holds.  And the drain's bytes are the drain phase's."""
    drained = dict.fromkeys(("read", "write"), 0)
    drain = metrics.get("drain") or {}
    abandoned = drain.get("abandoned_bytes") or {}  # a worker the drain gave up on: its unbooked commands
    for name, tier in metrics["tiers"].items():
        for op in ("read", "write"):
            device = tier[op].get("device")
            if not device:  # a result from before the by-time booking
                return
            phases = sum(device[phase]["bytes"] for phase in ("warmup", "window", "drain"))
            drained[op] += device["drain"]["bytes"]
            left = (abandoned.get(name) or {}).get(op, 0)
            yield _check(f"bytes_by_time.{name}.{op}", device["moved_bytes"], phases + left,
                         f"{name} {op} bytes before + in + after the window"
                         f"{' + abandoned in flight' if left else ''} = every byte its commands moved")
    for op in ("read", "write"):
        if f"{op}_bytes" in drain:
            yield _check(f"drain_bytes.{op}", drained[op], drain[f"{op}_bytes"],
                         f"the drain's {op} bytes = the tiers' {op} bytes after the window closed")


def _reads(metrics: dict[str, Any]) -> Iterator[Check]:
    """Every cache read is a hit or a miss: per read kind (shared prefix, earlier turn, RAG chunk), and
    per tier the reads the cache saw served there = the reads the tier section reports served."""
    counters = metrics["cache"].get("counters") or {}
    for kind in READ_KINDS:
        reads = counters.get(f"{kind}_reads", 0)
        outcomes = counters.get(f"{kind}_hits", 0) + counters.get(f"{kind}_misses", 0)
        if reads or outcomes:
            yield _check(f"{kind}_reads", reads, outcomes, f"{kind} reads = {kind} hits + misses")
    served = metrics["cache"]["reads_served_by_tier"]
    for name, tier in metrics["tiers"].items():
        yield _check(f"reads_served.{name}", served.get(name, 0), tier["reads_served"],
                     f"reads the cache served from {name} = the tier's reads_served")


def _decode_bytes(result: dict[str, Any], metrics: dict[str, Any]) -> Iterator[Check]:
    """decode bytes = decode tokens × bytes per token (all ranks), and no more than the tiers read."""
    model = result.get("model") or {}
    per_token = model.get("bytes_per_token_all_ranks")
    head = metrics["headline"]
    if per_token is None or head.get("decode_bytes_read_gb") is None:
        return
    decode = metrics["requests"]["decode_tokens_read"] * per_token
    yield _check("decode_bytes", round(decode / GB, 6), head["decode_bytes_read_gb"],
                 "decode_bytes_read_gb = decode tokens read × bytes per token", 5e-7)
    read = sum(t["read"]["bytes"] for t in metrics["tiers"].values())
    yield Check("decode_bytes_read", decode <= read, read, decode,
                "decode bytes cannot exceed the bytes the tiers read")


def _written(metrics: dict[str, Any]) -> Iterator[Check]:
    """Bytes written to the tiers = new entries stored + demotion copies + promotion copies.  A shared
    tier's store without a transfer (``dedup_bytes``) stored its bytes but wrote nothing: they are on the
    written side apart, so ``bytes`` stays what was transferred.  A result from before ``promoted_bytes``
    that promoted only gives a lower bound."""
    cache = metrics["cache"]
    counters = cache.get("counters") or {}
    written = sum(t["write"]["bytes"] + t["write"].get("dedup_bytes", 0) for t in metrics["tiers"].values())
    parts = (counters.get("stored_entry_bytes", 0) + sum(cache["demotions_bytes"].values())
             + counters.get("promoted_bytes", 0))
    detail = "written + deduplicated bytes = stored + demoted + promoted bytes"
    if cache.get("promotions") and "promoted_bytes" not in counters:
        yield Check("written_bytes", written >= parts, parts, written,
                    detail.replace(" = ", " >= ", 1) + " (an older result: promotion copies not sized)")
        return
    yield _check("written_bytes", parts, written, detail)


def _stored_entries(metrics: dict[str, Any]) -> Iterator[Check]:
    """Entries stored in the tiers (new entries + demotion and promotion copies) = the tiers' write
    operations + their stores without a transfer (``dedup_stores``): each copy was sent once or found
    already there."""
    cache = metrics["cache"]
    stored = (cache.get("counters") or {}).get("stored_entries")
    if stored is None:  # a result from before the count
        return
    parts = stored + sum((cache.get("demotions_count") or {}).values()) + cache.get("promotions", 0)
    writes = sum(t["write"]["ops"] + t["write"].get("dedup_stores", 0) for t in metrics["tiers"].values())
    yield _check("stored_entries", parts, writes,
                 "write operations + stores without a transfer = stored + demoted + promoted entries")


def _throughput(metrics: dict[str, Any]) -> Iterator[Check]:
    """The throughput counts the generated tokens of completed requests over the measured window."""
    window = metrics["window"]["measured_s"]
    stated = metrics["headline"].get("avg_throughput_tokens_per_sec")
    if window <= 0 or stated is None:
        return
    tokens = metrics["requests"]["generated_tokens"]
    yield _check("throughput_tokens", tokens, round(stated * window, 3),
                 "avg throughput × measured window = generated tokens of completed requests",
                 5e-4 * window + 5e-4)  # the rate's rounding to 3 decimals times the window, and the product's


def _window(result: dict[str, Any], metrics: dict[str, Any], series: list[dict[str, Any]]) -> Iterator[Check]:
    """The measured window is the duration (a run stopped by its duration cannot be shorter, and the
    time series covers the window interval by interval)."""
    measured = metrics["window"]["measured_s"]
    duration = ((result.get("spec") or {}).get("resolved") or {}).get("duration")
    if duration and (result.get("run") or {}).get("stop_reason") == "duration reached":
        late = max(WINDOW_LATE_S, WINDOW_LATE_SHARE * duration)
        skew = _last_opening(result)
        detail = f"a run stopped by its duration measured the duration (closed at most {late:g} s late)"
        if skew:
            detail = (f"a merged run's window, from the first client's open to the last one's close, is the "
                      f"duration, closed at most {late:g} s late, after the last client's opening ({skew:g} s)")
        yield Check("window_duration", duration - SERIES_ROUNDING_S <= measured <= duration + late + skew, duration,
                    measured, detail)
    if series:  # a merged series too: it is on one wall-clock grid over the merged window
        covered = sum(p["interval_s"] for p in series)
        yield _check("window_series", measured, round(covered, 6), "measured window = sum of the time "
                     "series' intervals", SERIES_ROUNDING_S * len(series) + 1e-6)


def _last_opening(result: dict[str, Any]) -> float:
    """How long after the first client's window the last one opened (0 for a single run): clients released
    together open theirs after their own set-up and warm-up, so on one wall clock they are skewed."""
    offsets = [c.get("window_offset_s") or 0.0 for c in result.get("clients") or []]
    return max(offsets, default=0.0)


def _integrity(metrics: dict[str, Any]) -> Iterator[Check]:
    """A verified read returned the bytes written: a result whose reads came back corrupted is not one whose
    figures hold, whatever else adds up (status ``failed``, rule ``integrity``: results/status.py)."""
    verify = metrics.get("verify") or {}
    if verify.get("enabled") or verify.get("integrity_errors"):
        yield _check("verify_integrity", 0, int(verify.get("integrity_errors", 0)),
                     "verified reads that returned bytes different from what was written")


def run_checks(result: dict[str, Any]) -> dict[str, Any]:
    """The ``checks`` section of ``result``: every applicable invariant, and the violated ones as lines."""
    metrics = result.get("metrics") or {}
    if "window" not in metrics:  # no telemetry (stopped before measuring) or a trials summary
        return {"passed": True, "violations": [], "items": []}
    series = result.get("timeseries") or []
    found = [*_tier_bytes(metrics, series), *_requests(metrics, series), *_logical_bytes(metrics),
             *_command_bytes(metrics), *bytes_by_time(metrics), *_reads(metrics), *_decode_bytes(result, metrics),
             *_written(metrics), *_stored_entries(metrics), *_throughput(metrics), *_window(result, metrics, series),
             *_integrity(metrics), *capacity_answer(result, _check)]
    violations = [c.line() for c in found if not c.passed]
    return {"passed": not violations, "violations": violations,
            "items": [{**asdict(c), "expected": _json_number(c.expected), "observed": _json_number(c.observed)}
                      for c in found]}


def _json_number(value: float | int | None) -> float | int | None:
    return None if isinstance(value, float) and not math.isfinite(value) else value


def attention_lines(result: dict[str, Any]) -> list[str]:
    """What the printed summary shows under a result's first line: a violated invariant (one line, the
    others counted) and every declared value a detected one contradicts (``result["warnings"]``)."""
    lines = []
    violations = (result.get("checks") or {}).get("violations") or []
    if violations:
        more = f" (+{len(violations) - 1} more in the result's checks)" if len(violations) > 1 else ""
        lines.append(f"  INVARIANT VIOLATED: {violations[0]}{more}")
    lines += [f"  WARNING: {warning}" for warning in result.get("warnings") or []]
    return lines
