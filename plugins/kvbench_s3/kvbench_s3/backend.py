"""S3 / S3-compatible object tier through boto3: explicit multipart uploads and ranged GETs.

The backend ties the tier's parts together, each in its own module: the
options (``options``), the session and its credentials, kept out of every log
(``session``), the clients through which every request is counted and timed
(``client``), moving an entry as parts (``transfers``), writing (``upload``),
reading (``ranged``), and the bucket's lifecycle (``bucket``).  See
docs/tiers/s3.md.

A server that stops answering never holds the run past its limits: requests end at their timeouts, the
entry deletes of the run's cleanup are not sent while the server does not answer, and the close's cleanup
waits at most ``cleanup_timeout``; what is left is listed in the result (``leftovers()``: the objects and
the unfinished uploads' ids) and recorded (``kvbench_core.contracts.leftovers``), so the next tier opened
on the bucket, or ``kvbench clean SPEC``, removes it.

An entry of at most ``part_size`` bytes is one PutObject / one GetObject.  A
larger one is CreateMultipartUpload + one UploadPart per part + Complete, and
is read with one ranged GET per part.  Every request is counted
(``counters()``, which the runner adds to the tier's result).

L4 split: ``host`` is fill/consume plus botocore's request building;
``device`` is from sending the request to having read the response body.  When
parts overlap, the summed per-part times exceed the wall time, so they are
scaled down in proportion to fit ``total``.
"""

from __future__ import annotations

import threading
import time
from typing import Any, ClassVar

from kvbench_core.contracts.backend import BackendContext, ByteSink, ByteSource, ClientBackend, IOTiming, check_key
from kvbench_core.contracts.errors import BackendUnavailable
from kvbench_core.contracts.leftovers import ServerCleanup, Unanswered
from kvbench_core.contracts.units import parse_duration, parse_size
from kvbench_s3 import ranged, upload
from kvbench_s3.bucket import delete_prefix, ensure_bucket
from kvbench_s3.client import S3Client
from kvbench_s3.options import OPTIONS_SCHEMA, PIECE
from kvbench_s3.session import MaskSecrets, open_session, sdk_versions
from kvbench_s3.transfers import Transfers


