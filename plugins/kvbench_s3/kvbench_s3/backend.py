"""S3 / S3-compatible object tier through boto3: explicit multipart uploads and ranged GETs.

Why not boto3's managed transfer (``upload_fileobj`` + ``TransferConfig``): it
copies the source into fresh buffers per part and says nothing about the
requests it issued.  Here every part is filled from ``source.fill`` into a
reused per-thread buffer and sent as one ``UploadPart``; reads are part-sized
ranged GETs read into reused buffers and handed to the sink.  So memory is
bounded by ``part_size x max_concurrency`` per operation, and every request is
counted (``counters()``, which the runner adds to the tier's result).

An entry of at most ``part_size`` bytes is one PutObject / one GetObject.  A
larger one is CreateMultipartUpload + one UploadPart per part + Complete, and
is read with one ranged GET per part; up to ``max_concurrency`` parts of one
operation are in flight at once (the calling thread plus helpers from a shared
pool).  The source and the sink are never called concurrently: the parts'
HTTP requests overlap, their fill/consume calls take turns.

L4 split: ``host`` is fill/consume plus botocore's request building
(serialising, checksumming, signing: from the call until the request is sent);
``device`` is from sending the request to having read the response body.  When
parts overlap, the summed per-part times exceed the wall time, so they are
scaled down in proportion to fit ``total``.

Credentials come only from boto3's own chain (environment, shared config
profile, instance/container role); the spec may name a ``profile`` but can
never hold a secret, and botocore's debug logs (which print the session token)
are masked while the tier is open.
"""

from __future__ import annotations

import io
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import suppress
from typing import Any, ClassVar

from kvbench_core.contracts.backend import BackendContext, ByteSink, ByteSource, ClientBackend, IOTiming, check_key
from kvbench_core.contracts.buffers import ThreadBuffers, consume_pieces, fill_pieces
from kvbench_core.contracts.errors import BackendUnavailable
from kvbench_core.spec.units import DURATION_PATTERN, SIZE_PATTERN, parse_duration, parse_size

#: Largest piece handed to ``source.fill`` / ``sink.consume`` (parts may be larger).
PIECE = 16 << 20
#: S3 accepts at most this many keys per DeleteObjects request.
DELETE_BATCH = 1000
#: Logger trees whose records may carry request headers (the session token, the access key id).
SDK_LOGGERS = ("botocore", "boto3", "s3transfer", "urllib3")

_SIZE: dict[str, Any] = {
    "oneOf": [{"type": "integer", "minimum": 1}, {"type": "string", "pattern": SIZE_PATTERN}],
    "description": "a size such as 8MiB or 8388608",
}
_DURATION: dict[str, Any] = {
    "oneOf": [{"type": "number", "exclusiveMinimum": 0}, {"type": "string", "pattern": DURATION_PATTERN}],
    "description": "a duration such as 10s or 1m",
}
_MISSING_KEY = ("NoSuchKey", "404", "NotFound")
_MISSING_BUCKET = ("NoSuchBucket", "404", "NotFound")


