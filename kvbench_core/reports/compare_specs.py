"""What two results ran, as the runs resolved it, and every difference that changes what a ratio means.

A result's ``spec.resolved`` is the spec after validation, but not everything a run used is spelled out
there: the model's dtype is ``None`` when the spec left it to the model's default (the result's ``model``
section says which it was), a tier's ``options`` hold only what the spec wrote (the plugin fills its
defaults from its schema; the result's ``metrics.tiers.<tier>.describe`` says what the tier ran with),
and the QoS targets are in ``metrics.qos``.  ``effective`` puts those together as one flat mapping of
dotted field -> value, so ``differences`` compares what ran, not what was written: ``model.dtype None vs
'bf16'`` for two runs of the model's fp16 was a false warning, a changed ``queue_depth`` default a silent one.

Which device or service is behind a tier is what a comparison usually compares, so a tier's backend, and
the options that only say where its data lives (a path, an endpoint, a bucket), are not warned about;
options of one backend's tiers are compared only when both results ran that tier on the same backend.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvbench_core.contracts.plugins import registry
from kvbench_core.contracts.validation import with_defaults
from kvbench_core.reports import flatten
from kvbench_core.results.document import ResultDocument

#: Resolved-spec fields whose difference changes the meaning of a ratio between two results, and why.
MEANING_FIELDS: tuple[tuple[str, str], ...] = (
    ("duration", "totals (requests, bytes, decode GB) cover another length of time"),
    ("requests", "totals cover another number of requests"),
    ("warmup", "the measured window starts on a differently warmed cache"),
    ("clients", "another number of client processes share the storage"),
    ("workload.users", "another offered load: throughput and latency move with it"),
    ("workload.users_scope", "users count per client in one, across clients in the other"),
    ("workload.max_inflight", "another cap on requests in flight"),
    ("workload.source", "another request stream"),
    ("workload.mode", "another mix of prefill writes and decode reads"),
    ("workload.generation", "another generation pacing: end-to-end latency and wall-clock throughput differ"),
    ("workload.decode_batch", "another number of decode reads per request"),
    ("model.name", "other entry sizes"),
    ("model.dtype", "other entry sizes"),
    ("model.tp", "other per-rank entry sizes"),
    ("cache.promotion", "another cache policy: hit rates and read tiers differ"),
    ("autoscaler.name", "users change during one of the runs"),
    ("verify", "verification adds host work to every read"),
    ("payload", "other payload bytes: a codec compresses them differently (random is incompressible)"),
)
#: Why a difference under each prefix matters (fields not in MEANING_FIELDS).
PREFIX_REASONS: tuple[tuple[str, str], ...] = (
    ("workload.options.", "another request stream: entry sizes, reuse or pacing differ"),
    ("qos.", "another QoS target: which class meets its SLA, and the autoscaler's answer, differ"),
    ("cache.tiers.", "another access path or codec on the same backend: bytes on the device, latency and "
                     "bandwidth move with it"),
)
#: Tier options that only say where a tier's data lives, not how it is accessed.
LOCATION_OPTIONS = frozenset({"path", "url", "endpoint_url", "host", "port", "unix_socket", "bucket", "prefix",
                              "region", "profile", "db", "username", "password_env", "ssl_ca_file", "ssl_certfile",
                              "ssl_keyfile", "shared_namespace", "agents"})
#: The longest value a warning line shows.
SHOWN_CHARS = 80
#: What a tier's description reports it ran with, which wins over the spec's value or the schema default.
DESCRIBED_OPTIONS = ("engine", "queue_depth", "transfer_size", "direct")


def _field(spec: Mapping[str, Any], path: str) -> Any:
    node: Any = spec
    for part in path.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def _defaults(kind: str, name: Any, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` with the installed plugin's schema defaults (as written, where it is not installed)."""
    cls = registry(kind).get(name) if isinstance(name, str) else None
    return with_defaults(cls.options_schema, options) if cls is not None else dict(options)


def _codec_name(written: Any) -> str:
    """The codec a spec names in any form it allows (a name, ``{name: ...}``, absent = none)."""
    if isinstance(written, dict):
        return str(written.get("name") or "none")
    return str(written or "none")