class S3Backend(ClientBackend):
    """A tier on an S3 bucket (AWS or any S3-compatible service); one object per entry."""

    name = "s3"
    requires: ClassVar[dict[str, str]] = {"boto3": "pip install kvbench-s3"}
    options_schema: ClassVar[dict[str, Any]] = OPTIONS_SCHEMA

    def __init__(self, options: dict[str, Any], context: BackendContext) -> None:
        super().__init__(options, context)
        self.bucket: str = self.options["bucket"]
        self.key_prefix = f"{self.options['prefix']}kvbench/{context.run_id}/"
        self.part_size = parse_size(self.options["part_size"])
        self.transfer_size = min(self.part_size, PIECE)
        self.max_concurrency: int = self.options["max_concurrency"]
        self.endpoint = self.options.get("endpoint_url", "AWS S3")  # what messages name until open() connects
        self.identity_source = "none"
        self.s3 = S3Client()  # every request goes through it, counted and timed
        self._transfers = Transfers(self.s3, self.bucket, self.part_size, self.max_concurrency,
                                    context.tier_name, context.io_log)
        self._mask: MaskSecrets | None = None
        self.cleanup_timeout_s = parse_duration(self.options["cleanup_timeout"])
        self._stored: set[str] = set()  # objects this run wrote and has not deleted: what a failed cleanup lists
        self._stored_lock = threading.Lock()
        self._unanswered: Unanswered | None = None  # set at open, with botocore's timeout and connection errors
        self._closing_by = 0.0  # when the close must be done: its helpers are waited for until then
        self._cleanups = ServerCleanup(context.label("s3"), context.run_id, self.cleanup_timeout_s, "bucket")

    @property
    def _client(self) -> Any:  # type: ignore[override]  # ClientBackend.close asks whether open() connected
        return self.s3.client

    # -- lifecycle -----------------------------------------------------------------------------

    def open(self) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        where = self.context.label("s3")
        session, credentials = open_session(self.options, where)
        self._mask = MaskSecrets.of(credentials)
        self._mask.attach()
        self.identity_source = credentials.method
        try:
            connections = self.context.concurrency * self.max_concurrency
            self.s3.connect(session, self.options, connections)
            self.endpoint = self.s3.client.meta.endpoint_url
            self._transfers.start(connections - self.context.concurrency)
            ensure_bucket(self.s3, self.bucket, create=self.options["create_bucket"], where=where,
                          endpoint=self.endpoint)
            self._unanswered = Unanswered(_timeouts())
            self._remove_recorded_leftovers()
        except ClientError as error:
            self._disconnect()
            raise BackendUnavailable(f"{where}: bucket '{self.bucket}' at {self.endpoint}: {error}") from None
        except BotoCoreError as error:  # connection refused, DNS, TLS, timeouts
            self._disconnect()
            raise BackendUnavailable(f"{where}: cannot reach {self.endpoint}: {error}") from None
        except BaseException:
            self._disconnect()
            raise

    def close(self) -> None:
        """Clean up and let go of the helpers, all within ``cleanup_timeout`` (the run's documented limit)."""
        self._closing_by = time.monotonic() + self.cleanup_timeout_s
        super().close()

    def _disconnect(self) -> None:
        abandoned = self._transfers.stop(wait_s=self._closing_by - time.monotonic())
        if abandoned:
            self._cleanups.notes.append(
                f"{self.context.label('s3')}: {abandoned} part requests still waiting on {self.endpoint} at the "
                f"cleanup limit ({self.cleanup_timeout_s:g} s) were abandoned (the process does not wait for "
                "them); an upload they belong to is listed in sections.leftovers unless the cleanup aborted it")
        self.s3.close()
        if self._mask is not None:
            self._mask.detach()
            self._mask = None

    # -- data path -----------------------------------------------------------------------------

    def write(self, key: str, source: ByteSource) -> IOTiming:
        name = self.object_name(key)
        with self._stored_lock:
            self._stored.add(name)  # before the first byte: a write cut short may still leave the object
        assert self._unanswered is not None
        with self._unanswered.watching():
            return upload.write_entry(self._transfers, key, name, source)

    def read(self, key: str, size: int, sink: ByteSink) -> IOTiming:
        assert self._unanswered is not None
        with self._unanswered.watching():
            return ranged.read_entry(self._transfers, key, self.object_name(key), size, sink)

    def read_range(self, key: str, offset: int, out: memoryview) -> None:
        assert self._unanswered is not None
        with self._unanswered.watching():
            ranged.read_range(self._transfers, key, self.object_name(key), offset, out)

    def delete(self, key: str) -> None:
        """Delete the entry's object; while the server does not answer, not sent (the object stays listed
        as this run's, for the close's cleanup or, failing that, the leftovers)."""
        assert self._unanswered is not None
        if self._unanswered.now:
            return
        name = self.object_name(key)
        with self._unanswered.watching():
            self.s3.call("delete_object", Bucket=self.bucket, Key=name)
        with self._stored_lock:
            self._stored.discard(name)

    def object_name(self, key: str) -> str:
        """The object key of the entry ``key``: the run's prefix and the checked entry key."""
        return self.key_prefix + check_key(key)

    # -- reporting, cleanup --------------------------------------------------------------------

    def counters(self) -> dict[str, Any]:
        """Requests issued by S3 operation, and HTTP attempts (more attempts than requests: retries)."""
        return self.s3.counters()

    def describe(self) -> dict[str, Any]:
        client = self.s3.client
        return {
            "backend": self.name,
            "access_mechanism": "S3 REST API over HTTP(S) via boto3: PutObject or explicit multipart upload, "
                                "part-sized ranged GETs",
            "endpoint": self.endpoint,
            "region": client.meta.region_name if client else self.options.get("region"),
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
            "sdk": sdk_versions(),
        }

    def _cleanup(self) -> None:
        """Delete every object under this run's prefix and abort its unfinished multipart uploads, waiting at
        most ``cleanup_timeout``; what is left then is listed and recorded for a later run to remove."""
        self._cleanups.clean(
            self._place, lambda: delete_prefix(self.s3, self.bucket, self.key_prefix, self.context.tier_name),
            name=f"kvbench-s3-cleanup-{self.context.tier_name}", items=self._left_items,
            said=lambda left: f"{len(left['objects'])} objects and {len(left['uploads'])} unfinished multipart "
                              f"uploads left under s3://{self.bucket}/{self.key_prefix}")

    def _left_items(self) -> dict[str, Any]:
        """What this run may have left: the objects it stored and did not delete, the uploads not ended."""
        with self._stored_lock:
            objects = sorted(self._stored)
        uploads = [{"key": name, "upload_id": upload_id} for name, upload_id in sorted(self._transfers.uploads.items())]
        return {"prefix": self.key_prefix, "objects": objects, "uploads": uploads}

    @property
    def _place(self) -> str:
        """Where leftovers are recorded for: the endpoint, the bucket and the user's prefix."""
        return f"s3 {self.endpoint} {self.bucket}/{self.options['prefix']}"

    def _remove_recorded_leftovers(self) -> None:
        """What earlier runs recorded as left on this bucket: removed (under the cleanup deadline), said.
        Only a run prefix of this place: never delete outside kvbench's own."""
        self._cleanups.remove_recorded(
            self._place, lambda prefix: prefix.startswith(f"{self.options['prefix']}kvbench/"),
            lambda prefix: delete_prefix(self.s3, self.bucket, prefix, self.context.tier_name),
            name="kvbench-s3-leftovers", where=lambda prefix: f"s3://{self.bucket}/{prefix}",
            what="objects and uploads")

    def notes(self) -> list[str]:
        return list(self._cleanups.notes)

    def leftovers(self) -> dict[str, Any] | None:
        return self._cleanups.leftovers()


def _timeouts() -> tuple[type[BaseException], ...]:
    """botocore's errors of a server that does not answer: timeouts and lost or refused connections."""
    from botocore.exceptions import ConnectionError as NoConnection
    from botocore.exceptions import HTTPClientError

    return (NoConnection, HTTPClientError)
