"""The codec contract every built-in and vendor codec implements (``kvbench_codecs`` hook).

A codec works on one *chunk* at a time: a numpy ``uint8`` array of at most the
stage's chunk size, encoded into (or decoded from) a caller's reused buffer.
Chunks are independent, so a range of an entry (a demotion's ``read_range``)
decodes only the chunks it covers.  The caller never allocates per operation,
and neither may a codec: scratch space lives in per-thread buffers the codec
keeps for its lifetime.

Thread safety: ``encode`` and ``decode`` are called from many threads at once.
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar

import numpy as np

from kvbench_core.contracts.configurable import Configurable

#: Install hint for the built-in entropy coders (zstd and lz4 through cramjam's buffer-to-buffer API).
CODECS_EXTRA_HINT = "pip install 'kvbench-core[codecs]'"


class Codec(Configurable, abc.ABC):
    """One way of encoding KV bytes.  Subclass it, set ``name`` and ``options_schema``, register via the
    ``kvbench_codecs`` hook as ``{name: class}``."""

    #: Whether ``decode(encode(x)) == x`` for every input.  Lossy codecs are refused by ``verify: true``.
    lossless: ClassVar[bool] = True
    @abc.abstractmethod
    def max_encoded_size(self, nbytes: int) -> int:
        """The most bytes ``encode`` may write for ``nbytes`` of input: how the stage sizes its buffers."""

    @abc.abstractmethod
    def encode(self, data: np.ndarray, out: np.ndarray) -> int:
        """Encode ``data`` into the front of ``out`` (``len(out) >= max_encoded_size(len(data))``);
        returns the bytes written."""

    @abc.abstractmethod
    def decode(self, data: np.ndarray, out: np.ndarray) -> int:
        """Decode ``data`` (one encoded chunk) into ``out``, whose length is the chunk's logical size;
        returns the bytes written (the stage checks that it is ``len(out)``)."""

    def version(self) -> str:
        """What the declaration names as the codec's version: the library that does the work."""
        return "builtin"

    def describe(self) -> dict[str, Any]:
        """The codec as the result and the declaration name it."""
        return {"name": self.name, "version": self.version(), "lossless": self.lossless,
                "options": dict(self.options)}
