"""Putting the chosen codec stage around a tier (the choice itself: ``kvbench_core.runspec.codec_choices``).

``none`` means no stage at all, so a tier without a codec runs exactly the code it ran before codecs.
"""

from __future__ import annotations

from typing import Any

from kvbench_core.codecs.tier import CodecTier
from kvbench_core.contracts.backend import StorageBackend
from kvbench_core.contracts.plugins import lookup, require_dependencies
from kvbench_core.runspec.codec_choices import codec_choice


def with_codec(backend: StorageBackend, choice: dict[str, Any] | None, *, path: str) -> StorageBackend:
    """``backend`` behind the chosen codec stage; the backend itself for no codec or ``none``.  The choice's
    options were checked where the choice was made (``check_codec_choices`` for a spec, ``check_codec``
    for a tier built outside one), not again here."""
    choice = codec_choice(choice)  # any form the spec allows (idempotent on the resolved one)
    cls = codec_class(choice, path=path)
    if choice is None or cls is None:
        return backend
    return CodecTier(backend, cls(choice["options"]), chunk_bytes=choice["chunk"], segment_bytes=choice["segment"])


def codec_class(choice: dict[str, Any] | None, *, path: str) -> type | None:
    """The chosen codec's class with its optional packages checked (None for no codec or ``none``): the
    run's stage and ``--dry-run`` ask the same (engine/run/dryrun.check_requirements)."""
    choice = codec_choice(choice)
    if choice is None or choice["name"] == "none":
        return None
    cls = lookup("codec", choice["name"], path=f"{path}.codec")
    require_dependencies(cls, what=f"{path}.codec ('{choice['name']}')")
    return cls
