"""One NIXL request and its accounting: pieces cut into batches, posted, waited for, charged.

An operation's bytes are cut at ``transfer_size`` boundaries (so no piece
crosses an object) and grouped ``queue_depth`` pieces to a request.

L4 split.  ``device`` = from posting a request until NIXL reports it done
(polled with a back-off capped at ``kvbench_nixl.library.MAX_POLL_S``), plus
``open``, ``fsync`` and ``close`` of entry files.  ``host`` = filling and
consuming pieces (and the host<->GPU copies of a VRAM arena), the page-cache
drop, and NIXL's user-space bookkeeping (registering the file or objects,
creating and releasing the request).  The parts are disjoint intervals of the
calling thread, so ``host + device <= total``.  ``commands`` = descriptors
posted (pieces).  For OBJ the device time includes the SDK's request signing,
which runs inside NIXL's threads and cannot be told apart.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

from kvbench_nixl.arena import Lane
from kvbench_nixl.library import Agent

Descriptor = tuple[int, int, int]  # NIXL's (address or offset, length, device id or fd)
Piece = tuple[int, int]  # (offset in the entry, length)
Remote = Callable[[int, int], Descriptor]  # the remote side's descriptor of a piece


class Split:
    """Host and device seconds of one operation, charged as disjoint intervals of one thread."""

    __slots__ = ("device", "host")

    def __init__(self) -> None:
        self.host = 0.0
        self.device = 0.0

    @contextlib.contextmanager
    def charge(self, part: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            setattr(self, part, getattr(self, part) + time.perf_counter() - start)


def batches(start: int, end: int, transfer_size: int, queue_depth: int) -> Iterator[list[Piece]]:
    """The bytes ``[start, end)`` as pieces cut at ``transfer_size`` boundaries (so no piece crosses
    an object), grouped ``queue_depth`` to a request."""
    batch: list[Piece] = []
    position = start
    while position < end:
        n = min(end, (position // transfer_size + 1) * transfer_size) - position
        batch.append((position, n))
        position += n
        if len(batch) == queue_depth:
            yield batch
            batch = []
    if batch:
        yield batch


def post(lane: Lane, operation: str, batch: list[Piece], memory: str, remote: Remote, remote_memory: str,
         split: Split) -> tuple[float, float]:
    """One NIXL request: ``batch`` between the lane's pieces and the remote side, waited for.

    Returns when it was posted and when NIXL reported it done (the device interval).
    """
    local = [lane.arena.piece(lane.slot, i, n) for i, (_, n) in enumerate(batch)]
    with split.charge("host"):
        request = lane.agent.prepare(operation, local, memory, [remote(offset, n) for offset, n in batch],
                                     remote_memory)
    try:
        started = time.perf_counter()
        lane.agent.run(request)
        ended = time.perf_counter()
        split.device += ended - started
    finally:
        with split.charge("host"):
            lane.agent.release(request)
    return started, ended


@contextlib.contextmanager
def charged(split: Split, registration: contextlib.AbstractContextManager[Any]) -> Iterator[Any]:
    """Enter and leave a NIXL registration as host time, and nothing in between."""
    with split.charge("host"):
        remote = registration.__enter__()
    try:
        yield remote
    except BaseException as error:
        if not registration.__exit__(type(error), error, error.__traceback__):
            raise
        return
    with split.charge("host"):
        registration.__exit__(None, None, None)


@contextlib.contextmanager
def file_segment(agent: Agent, path: str, flags: int, split: Split) -> Iterator[int]:
    """An entry file opened and registered with ``agent`` as a FILE segment for one operation."""
    with split.charge("device"):
        fd = os.open(path, flags | os.O_CLOEXEC, 0o644)
    try:
        with split.charge("host"):
            registration = agent.register([(0, 0, fd, "")], "FILE")
        try:
            yield fd
        finally:
            with split.charge("host"):
                agent.deregister(registration)
    finally:
        with split.charge("device"):
            os.close(fd)


@contextlib.contextmanager
def translate(errors: tuple[type[BaseException], ...], what: str) -> Iterator[None]:
    """NIXL's exceptions inside turned into an ``OSError`` naming ``what``."""
    try:
        yield
    except errors as error:
        raise OSError(f"{what} failed: {type(error).__name__}: {error}") from None