class S3Backend(ClientBackend):
    """A tier on an S3 bucket (AWS or any S3-compatible service); one object per entry."""

    name = "s3"
    requires: ClassVar[dict[str, str]] = {"boto3": "pip install kvbench-s3"}
    options_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "additionalProperties": False,
        "required": ["bucket"],
        "propertyNames": {
            "not": {"pattern": "(?i)(secret|access_key|session_token|password|credential)"},
            "description": "credentials come from the boto3 chain (environment, profile, instance role), "
                           "never from the spec",
        },
        "properties": {
            "bucket": {"type": "string", "pattern": "^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$",
                       "description": "an S3 bucket name (3-63 lowercase letters, digits, dots, hyphens)"},
            "endpoint_url": {"type": "string", "pattern": r"^https?://[^/@\s]+(/[^@\s]*)?$",  # no user:secret@
                             "description": "http(s)://host[:port] of an S3-compatible service, without user info"},
            "region": {"type": "string", "minLength": 1},
            "profile": {"type": "string", "minLength": 1, "description": "a profile of the AWS config files"},
            "addressing_style": {"enum": ["auto", "path", "virtual"], "default": "auto"},
            "create_bucket": {"type": "boolean", "default": False,
                              "description": "create the bucket when it does not exist (it is never deleted)"},
            "prefix": {"type": "string", "pattern": "^(?!/)", "default": "",
                       "description": "key prefix in front of kvbench/<run_id>/, e.g. team-a/"},
            "part_size": {**_SIZE, "default": "8MiB",
                          "description": "multipart part and ranged-GET size (AWS needs >= 5MiB except the last)"},
            "max_concurrency": {"type": "integer", "minimum": 1, "maximum": 64, "default": 4,
                                "description": "parts of one entry in flight at once"},
            "max_attempts": {"type": "integer", "minimum": 1, "maximum": 20, "default": 3,
                             "description": "botocore attempts per request (standard retry mode)"},
            "connect_timeout": {**_DURATION, "default": "10s"},
            "read_timeout": {**_DURATION, "default": "60s"},
            "complete_timeout": {**_DURATION, "default": "15m",
                                 "description": "how long CompleteMultipartUpload may take (the server assembles "
                                                "the object meanwhile: minutes for a large one); one attempt"},
            "checksum": {"enum": ["when_supported", "when_required"], "default": "when_supported",
                         "description": "botocore request checksums; some S3-compatible stores need when_required"},
        },
    }

    def __init__(self, options: dict[str, Any], context: BackendContext) -> None:
        super().__init__(options, context)
        self.bucket: str = self.options["bucket"]
        self.key_prefix = f"{self.options['prefix']}kvbench/{context.run_id}/"
        self.part_size = parse_size(self.options["part_size"])
        self.transfer_size = min(self.part_size, PIECE)
        self.max_concurrency: int = self.options["max_concurrency"]
        self.endpoint = self.options.get("endpoint_url", "AWS S3")  # what messages name until open() connects
        self.identity_source = "none"
        self._client: Any = None
        self._finisher: Any = None  # the client for CompleteMultipartUpload: long read timeout, no retry
        self._helpers: ThreadPoolExecutor | None = None
        self._local = threading.local()  # the send time of this thread's request in flight
        self._buffers = ThreadBuffers()  # one part-sized buffer per thread, reused by every request
        self._requests: Counter[str] = Counter()
        self._http_attempts = 0
        self._count_lock = threading.Lock()
        self._mask: _MaskSecrets | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    def open(self) -> None:
        import boto3
        from botocore.exceptions import BotoCoreError, ClientError

        where = f"tier '{self.context.tier_name}' (s3)"
        try:
            session = boto3.session.Session(profile_name=self.options.get("profile"),
                                            region_name=self.options.get("region"))
            credentials = session.get_credentials()
        except BotoCoreError as error:  # unknown profile, broken config, expired SSO token
            raise BackendUnavailable(f"{where}: {error}") from None
        if credentials is None:
            raise BackendUnavailable(f"{where}: no AWS credentials found (environment, shared config profile, "
                                     "instance or container role)")
        frozen = credentials.get_frozen_credentials()
        self._mask = _MaskSecrets((frozen.access_key, frozen.secret_key, frozen.token))
        self._mask.attach()
        self.identity_source = credentials.method
        try:
            self._connect(session)
            self._ensure_bucket(where)
        except ClientError as error:
            self._disconnect()
            raise BackendUnavailable(f"{where}: bucket '{self.bucket}' at {self.endpoint}: {error}") from None
        except BotoCoreError as error:  # connection refused, DNS, TLS, timeouts
            self._disconnect()
            raise BackendUnavailable(f"{where}: cannot reach {self.endpoint}: {error}") from None
        except BaseException:
            self._disconnect()
            raise

    def _connect(self, session: Any) -> None:
        from botocore.config import Config

        connections = self.context.concurrency * self.max_concurrency
        config = Config(
            s3={"addressing_style": self.options["addressing_style"]},
            retries={"mode": "standard", "total_max_attempts": self.options["max_attempts"]},
            max_pool_connections=connections,
            connect_timeout=parse_duration(self.options["connect_timeout"]),
            read_timeout=parse_duration(self.options["read_timeout"]),
            request_checksum_calculation=self.options["checksum"],
        )
        self._client = session.client("s3", endpoint_url=self.options.get("endpoint_url"), config=config)
        self._client.meta.events.register("before-send.s3", self._on_send)
        # A retried Complete races the first one still assembling the object: moto answers it with a 500
        # ("seek of closed file", the parts disposed under it), and any server may redo minutes of work.
        # So Complete gets the time it needs, and one attempt.
        finish = config.merge(Config(retries={"mode": "standard", "total_max_attempts": 1},
                                     read_timeout=parse_duration(self.options["complete_timeout"])))
        self._finisher = session.client("s3", endpoint_url=self.options.get("endpoint_url"), config=finish)
        self._finisher.meta.events.register("before-send.s3", self._on_send)
        self.endpoint = self._client.meta.endpoint_url
        if self.max_concurrency > 1:
            self._helpers = ThreadPoolExecutor(connections - self.context.concurrency,
                                               thread_name_prefix=f"kvbench-s3-{self.context.tier_name}")

    def _ensure_bucket(self, where: str) -> None:
        from botocore.exceptions import ClientError

        try:
            self._call("head_bucket", Bucket=self.bucket)
            return
        except ClientError as error:
            if _code(error) not in _MISSING_BUCKET:
                raise
        if not self.options["create_bucket"]:
            raise BackendUnavailable(f"{where}: bucket '{self.bucket}' does not exist at {self.endpoint}; "
                                     "create it or set create_bucket: true")
        params: dict[str, Any] = {"Bucket": self.bucket}
        region = self._client.meta.region_name
        if region and region != "us-east-1":  # us-east-1 is the one region that rejects a LocationConstraint
            params["CreateBucketConfiguration"] = {"LocationConstraint": region}
        self._call("create_bucket", **params)

    def _disconnect(self) -> None:
        if self._helpers is not None:
            self._helpers.shutdown(wait=True)
            self._helpers = None
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._finisher is not None:
            self._finisher.close()
            self._finisher = None
        if self._mask is not None:
            self._mask.detach()
            self._mask = None

    # -- data path -----------------------------------------------------------------------------

    def write(self, key: str, source: ByteSource) -> IOTiming:
        start = time.perf_counter()
        name, size, turn = self._object(key), source.size, threading.Lock()
        if size <= self.part_size:
            _, host, device = self._send_filled(key, source, 0, size, turn, lambda body: self._call(
                "put_object", Bucket=self.bucket, Key=name, Body=body))
            return _timing(start, host, device, size, 1)
        count = -(-size // self.part_size)
        reply, host, device = self._call("create_multipart_upload", Bucket=self.bucket, Key=name)
        upload, etags = _answer(reply, "UploadId", "CreateMultipartUpload", name), [""] * count

        def part(index: int) -> tuple[float, float]:
            offset = index * self.part_size
            reply, host, device = self._send_filled(key, source, offset, min(self.part_size, size - offset), turn,
                                                    lambda body: self._call("upload_part", Bucket=self.bucket,
                                                                            Key=name, UploadId=upload,
                                                                            PartNumber=index + 1, Body=body))
            etags[index] = _answer(reply, "ETag", "UploadPart", name)
            return host, device

        try:
            parts_host, parts_device = self._each_part(count, part)
            manifest = [{"ETag": etag, "PartNumber": number} for number, etag in enumerate(etags, 1)]
            _, done_host, done_device = self._call("complete_multipart_upload", Bucket=self.bucket, Key=name,
                                                   UploadId=upload, MultipartUpload={"Parts": manifest},
                                                   client=self._finisher)
        except BaseException:
            with suppress(Exception):  # best effort: cleanup aborts leftover uploads under the prefix anyway
                self._call("abort_multipart_upload", Bucket=self.bucket, Key=name, UploadId=upload)
            raise
        return _timing(start, host + parts_host + done_host, device + parts_device + done_device, size, count + 2)

    def _send_filled(self, key: str, source: ByteSource, offset: int, length: int, turn: threading.Lock,
                     send: Callable[[_ViewReader], tuple[Any, float, float]]) -> tuple[Any, float, float]:
        """Fill ``length`` bytes at ``offset`` into this thread's buffer, then ``send`` them as one request
        (a device command: reported through ``io_log`` from send to reply)."""
        view = self._buffers.get(length)
        with turn:
            t0 = time.perf_counter()
            fill_pieces(source, offset, view, PIECE)
            filled = time.perf_counter() - t0
        sent = time.perf_counter()
        reply, host, device = send(_ViewReader(view))
        self._log(key, "write", offset, length, sent)
        return reply, filled + host, device

    def _log(self, key: str, op: str, offset: int, length: int, started: float) -> None:
        if self.context.io_log is not None:
            self.context.io_log.record(key, op, offset, length, started, time.perf_counter())

    def read(self, key: str, size: int, sink: ByteSink) -> IOTiming:
        start = time.perf_counter()
        name, turn = self._object(key), threading.Lock()
        if size <= self.part_size:
            host, device = self._get(key, name, 0, size, sink, turn, ranged=False)
            return _timing(start, host, device, size, 1)
        count = -(-size // self.part_size)

        def part(index: int) -> tuple[float, float]:
            offset = index * self.part_size
            return self._get(key, name, offset, min(self.part_size, size - offset), sink, turn, ranged=True)

        host, device = self._each_part(count, part)
        return _timing(start, host, device, size, count)

    def _get(self, key: str, name: str, offset: int, length: int, sink: ByteSink, turn: threading.Lock, *,
             ranged: bool) -> tuple[float, float]:
        """GET ``length`` bytes at ``offset`` into this thread's buffer and hand them to the sink."""
        view = self._buffers.get(length)
        sent = time.perf_counter()
        body, host, device = self._fetch(key, name, offset, length, ranged=ranged)
        t0 = time.perf_counter()
        self._drain(body, view, name)
        device += time.perf_counter() - t0
        self._log(key, "read", offset, length, sent)  # one GET, from request to the last byte
        with turn:
            t0 = time.perf_counter()
            consume_pieces(sink, offset, view, PIECE)
            host += time.perf_counter() - t0
        return host, device

    def read_range(self, key: str, offset: int, out: memoryview) -> None:
        if len(out):
            sent = time.perf_counter()
            body, _, _ = self._fetch(key, self._object(key), offset, len(out), ranged=True)
            self._drain(body, out, self._object(key))
            self._log(key, "read", offset, len(out), sent)

    def delete(self, key: str) -> None:
        self._call("delete_object", Bucket=self.bucket, Key=self._object(key))

    def _fetch(self, key: str, name: str, offset: int, length: int, *, ranged: bool) -> tuple[Any, float, float]:
        """Issue the GET; a missing object is a KeyError, a size mismatch an OSError."""
        from botocore.exceptions import ClientError

        params: dict[str, Any] = {"Range": f"bytes={offset}-{offset + length - 1}"} if ranged else {}
        try:
            reply, host, device = self._call("get_object", Bucket=self.bucket, Key=name, **params)
        except ClientError as error:
            if _code(error) in _MISSING_KEY:
                raise KeyError(f"no entry {key!r} in tier {self.context.tier_name!r}") from None
            raise
        if reply["ContentLength"] != length:
            reply["Body"].close()
            raise OSError(f"tier {self.context.tier_name!r}: GET of {name!r} at {offset} returned "
                          f"{reply['ContentLength']} bytes, expected {length}")
        return reply["Body"], host, device

    def _drain(self, body: Any, view: memoryview, name: str) -> None:
        got = 0
        while got < len(view):
            n = body.readinto(view[got:])
            if not n:
                raise OSError(f"tier {self.context.tier_name!r}: response for {name!r} ended after {got} of "
                              f"{len(view)} bytes")
            got += n
        body.read()  # reaching the end of the stream hands the connection back to the pool

    def _each_part(self, count: int, work: Callable[[int], tuple[float, float]]) -> tuple[float, float]:
        """``work(i)`` for every part, at most ``max_concurrency`` at once; summed (host, device).

        The calling thread is one of the workers, so progress never waits on a free pool thread;
        after a failure no new part starts, and the call returns only when no part is in flight.
        """
        indices, lock, failed = iter(range(count)), threading.Lock(), threading.Event()
        totals = [0.0, 0.0]

        def drain() -> None:
            while not failed.is_set():
                with lock:
                    index = next(indices, None)
                if index is None:
                    return
                try:
                    host, device = work(index)
                except BaseException:
                    failed.set()
                    raise
                with lock:
                    totals[0] += host
                    totals[1] += device

        helpers = [self._helpers.submit(drain) for _ in range(min(count, self.max_concurrency) - 1)
                   ] if self._helpers else []
        try:
            drain()
        finally:
            for helper in helpers:  # a helper still queued behind other operations has nothing left to do
                helper.cancel()
            wait(helpers)
        for helper in helpers:
            if not helper.cancelled():
                helper.result()
        return totals[0], totals[1]

    def _call(self, operation: str, client: Any = None, **params: Any) -> tuple[Any, float, float]:
        """One S3 request: (response, host seconds, device seconds), counted by operation."""
        with self._count_lock:
            self._requests[operation] += 1
        self._local.sent = None
        start = time.perf_counter()
        reply = getattr(client or self._client, operation)(**params)
        end = time.perf_counter()
        sent = self._local.sent or end
        return reply, sent - start, end - sent

    def _on_send(self, **_: Any) -> None:
        """botocore's ``before-send`` event: the request is built and signed, the wire starts now."""
        if getattr(self._local, "sent", None) is None:  # keep the first attempt: retries and backoff are device time
            self._local.sent = time.perf_counter()
        with self._count_lock:
            self._http_attempts += 1

    def _object(self, key: str) -> str:
        return self.key_prefix + check_key(key)

    # -- reporting, cleanup --------------------------------------------------------------------

    def counters(self) -> dict[str, Any]:
        """Requests issued by S3 operation, and HTTP attempts (more attempts than requests: retries)."""
        with self._count_lock:
            return {"requests": dict(sorted(self._requests.items())), "http_attempts": self._http_attempts}

    def describe(self) -> dict[str, Any]:
        return {
            "backend": self.name,
            "access_mechanism": "S3 REST API over HTTP(S) via boto3: PutObject or explicit multipart upload, "
                                "part-sized ranged GETs",
            "endpoint": self.endpoint,
            "region": self._client.meta.region_name if self._client else self.options.get("region"),
            "bucket": self.bucket,
            "key_prefix": self.key_prefix,
            "addressing_style": self.options["addressing_style"],
            "part_size": self.part_size,
            "max_concurrency": self.max_concurrency,
            "max_attempts": self.options["max_attempts"],
            "complete_timeout_s": parse_duration(self.options["complete_timeout"]),
            "checksum": self.options["checksum"],
            "identity_source": self.identity_source,  # not "credentials_…": the result redactor masks those keys
            "profile": self.options.get("profile"),
            "sdk": _sdk_versions(),
        }

    def _cleanup(self) -> None:
        """Delete every object under this run's prefix and abort its unfinished multipart uploads."""
        listing: dict[str, Any] = {"IsTruncated": True}
        while listing.get("IsTruncated"):
            more = {"ContinuationToken": listing["NextContinuationToken"]} if "NextContinuationToken" in listing else {}
            listing, _, _ = self._call("list_objects_v2", Bucket=self.bucket, Prefix=self.key_prefix,
                                       MaxKeys=DELETE_BATCH, **more)
            objects = [{"Key": item["Key"]} for item in listing.get("Contents", [])]
            if objects:
                reply, _, _ = self._call("delete_objects", Bucket=self.bucket,
                                         Delete={"Objects": objects, "Quiet": True})
                if reply.get("Errors"):
                    first = reply["Errors"][0]
                    raise OSError(f"tier {self.context.tier_name!r}: could not delete {len(reply['Errors'])} objects "
                                  f"under {self.key_prefix!r} (first: {first.get('Key')}: {first.get('Code')})")
        uploads: dict[str, Any] = {"IsTruncated": True}
        while uploads.get("IsTruncated"):
            more = {"KeyMarker": uploads["NextKeyMarker"], "UploadIdMarker": uploads["NextUploadIdMarker"]
                    } if "NextKeyMarker" in uploads else {}
            uploads, _, _ = self._call("list_multipart_uploads", Bucket=self.bucket, Prefix=self.key_prefix, **more)
            for upload in uploads.get("Uploads", []):
                self._call("abort_multipart_upload", Bucket=self.bucket, Key=upload["Key"],
                           UploadId=upload["UploadId"])


class _ViewReader(io.RawIOBase):
    """A seekable, read-only file over a memoryview: botocore accepts it as a body without a copy of
    the whole part (it refuses a bare memoryview), and can rewind it to retry or checksum."""

    def __init__(self, view: memoryview) -> None:
        super().__init__()
        self._view, self._position = view, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: len(self._view)}[whence]
        self._position = min(max(0, base + offset), len(self._view))
        return self._position

    def read(self, size: int | None = -1) -> bytes:
        end = len(self._view) if size is None or size < 0 else min(len(self._view), self._position + size)
        data = self._view[self._position:end].tobytes()
        self._position = end
        return data

    def readinto(self, buffer: Any) -> int:
        n = min(len(buffer), len(self._view) - self._position)
        buffer[:n] = self._view[self._position:self._position + n]
        self._position += n
        return n


class _MaskSecrets(logging.Filter):
    """Replaces credential strings in SDK log records: botocore logs request headers (the session
    token, the access key id in Authorization) at DEBUG, and a result's log must not carry them."""

    def __init__(self, secrets: Iterable[str | None]) -> None:
        super().__init__()
        self._secrets = [secret for secret in secrets if secret]
        self._loggers: list[logging.Logger] = []

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


def _answer(reply: dict[str, Any], field: str, operation: str, name: str) -> Any:
    """A field the reply must carry; a server dying mid-response can leave a 200 with a cut-off body."""
    value = reply.get(field)
    if not value:
        raise OSError(f"{operation} of {name!r} answered without {field} (a truncated response from a failing "
                      "server?)")
    return value


def _code(error: Any) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def _timing(start: float, host: float, device: float, nbytes: int, commands: int) -> IOTiming:
    """IOTiming for an operation; overlapping parts' summed times are scaled to fit the wall time."""
    total = time.perf_counter() - start
    busy = host + device
    if busy > total:
        scale = total / busy * (1 - 1e-9)  # the margin keeps the rounded sum of the scaled parts <= total
        host, device = host * scale, device * scale
    return IOTiming(total, host, device, nbytes, commands)


def _sdk_versions() -> dict[str, str]:
    import boto3
    import botocore

    return {"boto3": boto3.__version__, "botocore": botocore.__version__}
