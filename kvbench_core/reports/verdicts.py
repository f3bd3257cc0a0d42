"""Why a QoS verdict came out as it did, and what to try next: one line each, from the result alone.

A newcomer who reads ``responsive 6889/100 ms MISSED`` cannot tell whether the tool or the disk is at
fault.  The answer is in the result: tier latencies are per KV entry (an entry of a 32 KiB/token model
with an 8k-token context is 256 MiB, not a 4 KiB block), a request's service time is its queue wait plus
its entries' reads and writes, and each tier's time splits into device (what the backend measured waiting
on the storage: system calls on nvme, HTTP round trips on s3) and host, everything else (filling and
copying buffers, a codec's encode/decode, kvbench's Python).  The summary, the HTML report and the
workbook print these same lines.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kvbench_core.contracts.units import format_bytes
from kvbench_core.results.document import ResultDocument


@dataclass(frozen=True)
class Share:
    """Where service time goes: ``layer`` is queue, host or device; ``tier``/``op`` name the storage part."""

    layer: str
    share: float  # of the mean service time
    tier: str | None = None
    op: str | None = None
    mean_ms: float | None = None  # one operation's mean time in that layer

    def describe(self) -> str:
        if self.layer == "queue":
            return f"queue wait for a worker ({self.share:.0%} of service time)"
        return f"{self.tier} {self.op} {self.layer} time ({self.share:.0%} of service time)"


@dataclass(frozen=True)
class Verdict:
    qos: str
    p95_ms: float
    sla_ms: float
    met: bool
    why: str
    next_step: str


def mean_entry_bytes(document: ResultDocument) -> float | None:
    """Bytes per tier operation, reads and writes of every tier together: the size one latency is for."""
    tiers = document.tiers
    ops = sum(t[op].get("ops", 0) for t in tiers.values() for op in ("read", "write"))
    nbytes = sum(t[op].get("bytes", 0) for t in tiers.values() for op in ("read", "write"))
    return nbytes / ops if ops else None


def op_entry_bytes(document: ResultDocument, tier: str | None, op: str | None) -> float | None:
    """Bytes per operation of one tier's reads or writes: the size that tier's mean time is for."""
    stats = _tier_info(document, tier).get(op or "") or {}
    return stats["bytes"] / stats["ops"] if stats.get("ops") else None


def entry_phrase(document: ResultDocument) -> str | None:
    """"per KV entry of 236.00 MiB mean (7,547 tokens x 32.00 KiB)"."""
    entry = mean_entry_bytes(document)
    if entry is None:
        return None
    per_token = document.bytes_per_token
    tokens = f" ({entry / per_token:,.0f} tokens x {format_bytes(per_token)})" if per_token else ""
    return f"per KV entry of {format_bytes(entry)} mean{tokens}"


def dominant_share(document: ResultDocument) -> Share | None:
    """The largest part of the mean service time: the queue wait, or one tier's op in one layer.

    A request's mean storage time is split over the tiers in proportion to each (tier, op, layer)'s total
    time per request (ops x mean / requests), so the shares of the parts add up to the service time."""
    latency = document.request_latency
    queue = (latency.get("queue_wait") or {}).get("mean")
    storage = (latency.get("storage") or {}).get("mean")
    if queue is None or storage is None or queue + storage <= 0:
        return None
    service = queue + storage
    parts = _tier_parts(document.tiers)
    total = sum(p[0] for p in parts)
    shares = [Share("queue", queue / service)]
    shares += [Share(layer, storage / service * time_ms / total, name, op, mean)
               for time_ms, name, op, layer, mean in parts] if total else []
    return max(shares, key=lambda s: s.share)


def _tier_parts(tiers: Mapping[str, Mapping[str, Any]]) -> list[tuple[float, str, str, str, float]]:
    """(total ms, tier, op, layer, mean ms) of every (tier, op, layer) that ran and was timed: its total time
    over the run (ops x mean) is what weighs its share of the storage time."""
    parts = []
    for name, tier in tiers.items():
        for op in ("read", "write"):
            ops = tier[op].get("ops", 0)
            for layer in ("host", "device"):
                mean = ((tier[op].get("latency_ms") or {}).get(layer) or {}).get("mean")
                if ops and mean:
                    parts.append((ops * mean, name, op, layer, mean))
    return parts


def explain(document: ResultDocument) -> list[Verdict]:
    """One verdict per QoS class that had requests and an SLA judged on its service latency."""
    entry = entry_phrase(document) or "per KV entry"
    dominant = dominant_share(document)
    verdicts = []
    for name, qos in document.class_figures.items():
        service = qos.get("service_latency_ms") or {}
        p95, sla = service.get("p95"), qos.get("sla_p95_ms")
        if not qos.get("requests") or p95 is None or sla is None:
            continue
        met = bool(qos.get("sla_met"))
        ratio = f"{sla / p95:.1f}x headroom" if met and p95 else f"{p95 / sla:.1f}x over"
        why = f"{name} {'met' if met else 'MISSED'}: service p95 {p95:,.1f} ms vs SLA {sla:,.0f} ms ({ratio}); " \
              f"latencies are {entry}"
        if dominant is not None:
            why += f"; mostly {dominant.describe()}"
        verdicts.append(Verdict(name, p95, sla, met, why, next_step(document, dominant, sla, met)))
    return verdicts


def starved_classes(document: ResultDocument) -> list[str]:
    """``batch STARVED (0 of 12 issued served)``: a class whose issued requests all went unserved is a verdict
    too (higher classes took every worker), not a class with nothing to say."""
    issued = ((document.workload or {}).get("arrivals") or {}).get("issued_by_qos") or {}
    return [f"{name} STARVED (0 of {issued[name]} issued served)" for name, c in document.class_figures.items()
            if not c.get("requests") and issued.get(name)]


def next_step(document: ResultDocument, dominant: Share | None, sla_ms: float, met: bool) -> str:
    """What a storage engineer would try next, from what dominated the service time."""
    if met:
        return _step_when_met(document)
    if dominant is None:
        return "next: too few requests to say what dominates; run longer (duration) or with more users"
    if dominant.layer == "queue":
        workload = document.spec.resolved.get("workload") or {}
        return (f"next: requests wait for one of {workload.get('max_inflight', '?')} workers (max_inflight): "
                f"lower {load_knob(document)}, or raise workload.max_inflight if the devices have queue depth to "
                "spare")
    if dominant.layer == "host":
        return _host_step(document, dominant)
    return _device_step(document, dominant, sla_ms)


def _step_when_met(document: ResultDocument) -> str:
    """Every SLA met: find where it stops (or, when an autoscaler chose the load, search it with a CI)."""
    autoscaler = document.spec.resolved.get("autoscaler") or {}
    if autoscaler.get("name"):  # it scaled already: its answer is the summary's
        return (f"next: the {autoscaler['name']} autoscaler chose the load; `kvbench capacity SPEC` "
                "searches the highest load within every SLA, with its 95 % CI")
    return (f"next: raise {load_knob(document)} to find the load where it stops, or `kvbench capacity SPEC` to "
            "search it with a 95 % CI")


def _dominant_entry(document: ResultDocument, dominant: Share) -> float:
    """The dominant tier operation's own entries, the size its mean time is for (not every tier's mean)."""
    return op_entry_bytes(document, dominant.tier, dominant.op) or mean_entry_bytes(document) or 0.0


def _host_step(document: ResultDocument, dominant: Share) -> str:
    """Host time dominates: a memory tier's copy, a codec's encode/decode, or kvbench's own buffers."""
    if _is_memory(document, dominant.tier):
        return (f"next: {dominant.tier} copies of {format_bytes(_dominant_entry(document, dominant))} entries take "
                f"{dominant.mean_ms:,.1f} ms each: memory bandwidth is the limit here; fewer tokens per entry (a "
                "smaller model, shorter contexts) or fewer concurrent users")
    codec = _codec_of_host(document, dominant.tier, dominant.op)
    if codec is not None:
        name, codec_ms = codec
        work = "encoding" if dominant.op == "write" else "decoding"
        return (f"next: {dominant.tier}'s host time is mostly its codec: {work} {name} takes {codec_ms:,.1f} ms of "
                f"the {dominant.mean_ms:,.1f} ms per {dominant.op}: a faster codec or lower level, or codec: none "
                f"on {dominant.tier} to see what the storage alone does")
    return (f"next: {dominant.tier}'s host side (filling and copying buffers, kvbench's Python) dominates, "
            f"not its device: try direct: true or a larger transfer_size, and `kvbench plugins --conformance` "
            f"its backend")


