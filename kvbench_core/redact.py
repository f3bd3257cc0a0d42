"""Keep secrets out of results, logs and error messages.

Any mapping key that looks like a credential has its value replaced; URLs
lose their userinfo and secret-looking query parameters.  Applied to the
resolved spec and to every string a result carries from a backend.
"""

from __future__ import annotations

import re
from typing import Any

REDACTED = "***"
_SECRET_KEY = re.compile(r"(pass(word|wd)?|secret|token|credential|api[_-]?key|access[_-]?key|private[_-]?key"
                         r"|session[_-]?key|auth)", re.IGNORECASE)
_SAFE_KEYS = {"password_env", "token_env", "secret_env", "auth_env", "max_tokens", "tokens", "chunk_tokens",
              "prefix_tokens", "turn_tokens", "block_tokens", "max_context_tokens", "max_generate_tokens",
              "chars_per_token", "tokens_per_s", "bytes_per_token"}
_URL_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<userinfo>[^/@\s]+)@")
_QUERY_SECRET = re.compile(r"(?P<key>[?&](?:[^=&\s]*(?:token|secret|password|signature|credential)[^=&\s]*)=)"
                           r"[^&\s]+", re.IGNORECASE)
_AWS_KEY = re.compile(r"\b(AKIA|ASIA)[A-Z0-9]{16}\b")


def is_secret_key(key: str) -> bool:
    lowered = key.lower()
    if lowered in _SAFE_KEYS or lowered.endswith("_env") or lowered.endswith("tokens"):
        return False
    return bool(_SECRET_KEY.search(lowered))


def redact_text(text: str, known_secrets: tuple[str, ...] = ()) -> str:
    text = _URL_USERINFO.sub(lambda m: f"{m.group('scheme')}{REDACTED}@", text)
    text = _QUERY_SECRET.sub(lambda m: f"{m.group('key')}{REDACTED}", text)
    text = _AWS_KEY.sub(REDACTED, text)
    for secret in known_secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, REDACTED)
    return text


def redact(value: Any, known_secrets: tuple[str, ...] = ()) -> Any:
    """A deep copy of ``value`` with secrets replaced by ``***``."""
    if isinstance(value, dict):
        return {k: (REDACTED if is_secret_key(str(k)) and v not in (None, "", False) else redact(v, known_secrets))
                for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact(item, known_secrets) for item in value]
    if isinstance(value, str):
        return redact_text(value, known_secrets)
    return value


def environment_secrets() -> tuple[str, ...]:
    """Values of credential-like environment variables, so they can be scrubbed wherever they leak."""
    import os

    return tuple(v for k, v in os.environ.items() if is_secret_key(k) and len(v) >= 8)
