"""kvbench's own test helpers, shared by the core's and every plugin's tests (on the path via pytest's ``pythonpath``).

Not part of the public conformance suite (``kvbench_core.contracts.conformance``): these
start and stop the real servers kvbench's suite runs against, which a vendor's tests never need.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any


def sigint_reaches_children() -> None:
    """Let the processes a test interrupts see their SIGINT, however the test session was started.

    A session started with SIGINT ignored (``nohup pytest &``, a background CI step) passes the ignore on
    through every ``exec``, so a kvbench child or a stand-in bpftrace never sees the SIGINT a test sends
    it (Python then installs no KeyboardInterrupt handler; ``sh`` cannot even trap it).  A handled signal
    is reset to its default on ``exec``, so reinstalling Python's own handler here fixes every child."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def eventually(condition: Callable[[], bool], limit_s: float = 10.0) -> bool:
    """Whether ``condition()`` becomes true within ``limit_s``: a synchronisation with another thread, never
    a timing (the limit only keeps a broken test from hanging)."""
    deadline = time.monotonic() + limit_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def free_port(*, paired_offset: int | None = None) -> int:
    """A TCP port on 127.0.0.1 nobody listens on: for a test server, or an endpoint that is down.

    With ``paired_offset``, port + offset is free too (a Redis Cluster node
    also listens on its port + 10000, the cluster bus).
    """
    while True:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        if paired_offset is None:
            return port
        if port + paired_offset < 65536:
            with socket.socket() as paired:
                try:
                    paired.bind(("127.0.0.1", port + paired_offset))
                except OSError:
                    continue
            return port


class ServerProcess:
    """A server child process the tests started (redis-server, moto's S3 server): subclasses set ``process``."""

    process: subprocess.Popen[bytes]

    def kill(self) -> None:
        """SIGKILL: the server vanishes mid-use, as in a crash."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def stop(self) -> None:
        """SIGTERM, and SIGKILL when the server has not exited within 10 s."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


@contextlib.contextmanager
def registered(plugin: object, name: str) -> Iterator[object]:
    """``plugin`` (an object with ``@hookimpl`` methods) registered with kvbench's plugin manager for the
    block, the cached registry re-read on the way in and out, so the block sees its backends, sources,
    autoscalers and codecs and the next test does not."""
    from kvbench_core.contracts.plugins import get_plugin_manager, registry

    manager = get_plugin_manager()
    manager.register(plugin, name=name)
    registry.cache_clear()
    try:
        yield plugin
    finally:
        manager.unregister(name=name)
        registry.cache_clear()


class CommandLog:
    """A ``BackendContext.io_log`` for tests: every per-command record a tier writes, in order, as
    ``(key, op, offset, nbytes)`` (the times only checked to be in order)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, int, int]] = []

    def record(self, key: str, op: str, offset: int, nbytes: int, start_s: float, end_s: float) -> None:
        assert end_s >= start_s
        self.seen.append((key, op, offset, nbytes))


def document_with(**sections: Any) -> Any:
    """A typed result document for a unit test of one section's reader: a real result kvbench wrote
    (tests/reports/golden/run.json) with ``sections`` put in its place (``metrics={...}``, ``timeseries=[...]``)."""
    import json as _json

    from kvbench_core.results.document import ResultDocument

    data = _json.loads((Path(__file__).parent / "reports" / "golden" / "run.json").read_text())
    data.update(sections)
    return ResultDocument.unchecked(data)
