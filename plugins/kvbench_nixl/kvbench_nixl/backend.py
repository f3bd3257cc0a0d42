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

L4 split.  ``device`` = from posting a request until NIXL reports it done
(polled with a back-off capped at ``kvbench_nixl.library.MAX_POLL_S``), plus
``open``, ``fsync`` and ``close`` of entry files.  ``host`` = filling and
consuming pieces (and the host<->GPU copies of a VRAM arena), the page-cache
drop, and NIXL's user-space bookkeeping (registering the file or objects,
creating and releasing the request).  The parts are disjoint intervals of the
calling thread, so ``host + device <= total``.  ``commands`` = descriptors
posted (pieces).  For OBJ the device time includes the SDK's request signing,
which runs inside NIXL's threads and cannot be told apart.

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
import ctypes
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

from kvbench_s3.backend import S3Backend

from kvbench_core.contracts.backend import BackendContext, ByteSink, ByteSource, DiscardSink, IOTiming, check_key
from kvbench_core.contracts.errors import BackendUnavailable, SpecError
from kvbench_core.contracts.validation import with_defaults
from kvbench_core.filetiers.directory import TierDirectory
from kvbench_core.filetiers.entry_files import EntryFilesBackend
from kvbench_core.filetiers.fsinfo import describe_location
from kvbench_nixl.arena import ALIGN, Lane, Lanes
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

Descriptor = tuple[int, int, int]
Piece = tuple[int, int]  # (offset in the entry, length)


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


