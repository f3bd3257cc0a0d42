"""Putting the chosen codec stage around a tier (the choice itself: ``kvbench_core.spec.codec_choices``).

``none`` means no stage at all, so a tier without a codec runs exactly the code it ran before codecs.
"""

from __future__ import annotations

from typing import Any

from kvbench_core.codecs.tier import CodecTier
from kvbench_core.contracts.backend import StorageBackend
from kvbench_core.contracts.plugins import lookup, require_dependencies
from kvbench_core.spec.codec_choices import codec_choice


def with_codec(backend: StorageBackend, choice: dict[str, Any] | None, *, path: str) -> StorageBackend:
    """``backend`` behind the chosen codec stage; the backend itself for no codec or ``none``.  The choice's
    options were checked where the choice was made (``check_codec_choices`` for a spec, ``check_codec``
    for a tier built outside one), not again here."""
    choice = codec_choice(choice)  # any form the spec allows (idempotent on the resolved one)
    if choice is None or choice["name"] == "none":
        return backend
    cls = lookup("codec", choice["name"], path=f"{path}.codec")
    require_dependencies(cls, what=f"{path}.codec ('{choice['name']}')")
    return CodecTier(backend, cls(choice["options"]), chunk_bytes=choice["chunk"], segment_bytes=choice["segment"])
