"""The result document as a typed, frozen value: what readers take instead of string-key lookups.

``RunPlan`` (runspec/plan.py) did this for the spec: the validated dict becomes
frozen dataclasses once, and nothing downstream re-reads the dict.  Here a
result's JSON becomes a ``ResultDocument`` once, in ``from_json``, which
refuses a document of another format version or one the published schema
(kvbench_core/schemas/result.schema.json) rejects, with one line naming the
place; ``to_json`` gives the same JSON back, key for key, so a document read
and written again is the file it was (a trial's file sha256 still verifies).

The run's identity, status and spec, a summary's trials and the scale-out
section are typed fields; the sections whose shape is a measurement
(``metrics``, ``timeseries``, the declaration) stay the JSON as written, with
``measurements()`` giving the typed ``Metrics`` model they render from; the parts of them the reports
read have one name each (``window``, ``tiers``, ``class_figures``, ``series``, ...), empty where absent.
Readers take a document; ``of`` reads a caller's JSON once, at the edge.  The
status rules are results/status.py's, called from here (``verdict``,
``rederived_verdict``), and ``problems`` is the document's integrity (format,
schema, spec hash) that ``kvbench check`` reports rather than refuses.
docs/results.md ("The result document") describes it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

from kvbench_core.contracts.errors import InputFileError
from kvbench_core.results.invariants import run_checks
from kvbench_core.results.metrics import Metrics
from kvbench_core.results.result_schema import schema_violations
from kvbench_core.results.status import Verdict, decide_result, recorded_stop, trials_verdict, verdict_of
from kvbench_core.runspec.loader import spec_sha256
from kvbench_core.runspec.plan import qos_classes

#: The result format this kvbench writes and reads; bumped whenever the schema changes.
RESULT_FORMAT = 2
#: How many schema violations one refusal or one problem list names.
LISTED = 6

JSON = dict[str, Any]


class Incomplete(ValueError):
    """A section lacks a field the document is made of (``run.status``), or is not an object."""


def _known(cls: type, data: Any, section: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """``data`` split into the dataclass's own fields and the rest (kept, so ``to_json`` loses nothing)."""
    if not isinstance(data, Mapping):
        raise Incomplete(f"{section} is not an object")
    required = [f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING]
    lacking = [name for name in required if name not in data]
    if lacking:
        raise Incomplete(f"{section} has no {', '.join(repr(n) for n in lacking)}")
    names = {f.name for f in fields(cls)} - {"extra", "order"}
    return {k: v for k, v in data.items() if k in names}, {k: v for k, v in data.items() if k not in names}


def _ordered(own: dict[str, Any], extra: Mapping[str, Any], order: tuple[str, ...]) -> JSON:
    """The JSON of a section in the order it was read (``order``); a new one: its fields, then the rest."""
    values = {**own, **extra}
    return {key: values[key] for key in order} if order else values


@dataclass(frozen=True)
class RunRecord:
    """``run``: which run this is, how it ended and which status rule decided (results/status.py)."""

    id: str
    name: str | None
    status: str
    stop_reason: str
    error: str | None
    trial: int | None
    client_index: int | None
    started_at: float | None
    finished_at: float
    traced: bool
    kind: str | None = None
    status_rule: str | None = None
    status_reason: str | None = None
    phases_s: Mapping[str, float] | None = None
    rerun_of: Mapping[str, Any] | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    order: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunRecord:
        own, extra = _known(cls, data, "run")
        return cls(**own, extra=extra, order=tuple(data))

    @property
    def recorded_stop(self) -> str | None:
        """What the record says stopped the run (results/status.recorded_stop): ``failed`` by the error rule,
        ``interrupted``, or None (it ran to its end)."""
        return recorded_stop(self.to_json())

    def to_json(self) -> JSON:
        own = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("extra", "order")}
        optional = ("kind", "status_rule", "status_reason", "phases_s", "rerun_of")
        own = {k: v for k, v in own.items() if k not in optional or k in self.order or v is not None}
        return _ordered(own, self.extra, self.order)