def _device_step(document: ResultDocument, dominant: Share, sla_ms: float) -> str:
    """Device time dominates: the bandwidth the SLA needs for what one request moves."""
    moved = bytes_per_request(document)
    need = "" if moved is None else (
        f"; a request moves {format_bytes(moved)} one entry after another, so {sla_ms:,.0f} ms needs "
        f"~{moved / (sla_ms / 1000.0) / 1e9:.2f} GB/s")
    return (f"next: one {dominant.tier} {dominant.op} of {format_bytes(_dominant_entry(document, dominant))} takes "
            f"{dominant.mean_ms:,.1f} ms on the device{need}: a faster device, smaller entries (a smaller model, "
            f"shorter contexts) or a larger tier above {dominant.tier}")


def load_knob(document: ResultDocument) -> str:
    """What sets the load: the users of a closed loop, the arrival rate of an open loop (a trace's speedup)."""
    workload = document.spec.resolved.get("workload") or {}
    options = workload.get("options") or {}
    if (options.get("arrival") or {}).get("process") == "poisson":
        return f"the arrival rate (workload.options.arrival.rate, {options['arrival'].get('rate', '?')}/s)"
    process = str(((document.declaration.get("workload") or {}).get("arrival_process") or {})
                  .get("value") or "")
    if process.startswith("open loop"):
        return "the arrival rate (workload.options.speedup of the trace)"
    return f"workload.users ({workload.get('users', '?')})"