def _tier_fields(tier: dict[str, Any], measured: Mapping[str, Any]) -> dict[str, Any]:
    name, backend = tier.get("name"), tier.get("backend")
    cls = registry("backend").get(backend) if isinstance(backend, str) else None
    here = {getattr(cls, "directory_option", None)} | LOCATION_OPTIONS
    options = _defaults("backend", backend, tier.get("options") or {})
    described = measured.get("describe") or {}
    options.update({key: described[key] for key in DESCRIBED_OPTIONS if key in described})
    fields = {f"cache.tiers.{name}.options.{key}": value for key, value in flatten(options)
              if key.split(".")[0] not in here}
    codec = measured.get("codec") or {}
    fields[f"cache.tiers.{name}.codec"] = codec.get("name") or _codec_name(tier.get("codec"))
    fields.update({f"cache.tiers.{name}.codec.options.{key}": value for key, value in flatten(codec.get("options"))
                   if key})
    return {key: (backend, value) for key, value in fields.items()}


def effective(document: ResultDocument) -> dict[str, Any]:
    """Dotted field -> value of what ``document``'s run used (see the module docstring); a tier's fields are
    ``(backend, value)`` pairs, compared only between tiers of one backend."""
    spec = document.spec.resolved
    fields = {path: _field(spec, path) for path, _ in MEANING_FIELDS}
    fields.update(_model_fields(document.model or {}))
    fields.update(_workload_fields(spec.get("workload") or {}))
    fields.update(_qos_fields(document.class_figures))
    for tier in (spec.get("cache") or {}).get("tiers") or []:
        fields.update(_tier_fields(tier, document.tiers.get(tier.get("name")) or {}))
    return fields


def _model_fields(model: Mapping[str, Any]) -> dict[str, Any]:
    """The model's dtype and tensor parallelism as the result recorded them (they set the entry sizes)."""
    return {f"model.{key}": model[key] for key in ("dtype", "tp") if model.get(key) is not None}


def _workload_fields(workload: dict[str, Any]) -> dict[str, Any]:
    """The workload source's options, completed with the source's defaults so an option left out compares
    equal to the same value written."""
    options = _defaults("source", workload.get("source"), workload.get("options") or {})
    return {f"workload.options.{key}": value for key, value in options.items()}


def _qos_fields(qos: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Each QoS class's SLAs and priority as the result measured them against."""
    return {f"qos.{name}.{key}": figures.get(key) for name, figures in qos.items()
            for key in ("sla_p95_ms", "sla_p99_ms", "priority")}


def _reason(path: str) -> str:
    return dict(MEANING_FIELDS).get(path) or next(why for prefix, why in PREFIX_REASONS if path.startswith(prefix))


def _shown(value: Any) -> str:
    """A value in a warning line: its repr, cut at ``SHOWN_CHARS`` (a source's profiles are a page)."""
    text = repr(value)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS - 3] + "..."


def differences(base: ResultDocument, other: ResultDocument) -> list[str]:
    """``field other vs the baseline's value: why`` for each field both results' runs used differently."""
    mine, theirs = effective(other), effective(base)
    notes = []
    for path in dict.fromkeys([*theirs, *mine]):
        a, b = theirs.get(path), mine.get(path)
        if path.startswith("cache.tiers."):
            if a is None or b is None or a[0] != b[0]:
                continue  # the tier is on another backend (what is compared), or one run has no such tier
            a, b = a[1], b[1]
        notes += [f"{where} {_shown(mine_value)} vs the baseline's {_shown(base_value)}: {_reason(path)}"
                  for where, base_value, mine_value in _leaf_differences(path, a, b)]
    return notes


def _leaf_differences(path: str, a: Any, b: Any) -> list[tuple[str, Any, Any]]:
    """(field, baseline's, other's) for each differing leaf of two option sections with the same fields
    (``workload.options.multi_turn.turn_tokens``), else the field itself when they differ (a profile one
    run has and the other lacks: one line, not one per field of it)."""
    if a == b:
        return []
    if isinstance(a, dict) and isinstance(b, dict):
        leaves_a, leaves_b = dict(flatten(a)), dict(flatten(b))
        if leaves_a.keys() == leaves_b.keys():
            return [(f"{path}.{key}", leaves_a[key], leaves_b[key]) for key in leaves_a
                    if leaves_a[key] != leaves_b[key]]
    return [(path, a, b)]