@dataclass(frozen=True)
class SpecRecord:
    """``spec``: the spec as written (what re-runs the result) and resolved, and the hash of the first."""

    as_written: Mapping[str, Any]
    resolved: Mapping[str, Any]
    sha256: str
    extra: Mapping[str, Any] = field(default_factory=dict)
    order: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SpecRecord:
        own, extra = _known(cls, data, "spec")
        return cls(**own, extra=extra, order=tuple(data))

    def to_json(self) -> JSON:
        return _ordered({"as_written": self.as_written, "resolved": self.resolved, "sha256": self.sha256},
                        self.extra, self.order)

    def verifies(self) -> bool:
        """Whether ``as_written`` still hashes to the recorded ``sha256`` (no edit since the run)."""
        return spec_sha256(dict(self.as_written)) == self.sha256


@dataclass(frozen=True)
class TrialRun:
    """One entry of a summary's ``trials.runs``: a trial's file and how it ended."""

    trial: int
    id: str
    file: str
    status: str
    stop_reason: str
    measured_s: float | None
    traced: bool
    sha256: str
    checks_passed: bool
    status_reason: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    order: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TrialRun:
        own, extra = _known(cls, data, "trials.runs[]")
        return cls(**own, extra=extra, order=tuple(data))

    def to_json(self) -> JSON:
        return _ordered({f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("extra", "order")},
                        self.extra, self.order)


@dataclass(frozen=True)
class TrialsSection:
    """A summary's ``trials``: how many were asked for and counted, each trial's file, each figure's statistics."""

    requested: int
    count: int
    statistic: str
    runs: tuple[TrialRun, ...]
    metrics: Mapping[str, Mapping[str, Any]]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TrialsSection:
        own, _ = _known(cls, data, "trials")
        return cls(own["requested"], own["count"], own["statistic"],
                   tuple(TrialRun.from_json(run) for run in own["runs"]), own["metrics"])

    def to_json(self) -> JSON:
        return {"requested": self.requested, "count": self.count, "statistic": self.statistic,
                "runs": [run.to_json() for run in self.runs], "metrics": self.metrics}


#: The top-level sections in the order a result is written (results/result.py, results/merge.py).
SECTIONS = ("kvbench_result", "kvbench_version", "plugins", "run", "spec", "model", "environment", "declaration",
            "warnings", "workload", "metrics", "timeseries", "autoscaling", "sections", "errors", "checks",
            "scale_out", "clients", "trials")

