"""What plugins build against, and all they may import of the core (with ``kvbench_core.filetiers`` for tiers
that keep entries in files; ``tests/house/test_layers.py`` holds every plugin to it).

``from kvbench_core.contracts import StorageBackend, BackendContext, IOTiming, parse_size`` works for every
name in ``__all__``; each is loaded on first use, so importing the package costs nothing.  By module:

- ``hookspecs``: every hook, typed; ``plugins``: ``hookimpl``, the registry, ``lookup``.
- ``backend``: ``StorageBackend``, ``IOTiming``, ``ByteSource``/``ByteSink``, ``BackendContext``;
  ``pieces``: ``PieceBackend`` (a tier that moves pieces gets write/read/read_range and timing derived);
  ``buffers``: per-thread reused, aligned buffers.
- ``workload``: ``WorkloadSource``, ``Request`` and its reads and writes, QoS classes;
  ``autoscaler``: ``Autoscaler``, ``TelemetrySample``, ``Decision``; ``codec``: ``Codec``;
  ``lifecycle``: ``RunView``, what lifecycle hooks see.
- ``payload``: the payload format (seeded pool, 512-byte block stamps, verify/checksum sinks);
  ``units``: sizes and durations, parsed and as schema fragments; ``percentiles``: the nearest-rank rule;
  ``validation``: option schemas with defaults and one-line errors; ``redact``: secrets masked;
  ``errors``: every user error with its exit code; ``conformance``: the checks every tier must pass.
"""

from __future__ import annotations

import importlib
from typing import Any

_NAMES: dict[str, tuple[str, ...]] = {
    "autoscaler": ("Autoscaler", "Decision", "TelemetrySample"),
    "backend": ("DISCARD", "BackendContext", "ByteSink", "ByteSource", "DiscardSink", "DoneWrite",
                "IOTiming", "PendingWrite", "StorageBackend", "check_key"),
    "buffers": ("ThreadBuffers", "consume_pieces", "fill_pieces"),
    "codec": ("CODECS_EXTRA_HINT", "Codec"),
    "errors": ("BackendUnavailable", "Cancelled", "EntryGone", "InputFileError", "IntegrityError",
               "MissingDependency", "SpecError", "StorageError", "UserError"),
    "lifecycle": ("LatencySnapshot", "RunView", "TierView"),
    "payload": ("BLOCK", "PAYLOAD_KINDS", "ChecksumSink", "EntryPayload", "NoisePool", "VerifySink", "entry_id_for",
                "mix64", "stamp_words"),
    "percentiles": ("nearest_rank", "sample_percentiles"),
    "pieces": ("TRANSFER_SIZE_OPTION", "PieceBackend"),
    "plugins": ("get_plugin_manager", "hookimpl", "lookup", "registry"),
    "redact": ("REDACTED", "is_secret_key", "redact", "redact_text"),
    "units": ("DURATION_PATTERN", "SIZE_PATTERN", "duration_schema", "format_bytes", "parse_duration", "parse_size",
              "size_schema"),
    "validation": ("schema_errors", "validate_or_raise", "with_defaults"),
    "workload": ("DEFAULT_QOS", "Phase", "QoSClass", "Read", "Request", "WorkloadContext", "WorkloadSource", "Write"),
}
_MODULE_OF = {name: module for module, names in _NAMES.items() for name in names}

__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value
