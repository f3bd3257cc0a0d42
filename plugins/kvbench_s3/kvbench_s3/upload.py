"""Writing an entry: one PutObject, or an explicit multipart upload with one UploadPart per part.

Why not boto3's managed transfer (``upload_fileobj`` + ``TransferConfig``): it
copies the source into fresh buffers per part and says nothing about the
requests it issued.  Here every part is filled from ``source.fill`` into a
reused per-thread buffer and sent as one ``UploadPart``; a failed upload is
aborted (and cleanup aborts any leftover under the run's prefix anyway).
"""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from typing import Any

from kvbench_core.contracts.backend import ByteSource, IOTiming
from kvbench_core.contracts.buffers import fill_pieces
from kvbench_s3.client import answer
from kvbench_s3.options import PIECE
from kvbench_s3.transfers import Transfers, timing


def write_entry(transfers: Transfers, key: str, name: str, source: ByteSource) -> IOTiming:
    """Store ``source`` as the object ``name`` (the entry ``key``)."""
    start = time.perf_counter()
    call, bucket, size, turn = transfers.client.call, transfers.bucket, source.size, threading.Lock()
    if size <= transfers.part_size:
        _, host, device = _send_filled(transfers, key, source, 0, size, turn, lambda body: call(
            "put_object", Bucket=bucket, Key=name, Body=body))
        return timing(start, host, device, size, 1)
    count = transfers.part_count(size)
    reply, host, device = call("create_multipart_upload", Bucket=bucket, Key=name)
    upload, etags = answer(reply, "UploadId", "CreateMultipartUpload", name), [""] * count
    transfers.uploads[name] = upload  # until completed or aborted: a leftover if the server stops answering

    def part(index: int) -> tuple[float, float]:
        reply, host, device = _send_filled(transfers, key, source, index * transfers.part_size,
                                           transfers.part_length(index, size), turn,
                                           lambda body: call("upload_part", Bucket=bucket, Key=name, UploadId=upload,
                                                             PartNumber=index + 1, Body=body))
        etags[index] = answer(reply, "ETag", "UploadPart", name)
        return host, device

    try:
        parts_host, parts_device = transfers.each_part(count, part)
        manifest = [{"ETag": etag, "PartNumber": number} for number, etag in enumerate(etags, 1)]
        _, done_host, done_device = call("complete_multipart_upload", Bucket=bucket, Key=name, UploadId=upload,
                                         MultipartUpload={"Parts": manifest}, finish=True)
    except BaseException:
        with suppress(Exception):  # best effort: cleanup aborts leftover uploads under the prefix anyway
            call("abort_multipart_upload", Bucket=bucket, Key=name, UploadId=upload)
            transfers.uploads.pop(name, None)
        raise
    transfers.uploads.pop(name, None)
    # A device command is a request that moves payload bytes (each is in the I/O log with its bytes): the
    # parts.  Create/Complete move none; their time is in the operation's, their count in counters().
    return timing(start, host + parts_host + done_host, device + parts_device + done_device, size, count)


def _send_filled(transfers: Transfers, key: str, source: ByteSource, offset: int, length: int, turn: threading.Lock,
                 send: Callable[[ViewReader], tuple[Any, float, float]]) -> tuple[Any, float, float]:
    """Fill ``length`` bytes at ``offset`` into this thread's buffer, then ``send`` them as one request
    (a device command: reported through ``io_log`` from send to reply)."""
    view = transfers.buffers.get(length)
    with turn:
        t0 = time.perf_counter()
        fill_pieces(source, offset, view, PIECE)
        filled = time.perf_counter() - t0
    sent = time.perf_counter()
    reply, host, device = send(ViewReader(view))
    transfers.log(key, "write", offset, length, sent)
    return reply, filled + host, device


class ViewReader(io.RawIOBase):
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