@dataclass(frozen=True)
class ResultDocument:
    """One result: a run, a merged multi-client/MPI run, or a trials summary (``run.kind``)."""

    format: int
    kvbench_version: str
    plugins: Mapping[str, str]
    run: RunRecord
    spec: SpecRecord
    model: Mapping[str, Any] | None
    environment: Mapping[str, Any]
    declaration: Mapping[str, Any]
    metrics: Mapping[str, Any]
    checks: Mapping[str, Any]
    warnings: tuple[str, ...] = ()
    workload: Mapping[str, Any] | None = None
    timeseries: tuple[Mapping[str, Any], ...] | None = None  # a run's; a summary has none
    autoscaling: Mapping[str, Any] | None = None
    sections: Mapping[str, Any] | None = None
    errors: tuple[Mapping[str, Any], ...] | None = None
    scale_out: Mapping[str, Any] | None = None
    clients: tuple[Mapping[str, Any], ...] | None = None
    trials: TrialsSection | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)  # sections this kvbench does not know, kept
    order: tuple[str, ...] = ()  # the file's sections in its order (to_json writes those); () for a new one

    # -- reading and writing ---------------------------------------------------------------------------
    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str | os.PathLike[str] = "result") -> ResultDocument:
        """The document of ``data``; an ``InputFileError`` (one line, naming ``where`` and the place) for
        another format version or a document the published schema rejects."""
        problems = format_and_schema_problems(data)
        if problems:
            raise InputFileError(f"{where}: not a kvbench result this version reads: {'; '.join(problems)}")
        return cls.unchecked(data, where)

    @classmethod
    def unchecked(cls, data: Mapping[str, Any], where: str | os.PathLike[str] = "result") -> ResultDocument:
        """The document of ``data`` without judging its format or schema: for ``kvbench check``, which reports
        what ``from_json`` refuses (``problems``) instead of stopping at it.  Only a document without the
        fields a document is made of (``run``'s, ``spec``'s) is refused, in one line."""
        if "run" not in data or "spec" not in data:
            raise InputFileError(f"{where}: not a complete kvbench result (no "
                                 f"{' or '.join(repr(k) for k in ('run', 'spec') if k not in data)} section)")
        try:
            return cls._build(data)
        except Incomplete as error:
            raise InputFileError(f"{where}: not a complete kvbench result ({error})") from None

    @classmethod
    def of(cls, result: ResultDocument | Mapping[str, Any]) -> ResultDocument:
        """``result`` as a document: a document as it is, a result's JSON a caller still holds read once
        (``unchecked``: what was written is rendered, the judging is ``kvbench check``'s)."""
        return result if isinstance(result, ResultDocument) else cls.unchecked(result)

    @classmethod
    def _build(cls, data: Mapping[str, Any]) -> ResultDocument:
        trials = data.get("trials")
        clients = data.get("clients")
        return cls(
            format=data["kvbench_result"], kvbench_version=data.get("kvbench_version", ""),
            plugins=data.get("plugins") or {}, run=RunRecord.from_json(data["run"]),
            spec=SpecRecord.from_json(data["spec"]), model=data.get("model"),
            environment=data.get("environment") or {}, declaration=data.get("declaration") or {},
            metrics=data.get("metrics") or {}, checks=data.get("checks") or {},
            warnings=tuple(data.get("warnings") or ()), workload=data.get("workload"),
            timeseries=_tuple(data.get("timeseries")), autoscaling=data.get("autoscaling"),
            sections=data.get("sections"), errors=_tuple(data.get("errors")), scale_out=data.get("scale_out"),
            clients=None if clients is None else tuple(clients),
            trials=None if trials is None else TrialsSection.from_json(trials),
            extra={k: v for k, v in data.items() if k not in SECTIONS}, order=tuple(data))

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> ResultDocument:
        """The document in the file at ``path`` (one-line errors for a missing file, bad JSON, a refusal)."""
        return cls.from_json(read_json(path), path)

    def to_json(self) -> JSON:
        """The JSON this document was read from (or will be written as), section for section."""
        values: dict[str, Any] = {
            "kvbench_result": self.format, "kvbench_version": self.kvbench_version, "plugins": self.plugins,
            "run": self.run.to_json(), "spec": self.spec.to_json(), "model": self.model,
            "environment": self.environment, "declaration": self.declaration, "warnings": list(self.warnings),
            "workload": self.workload, "metrics": self.metrics, "timeseries": _list(self.timeseries),
            "autoscaling": self.autoscaling, "sections": self.sections, "errors": _list(self.errors),
            "checks": self.checks, "scale_out": self.scale_out,
            "clients": None if self.clients is None else list(self.clients),
            "trials": None if self.trials is None else self.trials.to_json()}
        values.update(self.extra)
        order = self.order or (*(k for k in SECTIONS if values[k] is not None), *self.extra)
        return {key: values[key] for key in order}

    # -- what readers ask --------------------------------------------------------------------------------
    @property
    def is_summary(self) -> bool:
        return self.trials is not None

    @property
    def measured(self) -> bool:
        """Whether the run measured a window (a run stopped before it, and a summary, did not)."""
        return "window" in self.metrics

    @property
    def headline(self) -> Mapping[str, Any]:
        return self.metrics.get("headline") or {}

    # The measurement-shaped parts of ``metrics`` and the other sections the reports read, each by one name:
    # empty (never None) where the document has none, so a reader asks once and never guards a missing key.
    @property
    def window(self) -> Mapping[str, Any]:
        """``metrics.window``: the measured window's length and ends (none before it opened, nor in a summary)."""
        return self.metrics.get("window") or {}

    @property
    def requests(self) -> Mapping[str, Any]:
        """``metrics.requests``: the window's request and token counts."""
        return self.metrics.get("requests") or {}

    @property
    def request_latency(self) -> Mapping[str, Any]:
        """``metrics.latency_ms``: the requests' end-to-end, queue-wait and storage latency statistics."""
        return self.metrics.get("latency_ms") or {}

    @property
    def tiers(self) -> Mapping[str, Mapping[str, Any]]:
        """``metrics.tiers``: each tier's figures by name, in the cache's order."""
        return self.metrics.get("tiers") or {}

    @property
    def class_figures(self) -> Mapping[str, Mapping[str, Any]]:
        """``metrics.qos``: each QoS class's requests, latencies, targets and verdict."""
        return self.metrics.get("qos") or {}

    @property
    def histograms(self) -> Mapping[str, Any]:
        """``metrics.histograms``: the requests' mergeable latency histograms."""
        return self.metrics.get("histograms") or {}

    @property
    def series(self) -> tuple[Mapping[str, Any], ...]:
        """``timeseries``: the run's interval points, in time order (none in a summary)."""
        return self.timeseries or ()

    @property
    def autoscaler_summary(self) -> Mapping[str, Any]:
        """``autoscaling.summary``: what the run's autoscaler concluded (a search's answer and steps)."""
        return (self.autoscaling or {}).get("summary") or {}

    @property
    def trajectory(self) -> tuple[Mapping[str, Any], ...]:
        """``autoscaling.trajectory``: the autoscaler's steps, in order."""
        return tuple((self.autoscaling or {}).get("trajectory") or ())

    @property
    def io_log(self) -> str | None:
        """The I/O log the run wrote (``spec.resolved.output.io_log``), None when it wrote none."""
        return (self.spec.resolved.get("output") or {}).get("io_log")

    @property
    def bytes_per_token(self) -> int:
        return int((self.model or {}).get("bytes_per_token_all_ranks") or 0)

    def measurements(self) -> Metrics:
        """The typed metrics model the ``metrics`` section renders from (results/metrics.py)."""
        return Metrics.from_json(dict(self.metrics), bytes_per_token=self.bytes_per_token,
                                 qos=qos_classes(self.spec.resolved.get("qos")))

    def verdict(self) -> Verdict:
        """The status the document records, as a verdict (results/status.py)."""
        return verdict_of(self.run.to_json())

    def rederived_verdict(self, trial_runs: list[Mapping[str, Any]] | None = None) -> Verdict:
        """The status the rules give this document's own counts and re-checked invariants; a summary's from
        its trials' recorded runs (``trial_runs``: each trial file's ``run``, when they were read)."""
        if self.trials is not None:
            runs = trial_runs if trial_runs is not None else [run.to_json() for run in self.trials.runs]
            return trials_verdict(runs, self.trials.requested)
        data = self.to_json()
        checked = {**data, "checks": run_checks(data)}
        # An error recorded stopped the run (unless a signal did first), whatever status the file claims.
        stopped = recorded_stop(self.run.to_json()) or ("failed" if self.run.error else None)
        return decide_result(checked, stopped)


