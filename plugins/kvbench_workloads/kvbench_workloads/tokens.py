"""Token counts for conversation text.

tiktoken (cl100k_base, the ChatGPT-era encoding ShareGPT was written with) is
exact but downloads its encoding on first use, which fails offline; the
fallback is the seed's characters-per-token estimate (§8.2).  The counter's
name goes into the result, because the two give different request sizes for
the same file.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

from kvbench_core.contracts.errors import MissingDependency

TIKTOKEN_ENCODING = "cl100k_base"


@dataclass(frozen=True)
class TokenCounter:
    """Counts the tokens of one message; at least 1, since a chat template adds role tokens to every turn."""

    name: str
    count: Callable[[str], int]


def token_counter(choice: str, chars_per_token: float) -> TokenCounter:
    """``choice``: auto (tiktoken when usable offline, else chars), tiktoken (required) or chars."""
    if choice in ("auto", "tiktoken"):
        encoding = _tiktoken_encoding()
        if encoding is not None:
            return TokenCounter(
                f"tiktoken/{TIKTOKEN_ENCODING}",
                lambda text: max(1, len(encoding.encode(text, disallowed_special=()))),
            )
        if choice == "tiktoken":
            raise MissingDependency(
                f"count_tokens: tiktoken needs the tiktoken package and its {TIKTOKEN_ENCODING} encoding "
                "(downloaded on first use, or set TIKTOKEN_CACHE_DIR to a cached copy): "
                "pip install 'kvbench-workloads[tiktoken]', or use count_tokens: chars"
            )
    return TokenCounter(
        f"chars/{chars_per_token:g}",
        lambda text: max(1, math.ceil(len(text) / chars_per_token)),
    )


@cache
def _tiktoken_encoding() -> Any:
    """The encoding, or None; cached so an offline machine pays for the failed download once."""
    try:
        import tiktoken

        return tiktoken.get_encoding(TIKTOKEN_ENCODING)
    except Exception:  # not installed, or the encoding cannot be fetched (offline): fall back
        return None
