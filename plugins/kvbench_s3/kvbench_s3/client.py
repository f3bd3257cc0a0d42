"""The tier's boto3 clients, through which every request is issued, counted and timed.

L4 split of one request: ``host`` is botocore's request building (serialising,
checksumming, signing: from the call until the request is sent); ``device`` is
from sending the request to having its reply (botocore's ``before-send`` event
marks the boundary).  Every request is counted by operation, and every HTTP
attempt (more attempts than requests: retries), for ``counters()``.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

from kvbench_core.contracts.units import parse_duration

MISSING_KEY = ("NoSuchKey", "404", "NotFound")
MISSING_BUCKET = ("NoSuchBucket", "404", "NotFound")


class S3Client:
    """The two clients of one tier: ``client`` for every request, ``finisher`` for CompleteMultipartUpload."""

    def __init__(self) -> None:
        self.client: Any = None
        self.finisher: Any = None  # the client for CompleteMultipartUpload: long read timeout, no retry
        self._local = threading.local()  # the send time of this thread's request in flight
        self._requests: Counter[str] = Counter()
        self._http_attempts = 0
        self._count_lock = threading.Lock()

    def connect(self, session: Any, options: dict[str, Any], connections: int) -> None:
        """Build both clients from a boto3 ``session``, each pooling up to ``connections`` connections."""
        from botocore.config import Config

        config = Config(
            s3={"addressing_style": options["addressing_style"]},
            retries={"mode": "standard", "total_max_attempts": options["max_attempts"]},
            max_pool_connections=connections,
            connect_timeout=parse_duration(options["connect_timeout"]),
            read_timeout=parse_duration(options["read_timeout"]),
            request_checksum_calculation=options["checksum"],
        )
        self.client = session.client("s3", endpoint_url=options.get("endpoint_url"), config=config)
        self.client.meta.events.register("before-send.s3", self._on_send)
        # A retried Complete races the first one still assembling the object: moto answers it with a 500
        # ("seek of closed file", the parts disposed under it), and any server may redo minutes of work.
        # So Complete gets the time it needs, and one attempt.
        finish = config.merge(Config(retries={"mode": "standard", "total_max_attempts": 1},
                                     read_timeout=parse_duration(options["complete_timeout"])))
        self.finisher = session.client("s3", endpoint_url=options.get("endpoint_url"), config=finish)
        self.finisher.meta.events.register("before-send.s3", self._on_send)

    def close(self) -> None:
        """Close both clients; safe to call twice."""
        for client in (self.client, self.finisher):
            if client is not None:
                client.close()
        self.client = self.finisher = None

    def call(self, operation: str, *, finish: bool = False, **params: Any) -> tuple[Any, float, float]:
        """One S3 request: (response, host seconds, device seconds), counted by operation.

        ``finish`` sends it through the finisher (CompleteMultipartUpload's client).
        """
        with self._count_lock:
            self._requests[operation] += 1
        self._local.sent = None
        start = time.perf_counter()
        reply = getattr(self.finisher if finish else self.client, operation)(**params)
        end = time.perf_counter()
        sent = self._local.sent or end
        return reply, sent - start, end - sent

    def _on_send(self, **_: Any) -> None:
        """botocore's ``before-send`` event: the request is built and signed, the wire starts now."""
        if getattr(self._local, "sent", None) is None:  # keep the first attempt: retries and backoff are device time
            self._local.sent = time.perf_counter()
        with self._count_lock:
            self._http_attempts += 1

    def counters(self) -> dict[str, Any]:
        """Requests issued by S3 operation, and HTTP attempts (more attempts than requests: retries)."""
        with self._count_lock:
            return {"requests": dict(sorted(self._requests.items())), "http_attempts": self._http_attempts}


def error_code(error: Any) -> str:
    """The S3 error code of a botocore ``ClientError``."""
    return str(error.response.get("Error", {}).get("Code", ""))


def answer(reply: dict[str, Any], field: str, operation: str, name: str) -> Any:
    """A field the reply must carry; a server dying mid-response can leave a 200 with a cut-off body."""
    value = reply.get(field)
    if not value:
        raise OSError(f"{operation} of {name!r} answered without {field} (a truncated response from a failing "
                      "server?)")
    return value