def bytes_per_request(document: ResultDocument) -> float | None:
    """Every tier's read and write bytes per completed request: what one request's service time moves."""
    requests = document.requests.get("completed")
    nbytes = sum(t[op].get("bytes", 0) for t in document.tiers.values() for op in ("read", "write"))
    return nbytes / requests if requests else None


def _tier_info(document: ResultDocument, tier: str | None) -> Mapping[str, Any]:
    """One tier's figures in the result; empty for a tier the result does not have."""
    return document.tiers.get(tier or "") or {}


def _codec_of_host(document: ResultDocument, tier: str | None, op: str | None) -> tuple[str, float] | None:
    """(codec name, its mean ms per operation) when the codec layer is most of that operation's host time.

    The codec layer runs inside host time (docs/metrics.md, L4), so on a coded tier the host figure is
    mostly encode/decode, which no direct I/O or transfer size changes."""
    info = _tier_info(document, tier)
    stats = info.get(op or "") or {}
    latency = stats.get("latency_ms") or {}
    codec_ms = _total_ms((latency.get("codec") or {}).get("count"), latency.get("codec"))
    host_ms = _total_ms(stats.get("ops"), latency.get("host"))
    if not codec_ms or not host_ms or codec_ms <= 0.5 * host_ms:
        return None
    return (info.get("codec") or {}).get("name") or "the codec", codec_ms / stats["ops"]


def _total_ms(count: float | None, layer: Mapping[str, Any] | None) -> float:
    """A layer's total time over a count of timings (count x mean); 0 when either is missing or zero."""
    return (count or 0) * ((layer or {}).get("mean") or 0)


def _is_memory(document: ResultDocument, tier: str | None) -> bool:
    """A volatile in-process tier (cpu, gpu): its "host" time is the memory copy itself."""
    info = _tier_info(document, tier)
    return bool(info.get("volatile")) and info.get("backend") in ("cpu", "gpu")
