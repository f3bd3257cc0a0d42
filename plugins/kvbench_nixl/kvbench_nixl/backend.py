"""The NIXL tier: KV entries moved by NVIDIA's NIXL library, through the backend plugin the options name.

``nixl_backend`` selects NIXL's plugin: ``POSIX`` (files, NIXL's io queue:
libaio by default, io_uring or POSIX AIO via ``params``), ``OBJ`` (S3 objects
through aws-sdk-cpp), ``GDS`` / ``GDS_MT`` (cuFile; a GPU host only).  It is
the transfer path Dynamo, LMCache and vLLM use, measured on kvbench's workload
next to kvbench's own tiers.

Data path.  ``concurrency`` lanes (``kvbench_nixl.arena``), each a NIXL agent
with a region of ``queue_depth`` pieces of ``transfer_size`` bytes registered
at ``open`` (``agents: shared``: one agent, one region of ``concurrency``
slots).  An operation holds one lane.  A write fills up to ``queue_depth``
pieces of its slot from the source, then posts them as one NIXL request (one descriptor per
piece, so ``queue_depth`` commands in flight) and waits for it; then the next
batch.  A read posts a batch, waits, and hands the pieces to the sink.  No
memory is registered or allocated per operation.  What NIXL needs per entry is
bookkeeping of where the bytes go: a file descriptor registered as a ``FILE``
segment (POSIX, GDS), or the entry's objects registered as ``OBJ`` segments
(``kvbench_nixl.objects``).

L4 split (``kvbench_nixl.transfer``): device from posting a request to its completion, host
the filling, consuming and NIXL bookkeeping around it; ``commands`` = descriptors posted.
Starting NIXL (GPU checks, agents, params, the first round trip) is ``kvbench_nixl.startup``.

Files (POSIX, GDS) follow the nvme tier's rules: ``<path>/<run_id>-<key>.kv``
in a ``TierDirectory`` (system paths refused, owner marker, non-empty foreign
directories refused), ``fsync`` after each write, ``posix_fadvise(DONTNEED)``
before each read, every file this backend created removed at ``close``.
O_DIRECT is not offered: NIXL's POSIX plugin reports the short read at the end
of a file as an error, which the last block of an entry whose size is not a
multiple of 4 KiB always is.

Objects (OBJ): the bucket's control plane (credentials, bucket check, deletes,
cleanup) is the s3 tier's ``S3Backend``; credentials come from the boto3 chain
and go to NIXL's OBJ plugin in memory only, never into the declaration.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from typing import Any, ClassVar

from kvbench_s3.backend import S3Backend

from kvbench_core.contracts.backend import BackendContext, ByteSink, ByteSource, DiscardSink, IOTiming, check_key
from kvbench_core.contracts.errors import BackendUnavailable
from kvbench_core.contracts.validation import with_defaults
from kvbench_core.filetiers.directory import TierDirectory
from kvbench_core.filetiers.entry_files import EntryFilesBackend
from kvbench_core.filetiers.fsinfo import describe_location
from kvbench_nixl.arena import Lane, Lanes
from kvbench_nixl.library import Agent, Library, NixlRequirements, load
from kvbench_nixl.objects import ObjectPieces, open_bucket
from kvbench_nixl.options import (
    FILE_BACKENDS,
    GPU_BACKENDS,
    OPTIONS_SCHEMA,
    check_combinations,
    plugin_params,
    posix_io_queue,
    transfer_size,
)
from kvbench_nixl.startup import check_params, probe, require_gpu, start_agent
from kvbench_nixl.transfer import Piece, Remote, Split, batches, charged, file_segment, post, translate


class NixlBackend(EntryFilesBackend):
    """A tier whose bytes NIXL moves between registered memory and files or S3 objects."""

    name = "nixl"
    requires = NixlRequirements()  # evaluated at selection: any NIXL wheel satisfies it
    options_schema: ClassVar[dict[str, Any]] = OPTIONS_SCHEMA

    @classmethod
    def check_options(cls, options: dict[str, Any], path: str) -> None:
        full = with_defaults(cls.options_schema, options)
        check_combinations(full, given=frozenset(options), where=path)
        transfer_size(full["transfer_size"], path)

    def __init__(self, options: dict[str, Any], context: BackendContext) -> None:
        super().__init__(options, context)
        self.label = context.label(self.name)
        self.where = context.options_where
        self.nixl_backend: str = self.options["nixl_backend"]
        self.files = self.nixl_backend in FILE_BACKENDS
        self.check_options(options, self.where)
        self.queue_depth: int = self.options["queue_depth"]
        self.memory: str = self.options["memory"]
        self.device: str = self.options["device"]
        self.shared_agent = self.options["agents"] == "shared"
        self.transfer_size = transfer_size(self.options["transfer_size"], self.where)
        self.params = plugin_params(self.options["params"])
        self.fsync: bool = self.options["fsync"]
        self.drop_cache: bool = self.options["drop_cache"]
        if self.files:
            self.directory = TierDirectory(self.options["path"], check_key(context.run_id),
                                           allow_nonempty=self.options["allow_nonempty"], label=self.label)
        self.library: Library | None = None
        self.lanes: Lanes | None = None
        self.objects: ObjectPieces | None = None
        self._control: S3Backend | None = None
        self._described_params: dict[str, str] = {}
        self._commands = 0
        self._count_lock = threading.Lock()

    # -- lifecycle -------------------------------------------------------------------------------

    def open(self) -> None:
        """Load NIXL, start the plugin (GPU backends check the driver first), set up the directory or
        the bucket, register the arena, and prove the path with one small round trip."""
        if self.nixl_backend in GPU_BACKENDS or self.memory == "VRAM":
            require_gpu(self.label, self.nixl_backend, self.memory)
        try:
            self.library = load()
        except ImportError as error:
            raise BackendUnavailable(f"{self.label}: {error}") from None
        try:
            params = dict(self.params)
            if self.files:
                self.directory.open()
            else:
                self._control, bucket_params = open_bucket(self.options, self.context)
                params.update(bucket_params)
                # NIXL's OBJ plugin starts half the host's cores as request threads per agent; an agent
                # here has at most queue_depth requests (x concurrency when shared) in flight.
                lanes_per_agent = max(1, self.context.concurrency) if self.shared_agent else 1
                params.setdefault("num_threads", str(self.queue_depth * lanes_per_agent))
            self.lanes = Lanes(lambda index: self._start_agent(params, index), count=max(1, self.context.concurrency),
                               shared=self.shared_agent, memory=self.memory, pieces=self.queue_depth,
                               piece_bytes=self.transfer_size, device=self.device)
            check_params(self.lanes.agents[0], self.params, self.nixl_backend, self.where)
            self._described_params = {key: value for key, value in params.items()
                                      if key not in ("access_key", "secret_key", "session_token")}
            if not self.files:
                self.objects = ObjectPieces(self._control, self.transfer_size)
            probe(self, f"probe-{self.context.run_id}",
                  f"{self.label}: a 4 KiB probe through NIXL {self.nixl_backend} failed ({self._place()})")
        except BaseException:
            self._release()
            if self.files:
                self.directory.close()  # removed only if kvbench made it and it holds nothing else
            raise

    def _start_agent(self, params: dict[str, str], index: int) -> Agent:
        assert self.library is not None
        return start_agent(self.library, f"kvbench-{self.context.run_id}-{self.context.tier_name}-{index}",
                           self.nixl_backend, params, self.label)

    def _place(self) -> str:
        return self.directory.path if self.files else f"bucket {self.options['bucket']}"

    def close(self) -> None:
        self._release()
        if self.files:
            self._remove_files()

    def _release(self) -> None:
        """Deregister and drop NIXL state, then close the bucket's control plane (which cleans up)."""
        self.objects = None
        if self.lanes is not None:
            self.lanes.close()
            self.lanes = None
        if self._control is not None:
            control, self._control = self._control, None
            control.close()

    # -- data path -------------------------------------------------------------------------------

    def _batches(self, start: int, end: int) -> Iterator[list[Piece]]:
        return batches(start, end, self.transfer_size, self.queue_depth)

    def _move(self, operation: str, key: str, lane: Lane, batch: list[Piece], remote: Remote, split: Split) -> None:
        """One NIXL request for ``batch``, counted and reported to the run's I/O log."""
        started, ended = post(lane, operation, batch, self.memory, remote, "FILE" if self.files else "OBJ", split)
        with self._count_lock:
            self._commands += len(batch)
        log = self.context.io_log
        if log is not None:
            for offset, n in batch:
                log.record(key, operation.lower(), offset, n, started, ended)

    @contextlib.contextmanager
    def _operation(self, what: str, key: str) -> Iterator[Lane]:
        """A lane for one operation, with NIXL's exceptions inside turned into an ``OSError`` naming it."""
        assert self.lanes is not None and self.library is not None, "open() the tier first"
        with self.lanes.lane() as lane, translate(self.library.errors, f"NIXL {self.nixl_backend} {what} of {key!r}"):
            yield lane

    def write(self, key: str, source: ByteSource) -> IOTiming:
        size, split, start = source.size, Split(), time.perf_counter()
        commands = 0
        with self._operation("write", key) as lane, self._remote_for_write(lane, key, size, split) as remote:
            for batch in self._batches(0, size):
                with split.charge("host"):
                    for index, (offset, n) in enumerate(batch):
                        source.fill(offset, lane.arena.host_piece(lane.slot, index, n))
                        lane.arena.to_device(lane.slot, index, n)
                self._move("WRITE", key, lane, batch, remote, split)
                commands += len(batch)
        return IOTiming(time.perf_counter() - start, split.host, split.device, size, commands)

    def read(self, key: str, size: int, sink: ByteSink) -> IOTiming:
        inspect = not isinstance(sink, DiscardSink)  # a VRAM arena copies to the host only for such a sink
        split, start = Split(), time.perf_counter()
        commands = 0
        with self._operation("read", key) as lane, self._remote_for_read(lane, key, split) as remote:
            for batch in self._batches(0, size):
                self._move("READ", key, lane, batch, remote, split)
                commands += len(batch)
                if inspect:
                    with split.charge("host"):
                        for index, (offset, n) in enumerate(batch):
                            lane.arena.from_device(lane.slot, index, n)
                            sink.consume(offset, lane.arena.host_piece(lane.slot, index, n))
        return IOTiming(time.perf_counter() - start, split.host, split.device, size, commands)

    def read_range(self, key: str, offset: int, out: memoryview) -> None:
        """Read through the lane's arena and copy into the caller's buffer (a demotion's source side)."""
        split = Split()
        with self._operation("read", key) as lane, self._remote_for_read(lane, key, split) as remote:
            for batch in self._batches(offset, offset + len(out)):
                self._move("READ", key, lane, batch, remote, split)
                for index, (at, n) in enumerate(batch):
                    lane.arena.from_device(lane.slot, index, n)
                    out[at - offset:at - offset + n] = lane.arena.host_piece(lane.slot, index, n)

    @contextlib.contextmanager
    def _remote_for_write(self, lane: Lane, key: str, size: int,
                          split: Split) -> Iterator[Remote]:
        if not self.files:
            assert self.objects is not None
            with charged(split, self.objects.writing(lane.agent, key, size)) as remote:
                yield remote
            return
        with self.new_entry_file(key) as path, \
                file_segment(lane.agent, path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, split) as fd:
            yield lambda offset, n: (offset, n, fd)
            if self.fsync:
                with split.charge("device"):
                    os.fsync(fd)

    @contextlib.contextmanager
    def _remote_for_read(self, lane: Lane, key: str, split: Split) -> Iterator[Remote]:
        if not self.files:
            assert self.objects is not None
            with charged(split, self.objects.reading(lane.agent, key)) as remote:
                yield remote
            return
        with file_segment(lane.agent, self.path_of(key), os.O_RDONLY, split) as fd:
            with split.charge("host"):
                if self.drop_cache:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)  # read whole, front to back, as nvme says
            yield lambda offset, n: (offset, n, fd)

    def delete(self, key: str) -> None:
        if self.files:
            super().delete(key)
        elif self.objects is not None:
            self.objects.delete(key)

    def capacity_bytes(self) -> int | None:
        return super().capacity_bytes() if self.files else None

    # -- declaration -----------------------------------------------------------------------------

    def counters(self) -> dict[str, Any]:
        """NIXL descriptors posted (the commands of every operation, probe included)."""
        with self._count_lock:
            return {"nixl_descriptors": self._commands}

    def notes(self) -> list[str]:
        return self.directory.notes() if self.files else []

    def describe(self) -> dict[str, Any]:
        library = self.library
        version = library.version if library else "not loaded"
        what = {
            "POSIX": f"file I/O by NIXL's POSIX plugin (io queue: {posix_io_queue(self.params)})",
            "OBJ": "S3 PutObject / ranged GetObject by NIXL's OBJ plugin (aws-sdk-cpp)",
            "GDS": "cuFile by NIXL's GDS plugin",
            "GDS_MT": "cuFile by NIXL's multi-threaded GDS plugin",
        }[self.nixl_backend]
        info: dict[str, Any] = {
            "backend": self.name,
            "medium": "files on a local filesystem" if self.files else "objects in an S3 bucket",
            "access_mechanism": f"NIXL {self.nixl_backend}: {what}, from registered {self.memory}",
            "driver_layer": f"NIXL {version} ({library.distribution if library else 'no wheel'}) "
                            f"{self.nixl_backend} plugin",
            "nixl_version": version,
            "nixl_backend": self.nixl_backend,
            "nixl_params": dict(sorted(self._described_params.items())),
            "memory": self.memory,
            "registered_bytes": self.lanes.nbytes if self.lanes else 0,
            "agents": len(self.lanes.agents) if self.lanes else 0,
            "queue_depth": self.queue_depth,
            "commands_in_flight": self.queue_depth,
            "transfer_size": self.transfer_size,
        }
        if self.nixl_backend == "POSIX":
            info["io_queue"] = posix_io_queue(self.params)
        if self.files:
            location = describe_location(self.directory.path)
            filesystem = location["filesystem"]
            return {**info, "path": self.directory.path, "fsync": self.fsync, "drop_cache": self.drop_cache,
                    "fs_type": filesystem["type"] if isinstance(filesystem, dict) else "unknown filesystem",
                    **location}
        control = self._control
        return {**info, "bucket": self.options["bucket"],
                "endpoint": self.options.get("endpoint_url", "AWS S3"),
                "key_prefix": control.key_prefix if control else None,
                "identity_source": control.identity_source if control else None}
