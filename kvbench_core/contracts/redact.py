"""Keep secrets out of results, logs and error messages.

Any mapping key that looks like a credential has its value replaced; URLs
(and bare ``user:password@host`` strings) lose their userinfo and secret-looking
query parameters.  Applied to the resolved spec and to every string a result
carries from a backend.

Not a list of known fields: ``register_spec_secrets`` walks the whole spec as
written (``--set`` overrides included) before it is validated and remembers every
credential-shaped value in it, whatever option holds it: the value of a
credential-named field, the password of any userinfo, a value typed where an
environment variable's *name* belongs (``password_env: hunter2``), and any option
shaped like a key or token (long, mixed case and digits, no spaces or path).
From then on every masked text (errors, results, logs) masks those values too.
"""

from __future__ import annotations

import re
from typing import Any

REDACTED = "***"
#: Name parts that mark a credential (``aws_secret_access_key``, ``auth_token``, ``password``…).
_SECRET_PARTS = {"password", "passwd", "pwd", "secret", "credential", "credentials", "apikey",
                 "passphrase", "signature"}
#: ``*_key`` names that are credentials (``access_key``, ``api_key``, ``private_key``…).
_SECRET_KEY_PREFIXES = {"access", "secret", "private", "api", "session", "sas", "auth", "signing"}
#: ``user:password@`` after a scheme; the password may hold a ``/`` (AWS secret keys do), so userinfo runs to
#: the last ``@`` before any space, query or fragment.
_URL_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<userinfo>[^@\s?#]+)@")
_QUERY_PARAM = re.compile(r"(?P<key>[?&](?P<name>[^=&\s#]+)=)[^&\s#]+")
_QUERY_SECRET_NAME = re.compile(r"token|secret|password|signature|credential", re.IGNORECASE)
#: Query parameters that carry a credential under a short name: Azure SAS ``sig``, Google ``key``.
_QUERY_SECRET_NAMES = {"sig", "key", "auth"}
_AWS_KEY = re.compile(r"\b(AKIA|ASIA)[A-Z0-9]{16}\b")
#: ``user:password@host`` without a scheme (a Redis ``host`` option, a bare endpoint).
_BARE_USERINFO = re.compile(r"(?<![\w/:@])(?P<user>[^\s:@/'\"]*):(?P<password>[^\s@/'\"]+)@(?=[\w\[])")
#: An environment variable's name as people write them; anything else in a ``*_env`` field may be a secret.
_VARIABLE_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")
#: Shaped like a key or token: 16+ characters of one word, with upper case, lower case and digits.
_TOKEN_SHAPED = re.compile(r"^(?=.*[a-z])(?=.*[A-Z])(?=.*[0-9])[A-Za-z0-9+=_\-]{16,}$")
#: Secrets found in this process's spec: masked in every text from then on.
_REGISTERED: set[str] = set()


def is_secret_key(key: str) -> bool:
    """Whether a mapping key names a credential, judged by its name parts, not substrings: ``token`` and
    ``auth_token`` are secrets, ``tokenizer``, ``max_tokens`` and ``password_env`` (a variable *name*) are not."""
    parts = [part for part in re.split(r"[_\-.\s]+", key.lower()) if part]
    if not parts or parts[-1] == "env":
        return False
    if any(part in _SECRET_PARTS for part in parts):
        return True
    if parts[-1] == "token":  # auth_token, session_token, token; not bytes_per_token or token_rate
        return len(parts) == 1 or parts[-2] != "per"
    if parts[-2:] == ["key", "id"]:  # aws_access_key_id: the half of a key pair that names it, still a credential
        return len(parts) > 2 and parts[-3] in _SECRET_KEY_PREFIXES
    return parts[-1] == "key" and len(parts) > 1 and parts[-2] in _SECRET_KEY_PREFIXES


def _secret_query_param(name: str) -> bool:
    """``api_key``, ``X-Amz-Signature``, ``sig``… in a URL's query string."""
    return (is_secret_key(name) or bool(_QUERY_SECRET_NAME.search(name))
            or name.lower() in _QUERY_SECRET_NAMES)


def redact_text(text: str, known_secrets: tuple[str, ...] = ()) -> str:
    text = _URL_USERINFO.sub(lambda m: f"{m.group('scheme')}{REDACTED}@", text)
    text = _BARE_USERINFO.sub(lambda m: f"{m.group('user')}:{REDACTED}@", text)
    text = _QUERY_PARAM.sub(lambda m: f"{m.group('key')}{REDACTED}" if _secret_query_param(m.group("name"))
                            else m.group(0), text)
    text = _AWS_KEY.sub(REDACTED, text)
    for secret in sorted({*known_secrets, *_REGISTERED}, key=len, reverse=True):
        if secret and len(secret) >= 4:
            text = text.replace(secret, REDACTED)
    return text


def register_spec_secrets(spec: Any) -> None:
    """Remember every credential-shaped value in a spec (see the module docstring), before anything
    (a validation error, a driver's message, the result) can quote it."""

    def visit(value: Any, key: str, in_options: bool) -> None:
        if isinstance(value, dict):
            for name, item in value.items():
                visit(item, str(name), in_options or key == "options")
        elif isinstance(value, list):
            for item in value:
                visit(item, key, in_options)
        elif isinstance(value, str):
            _register_string(value, key, in_options)

    visit(spec, "", False)


def _register_string(value: str, key: str, in_options: bool) -> None:
    """One string of a spec, under ``key``: registered when its key, its shape or a URL in it says secret."""
    import os

    if is_secret_key(key):
        _REGISTERED.add(value)
    elif key.lower().endswith("_env") and is_secret_key(key[:-4]):
        if not _VARIABLE_NAME.match(value) and value not in os.environ:
            _REGISTERED.add(value)  # a password typed where its variable's name belongs
    elif in_options and _TOKEN_SHAPED.match(value):  # a plugin's option: model names are not keys
        _REGISTERED.add(value)
    for match in _BARE_USERINFO.finditer(value):
        _REGISTERED.add(match.group("password"))
    for match in _URL_USERINFO.finditer(value):
        _REGISTERED.update(part for part in match.group("userinfo").split(":", 1)[1:] if part)


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
    """Values of credential-like environment variables, and the secrets found in the spec
    (``register_spec_secrets``), so they can be scrubbed wherever they leak."""
    import os

    return (*(value for name, value in os.environ.items()
              if is_secret_key(name) and name not in _NOT_SECRET_VARIABLES and len(value) >= 8), *_REGISTERED)


#: Variables whose names look like credentials but are not: the shell's working directories ("pwd").
_NOT_SECRET_VARIABLES = frozenset({"PWD", "OLDPWD"})