class NixlBackend(EntryFilesBackend):
    """A tier whose bytes NIXL moves between registered memory and files or S3 objects."""

    name = "nixl"
    requires = NixlRequirements()  # evaluated at selection: any NIXL wheel satisfies it
    options_schema: ClassVar[dict[str, Any]] = OPTIONS_SCHEMA

    @classmethod
    def check_options(cls, options: dict[str, Any], tier_name: str) -> None:
        where, full = f"tiers.{tier_name}.options", with_defaults(cls.options_schema, options)
        check_combinations(full, given=frozenset(options), where=where)
        transfer_size(full["transfer_size"], where)

    def __init__(self, options: dict[str, Any], context: BackendContext) -> None:
        super().__init__(options, context)
        self.label = f"tier '{context.tier_name}' ({self.name})"
        self.where = f"tiers.{context.tier_name}.options"
        self.nixl_backend: str = self.options["nixl_backend"]
        self.files = self.nixl_backend in FILE_BACKENDS
        self.check_options(options, context.tier_name)
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
            self._require_gpu()
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
            self._check_params(self.lanes.agents[0])
            self._described_params = {key: value for key, value in params.items()
                                      if key not in ("access_key", "secret_key", "session_token")}
            if not self.files:
                self.objects = ObjectPieces(self._control, self.transfer_size)
            self._probe()
        except BaseException:
            self._release()
            if self.files:
                self.directory.close()  # removed only if kvbench made it and it holds nothing else
            raise

    def _require_gpu(self) -> None:
        """GDS and VRAM need the NVIDIA driver (and, for VRAM, a CUDA build of torch): say so before NIXL
        starts, since NIXL's own answer on a host without them is a bare 'unsupported backend'."""
        try:
            ctypes.CDLL("libcuda.so.1")
        except OSError as error:
            raise BackendUnavailable(f"{self.label}: nixl_backend {self.nixl_backend} / memory {self.memory} needs "
                                     f"an NVIDIA GPU and driver; libcuda.so.1 cannot be loaded ({error})") from None
        if self.memory == "VRAM":
            try:
                import torch
            except ImportError:
                raise BackendUnavailable(f"{self.label}: memory: VRAM needs torch (pip install "
                                         "'kvbench-core[gpu]')") from None
            if not torch.cuda.is_available():
                raise BackendUnavailable(f"{self.label}: memory: VRAM but torch {torch.__version__} sees no CUDA "
                                         "device; check nvidia-smi and CUDA_VISIBLE_DEVICES")

    def _start_agent(self, params: dict[str, str], index: int) -> Agent:
        assert self.library is not None
        errors = (*self.library.errors, LookupError)
        try:
            return Agent(self.library, f"kvbench-{self.context.run_id}-{self.context.tier_name}-{index}",
                         self.nixl_backend, params)
        except errors as error:
            hint = " (NIXL's GDS plugins need libcufile and an NVIDIA GPU)" if self.nixl_backend in GPU_BACKENDS else ""
            raise BackendUnavailable(f"{self.label}: NIXL {self.library.version} could not start its "
                                     f"{self.nixl_backend} plugin: {type(error).__name__}: {error}{hint}") from None

    def _check_params(self, agent: Agent) -> None:
        """``params`` a plugin does not declare are refused by name (NIXL itself only says INVALID_PARAM)."""
        declared = agent.plugin_params()
        for key in self.params:
            if declared and key not in declared:
                raise SpecError(f"{self.where}.params.{key}: NIXL's {self.nixl_backend} plugin has no such "
                                f"parameter (it has {', '.join(sorted(declared))})")

    def _probe(self) -> None:
        """One 4 KiB write and read back through NIXL, the way entries go, so a path NIXL cannot use
        (read-only directory, an S3 endpoint the SDK cannot talk to) fails here, clearly."""
        from kvbench_core.engine.payload import NoisePool

        pool = NoisePool(seed=1, pool_bytes=ALIGN, max_piece=ALIGN)
        key = f"probe-{self.context.run_id}"
        try:
            self.write(key, pool.payload(key, ALIGN))
            check = bytearray(ALIGN)
            self.read_range(key, 0, memoryview(check))
            expected = bytearray(ALIGN)
            pool.payload(key, ALIGN).fill(0, memoryview(expected))
            if check != expected:
                raise OSError("read back different bytes")
        except OSError as error:
            raise BackendUnavailable(f"{self.label}: a 4 KiB probe through NIXL {self.nixl_backend} failed "
                                     f"({self._place()}): {error}") from None
        finally:
            with contextlib.suppress(OSError):
                self.delete(key)

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
        """The bytes ``[start, end)`` as pieces cut at ``transfer_size`` boundaries (so no piece crosses
        an object), grouped ``queue_depth`` to a request."""
        batch: list[Piece] = []
        position = start
        while position < end:
            n = min(end, (position // self.transfer_size + 1) * self.transfer_size) - position
            batch.append((position, n))
            position += n
            if len(batch) == self.queue_depth:
                yield batch
                batch = []
        if batch:
            yield batch

    def _move(self, operation: str, key: str, lane: Lane, batch: list[Piece],
              remote: Callable[[int, int], Descriptor], split: Split) -> None:
        """One NIXL request: ``batch`` between the lane's pieces and the remote side, waited for."""
        remote_memory = "FILE" if self.files else "OBJ"
        local = [lane.arena.piece(lane.slot, i, n) for i, (_, n) in enumerate(batch)]
        with split.charge("host"):
            request = lane.agent.prepare(operation, local, self.memory, [remote(offset, n) for offset, n in batch],
                                         remote_memory)
        try:
            started = time.perf_counter()
            lane.agent.run(request)
            ended = time.perf_counter()
            split.device += ended - started
        finally:
            with split.charge("host"):
                lane.agent.release(request)
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
        with self.lanes.lane() as lane, _translate(self.library.errors, f"NIXL {self.nixl_backend} {what} of {key!r}"):
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
                          split: Split) -> Iterator[Callable[[int, int], Descriptor]]:
        if not self.files:
            assert self.objects is not None
            with self._charged(split, self.objects.writing(lane.agent, key, size)) as remote:
                yield remote
            return
        with self.new_entry_file(key) as path, \
                self._file(lane.agent, path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, split) as fd:
            yield lambda offset, n: (offset, n, fd)
            if self.fsync:
                with split.charge("device"):
                    os.fsync(fd)

    @contextlib.contextmanager
    def _remote_for_read(self, lane: Lane, key: str, split: Split) -> Iterator[Callable[[int, int], Descriptor]]:
        if not self.files:
            assert self.objects is not None
            with self._charged(split, self.objects.reading(lane.agent, key)) as remote:
                yield remote
            return
        with self._file(lane.agent, self.path_of(key), os.O_RDONLY, split) as fd:
            with split.charge("host"):
                if self.drop_cache:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)  # read whole, front to back, as nvme says
            yield lambda offset, n: (offset, n, fd)

    @staticmethod
    @contextlib.contextmanager
    def _charged(split: Split, registration: contextlib.AbstractContextManager[Any]) -> Iterator[Any]:
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
    def _file(self, agent: Agent, path: str, flags: int, split: Split) -> Iterator[int]:
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


@contextlib.contextmanager
def _translate(errors: tuple[type[BaseException], ...], what: str) -> Iterator[None]:
    try:
        yield
    except errors as error:
        raise OSError(f"{what} failed: {type(error).__name__}: {error}") from None
