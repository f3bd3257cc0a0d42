"""The boto3 session and its credentials, and keeping those credentials out of every log.

Credentials come only from boto3's own chain (environment, shared config
profile, instance/container role); the spec may name a ``profile`` but can
never hold a secret, and botocore's debug logs (which print the session token)
are masked while the tier is open.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from kvbench_core.contracts.errors import BackendUnavailable

#: Logger trees whose records may carry request headers (the session token, the access key id).
SDK_LOGGERS = ("botocore", "boto3", "s3transfer", "urllib3")


def open_session(options: dict[str, Any], where: str) -> tuple[Any, Any]:
    """A boto3 session for the options' profile and region, and the credentials its chain found.

    Raises BackendUnavailable, naming ``where``, when the chain is broken or finds nothing.
    """
    import boto3
    from botocore.exceptions import BotoCoreError

    try:
        session = boto3.session.Session(profile_name=options.get("profile"), region_name=options.get("region"))
        credentials = session.get_credentials()
    except BotoCoreError as error:  # unknown profile, broken config, expired SSO token
        raise BackendUnavailable(f"{where}: {error}") from None
    if credentials is None:
        raise BackendUnavailable(f"{where}: no AWS credentials found (environment, shared config profile, "
                                 "instance or container role)")
    return session, credentials


class MaskSecrets(logging.Filter):
    """Replaces credential strings in SDK log records: botocore logs request headers (the session
    token, the access key id in Authorization) at DEBUG, and a result's log must not carry them."""

    def __init__(self, secrets: Iterable[str | None]) -> None:
        super().__init__()
        self._secrets = [secret for secret in secrets if secret]
        self._loggers: list[logging.Logger] = []

    @classmethod
    def of(cls, credentials: Any) -> MaskSecrets:
        """A mask for the access key, secret key and session token of boto3 ``credentials``."""
        frozen = credentials.get_frozen_credentials()
        return cls((frozen.access_key, frozen.secret_key, frozen.token))

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if any(secret in message for secret in self._secrets):
            for secret in self._secrets:
                message = message.replace(secret, "***")
            record.msg, record.args = message, None
        return True

    def attach(self) -> None:
        """Filter every SDK logger that exists now (a logger's filter does not see its children's records)."""
        names = {name for name in logging.root.manager.loggerDict if name.split(".")[0] in SDK_LOGGERS}
        self._loggers = [logging.getLogger(name) for name in sorted(names | set(SDK_LOGGERS))]
        for logger in self._loggers:
            logger.addFilter(self)

    def detach(self) -> None:
        for logger in self._loggers:
            logger.removeFilter(self)
        self._loggers = []


def sdk_versions() -> dict[str, str]:
    """The boto3 and botocore versions, for ``describe()``."""
    import boto3
    import botocore

    return {"boto3": boto3.__version__, "botocore": botocore.__version__}
