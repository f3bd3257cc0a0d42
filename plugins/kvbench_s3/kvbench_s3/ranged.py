"""Reading an entry: one GetObject, or one part-sized ranged GET per part, into reused buffers.

Each GET's body is read into this thread's part buffer and then handed to the
sink in bounded pieces; a missing object is a ``KeyError``, a reply of the
wrong length or one cut short an ``OSError`` naming the object.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from kvbench_core.contracts.backend import ByteSink, IOTiming
from kvbench_core.contracts.buffers import consume_pieces
from kvbench_s3.client import MISSING_KEY, error_code
from kvbench_s3.options import PIECE
from kvbench_s3.transfers import Transfers, timing


def read_entry(transfers: Transfers, key: str, name: str, size: int, sink: ByteSink) -> IOTiming:
    """Hand the ``size`` bytes of the object ``name`` (the entry ``key``) to ``sink``."""
    start, turn = time.perf_counter(), threading.Lock()
    if size <= transfers.part_size:
        host, device = _get(transfers, key, name, 0, size, sink, turn, ranged=False)
        return timing(start, host, device, size, 1)
    count = transfers.part_count(size)

    def part(index: int) -> tuple[float, float]:
        return _get(transfers, key, name, index * transfers.part_size, transfers.part_length(index, size), sink,
                    turn, ranged=True)

    host, device = transfers.each_part(count, part)
    return timing(start, host, device, size, count)


def read_range(transfers: Transfers, key: str, name: str, offset: int, out: memoryview) -> None:
    """Fill ``out`` with the object's bytes from ``offset`` on: one ranged GET."""
    if len(out):
        sent = time.perf_counter()
        body, _, _ = _fetch(transfers, key, name, offset, len(out), ranged=True)
        _drain(transfers, body, out, name)
        transfers.log(key, "read", offset, len(out), sent)


def _get(transfers: Transfers, key: str, name: str, offset: int, length: int, sink: ByteSink, turn: threading.Lock,
         *, ranged: bool) -> tuple[float, float]:
    """GET ``length`` bytes at ``offset`` into this thread's buffer and hand them to the sink."""
    view = transfers.buffers.get(length)
    sent = time.perf_counter()
    body, host, device = _fetch(transfers, key, name, offset, length, ranged=ranged)
    t0 = time.perf_counter()
    _drain(transfers, body, view, name)
    device += time.perf_counter() - t0
    transfers.log(key, "read", offset, length, sent)  # one GET, from request to the last byte
    with turn:
        t0 = time.perf_counter()
        consume_pieces(sink, offset, view, PIECE)
        host += time.perf_counter() - t0
    return host, device


def _fetch(transfers: Transfers, key: str, name: str, offset: int, length: int, *,
           ranged: bool) -> tuple[Any, float, float]:
    """Issue the GET; a missing object is a KeyError, a size mismatch an OSError."""
    from botocore.exceptions import ClientError

    params: dict[str, Any] = {"Range": f"bytes={offset}-{offset + length - 1}"} if ranged else {}
    try:
        reply, host, device = transfers.client.call("get_object", Bucket=transfers.bucket, Key=name, **params)
    except ClientError as error:
        if error_code(error) in MISSING_KEY:
            raise KeyError(f"no entry {key!r} in tier {transfers.tier_name!r}") from None
        raise
    if reply["ContentLength"] != length:
        reply["Body"].close()
        raise OSError(f"tier {transfers.tier_name!r}: GET of {name!r} at {offset} returned "
                      f"{reply['ContentLength']} bytes, expected {length}")
    return reply["Body"], host, device


def _drain(transfers: Transfers, body: Any, view: memoryview, name: str) -> None:
    """Read the whole response body into ``view``; a body cut short is an OSError."""
    got = 0
    while got < len(view):
        n = body.readinto(view[got:])
        if not n:
            raise OSError(f"tier {transfers.tier_name!r}: response for {name!r} ended after {got} of "
                          f"{len(view)} bytes")
        got += n
    body.read()  # reaching the end of the stream hands the connection back to the pool