def _tuple(items: Any) -> tuple[Any, ...] | None:
    return None if items is None else tuple(items)


def _list(items: tuple[Any, ...] | None) -> list[Any] | None:
    return None if items is None else list(items)


def read_json(path: str | os.PathLike[str]) -> JSON:
    """A result file's JSON object (one-line errors: missing, not JSON, not a kvbench result)."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise InputFileError(f"{path}: result file not found") from None
    except IsADirectoryError:
        raise InputFileError(f"{path}: a directory, not a result file") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        where = f":{error.lineno}" if isinstance(error, json.JSONDecodeError) else ""
        raise InputFileError(f"{path}{where}: not valid JSON") from None
    if not isinstance(data, dict) or "kvbench_result" not in data:
        raise InputFileError(f"{path}: not a kvbench result (no 'kvbench_result' field)")
    return data


def format_and_schema_problems(data: Mapping[str, Any]) -> list[str]:
    """Another format version (nothing else is judged then), or each place the schema rejects."""
    version = data.get("kvbench_result")
    if version != RESULT_FORMAT:
        return [f"kvbench_result is {version!r}: this kvbench reads result format {RESULT_FORMAT}"]
    return [f"schema: {line}" for line in schema_violations(dict(data))[:LISTED]]


def problems(data: Mapping[str, Any]) -> list[str]:
    """What makes ``data`` not a document this kvbench wrote, as ``kvbench check`` reports it: the format
    version, the schema, and a spec that does not hash to its recorded sha256."""
    found = format_and_schema_problems(data)
    spec = data.get("spec")
    if isinstance(spec, Mapping) and isinstance(spec.get("as_written"), dict) \
            and spec_sha256(spec["as_written"]) != spec.get("sha256"):
        found.append("spec.as_written does not hash to spec.sha256 (the spec was edited after the run)")
    return found
