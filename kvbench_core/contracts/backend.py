"""The storage-backend contract every tier implements (built-in or vendor plugin).

A backend moves KV entries between kvbench's reusable buffers and one storage
tier.  Payloads are *streamed*: ``write`` pulls bytes from a ``ByteSource`` in
pieces no larger than the backend's transfer size, ``read`` pushes what it read
into a ``ByteSink`` piece by piece.  So no entry is ever materialised whole in
Python memory, and memory stays bounded by what is in flight.

Every operation returns an ``IOTiming`` with the seed's L4 split:
``device`` is time spent waiting on the storage (inside the read/write/fsync
syscalls, the network round trip, the cuFile call); ``host`` is the part of the
rest the backend can name (filling/copying buffers, serialising headers,
hashing), with ``host + device <= total``.  The result's L4 host is
``total - device`` for every tier (docs/metrics.md): everything that is not
waiting on the device, named or not, so host + device is the total.
"""

from __future__ import annotations

import abc
import os
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from kvbench_core.contracts.configurable import Configurable
from kvbench_core.contracts.units import parse_size


@dataclass(slots=True)
class IOTiming:
    """Timing of one tier operation in seconds, plus what it moved."""

    total: float
    host: float
    device: float
    nbytes: int
    commands: int = 1  # device commands issued (pread/pwrite calls, HTTP parts, cuFile tasks)
    codec: float = 0.0  # of ``host``: encoding or decoding in a codec stage (kvbench_core.codecs), its own layer
    physical_bytes: int | None = None  # bytes that reached the device when a codec changed them; None = nbytes
    #: Bytes of a write a shared tier stored without a transfer: another holder had committed them, so this
    #: one holds them and sent nothing.  ``nbytes + dedup_bytes`` is the entry.  All of it (``nbytes`` 0,
    #: ``commands`` 0): a store without a transfer, no operation of the tier.  Part of it (a codec stage
    #: whose later segments another writer had committed): an operation that moved ``nbytes``.
    dedup_bytes: int = 0

    @classmethod
    def deduplicated(cls, total: float, device: float, size: int) -> IOTiming:
        """A write stored without a transfer: ``size`` bytes held, none moved, no data command issued
        (``device`` is the control round trip that found the entry)."""
        return cls(total, 0.0, device, 0, commands=0, dedup_bytes=size)

    @property
    def transferred(self) -> bool:
        """Whether this is an operation of the tier (it moved bytes, or claims no store without a transfer)."""
        return self.nbytes > 0 or not self.dedup_bytes

    def contract_error(self, op: str) -> str | None:
        """Why these figures of an ``op`` (``write``/``read``) cannot all be true, or None: the rules the engine
        books an operation by (docs/metrics.md, "Stores without a transfer"), so a backend breaking one is
        refused, not misbooked."""
        if self.dedup_bytes and op != "write":
            return f"a {op} reports dedup_bytes {self.dedup_bytes}: only a write is stored without a transfer"
        if self.nbytes < 0 or self.dedup_bytes < 0 or self.commands < 0:
            return (f"negative bytes or commands (nbytes {self.nbytes}, dedup_bytes {self.dedup_bytes}, "
                    f"commands {self.commands})")
        if not self.transferred and self.commands:
            return (f"a store without a transfer (dedup_bytes {self.dedup_bytes}, nbytes 0) reports "
                    f"{self.commands} data commands")
        return None


class ByteSource(Protocol):
    """Where a write's bytes come from: the payload generator, or an upper tier during demotion."""

    size: int

    def fill(self, offset: int, out: memoryview) -> None:
        """Write the entry's bytes ``[offset, offset + len(out))`` into ``out``."""


class ByteSink(Protocol):
    """Where a read's bytes go: discarded, verified against the payload, or collected."""

    def consume(self, offset: int, data: memoryview) -> None:
        """Receive the entry's bytes ``[offset, offset + len(data))``; ``data`` is reused after return."""


class PendingWrite(Protocol):
    """A write that ``write_pipelined`` started: the entry is durable once ``result`` has returned."""

    def result(self) -> IOTiming:
        """Wait until the entry is durable (as ``write`` returns) and give its timing, from its first command
        to that durable end; raises what ``write`` would have raised for this entry."""


class DoneWrite:
    """A ``PendingWrite`` whose write had already completed when it was made (the default pipelining)."""

    __slots__ = ("timing",)

    def __init__(self, timing: IOTiming) -> None:
        self.timing = timing

    def result(self) -> IOTiming:
        return self.timing


class DiscardSink:
    """The default sink: the benchmark reads for the device's sake, not for the bytes."""

    def consume(self, offset: int, data: memoryview) -> None:
        return None


DISCARD = DiscardSink()


@dataclass(slots=True)
class BackendContext:
    """What the run tells a backend when it is created.

    ``run_id`` is unique per run and should prefix every key/file/object the
    backend creates, so cleanup removes only kvbench's own data.  ``concurrency``
    is the number of operations that may be in flight at once (size pools by it).
    """

    tier_name: str
    run_id: str
    seed: int = 0
    concurrency: int = 1
    keep: bool = False
    io_log: Any = None  # optional per-command logger (kvbench_core.engine.measure.iolog.IOLog) for kvio validation
    extra: dict[str, Any] = field(default_factory=dict)
    #: Where the user wrote this tier's options (``cache.tiers[1].options``; ``--options`` on a command
    #: line), so that an option error the constructor raises names the place to fix, as the schema's do.
    options_path: str = ""
    #: How the user named this tier, when not by a spec's tier name: ``--conformance redis`` on the
    #: command line (the harness's tier name, ``conformance``, is nothing the user wrote).
    named_as: str = ""

    @property
    def options_where(self) -> str:
        """The prefix of a backend's option errors: ``options_path``, or the tier's name outside a spec
        (a bench script, a test that builds a backend by hand)."""
        return self.options_path or f"tier '{self.tier_name}' options"

    def label(self, backend: str) -> str:
        """The prefix of a backend's other errors (cannot open, unusable here): ``tier 'nvme0' (nvme)``, or
        ``named_as``."""
        return self.named_as or f"tier '{self.tier_name}' ({backend})"


class StorageBackend(Configurable, abc.ABC):
    """One storage tier.  Subclass it, set ``name`` and ``options_schema``, register via the
    ``kvbench_storage_backends`` hook.

    Thread safety: the cache calls ``write``/``read``/``read_range``/``delete``
    from many threads at once, but never concurrently for the same key.
    Errors: raise ``kvbench_core.contracts.errors.BackendUnavailable`` from ``open`` when
    the tier cannot be used (server down, no GPU); raise ``OSError`` (or any
    exception) from I/O methods: the cache wraps it in a ``StorageError`` that
    names the tier, operation and key.
    """

    #: Largest piece a single write/read command moves; sources fill at most this much at once.  Read from
    #: the ``transfer_size`` option, once, here, when the tier's schema has one (its range is check_options').
    transfer_size: int = 1 << 20
    #: A volatile tier loses its contents with the process (DRAM, GPU); persistent ones are files/objects.
    volatile: ClassVar[bool] = False
    #: The option naming a directory this tier owns, if any: each local client of a multi-client run then
    #: gets its own subdirectory there (``path/client<i>``), so clients never share one tier directory.
    directory_option: ClassVar[str | None] = None
    #: The tier holds each entry as a device tensor and hands it out with ``tensor(key)`` (the gpu tier).
    holds_device_tensors: ClassVar[bool] = False
    #: The tier stores a device tensor without a host bounce with ``write_tensor`` (GPUDirect Storage).
    #: When the upper tier holds tensors and the lower writes them, a demotion goes GPU -> storage directly.
    writes_device_tensors: ClassVar[bool] = False

    def __init__(self, options: dict[str, Any], context: BackendContext) -> None:
        # ``check_options`` (Configurable) runs once per spec; the constructor may use the same helpers
        # with ``context.options_where`` and so raise the same errors when built outside a spec.
        super().__init__(options)
        self.context = context
        if "transfer_size" in self.options:  # read once here, for every tier whose schema has the option
            self.transfer_size = parse_size(self.options["transfer_size"])

    def open(self) -> None:
        """Connect, create directories, check the endpoint; fail early with ``BackendUnavailable``."""

    @abc.abstractmethod
    def write(self, key: str, source: ByteSource) -> IOTiming:
        """Store ``source.size`` bytes under ``key`` (overwriting), durably as the options say."""

    def write_pipelined(self, key: str, source: ByteSource) -> PendingWrite:
        """Start ``write(key, source)`` and return once the caller may start its next write on this thread;
        the entry is durable only when the returned ``PendingWrite.result()`` has returned.  A stream that
        keeps one write pending while it starts the next keeps the device's queue full across entries
        (issue 32 §1): a file tier returns once the entry's commands are issued and finishes its last
        commands, fsync and close meanwhile.  ``source`` may be read until ``result`` has returned; an
        error is raised here or from ``result``, for this entry alone; a read, delete or rewrite of ``key``
        waits for it.  The default writes the entry whole, so pipelining changes nothing for a tier that
        does not override it.  The cache calls it for each new entry a request stores, one pending at a time
        (``kvbench_core.engine.cache.write_stream``); demotions and promotions call ``write``."""
        return DoneWrite(self.write(key, source))

    @abc.abstractmethod
    def read(self, key: str, size: int, sink: ByteSink) -> IOTiming:
        """Read the whole entry (``size`` bytes) from the device, handing pieces to ``sink``."""

    @abc.abstractmethod
    def read_range(self, key: str, offset: int, out: memoryview) -> None:
        """Copy ``len(out)`` bytes at ``offset`` into ``out``: the source side of a demotion."""

    @abc.abstractmethod
    def delete(self, key: str) -> None:
        """Remove the entry; deleting a missing key is not an error."""

    def lookup(self, key: str) -> int | None:
        """Size of an entry *another process* stored under ``key`` in a shared tier (a Redis namespace
        several clients name), so a local miss can still hit; None when absent or the tier is private."""
        return None

    def capacity_bytes(self) -> int | None:
        """Capacity for ``capacity: auto`` (free disk, server maxmemory); None if unknown."""
        return None

    def reserve(self, capacity: int) -> None:
        """Called once after ``open`` with the tier's capacity in bytes (the spec's, or ``capacity_bytes``
        for ``auto``; not called for an unbounded tier): a tier that allocates its space up front does it
        here, at set-up, as an engine allocates its KV pool once (the cpu tier pre-faults its arena)."""

    def read_range_costs(self, key: str, offset: int, out: memoryview) -> tuple[int, float]:
        """``read_range``, and what it cost beyond the bytes it copied: ``(encoded bytes read from the
        device, seconds spent decoding)``, both 0 for a tier that stores bytes as they are.  A stage that
        transforms bytes (the codec stage) overrides it, so a demotion out of it books what it really read
        and its decode time as host time."""
        self.read_range(key, offset, out)
        return 0, 0.0

    def describe(self) -> dict[str, Any]:
        """What the declaration should say about this tier: access mechanism, driver, queue depth…"""
        return {"backend": self.name}

    def stored_bytes(self, key: str) -> int | None:
        """Bytes the device holds for ``key`` when a stage changes them (a codec); None: the entry's size."""
        return None

    def tensor(self, key: str) -> Any:
        """The entry's device tensor; only for a tier with ``holds_device_tensors``."""
        raise NotImplementedError(f"{self.name} does not hold device tensors")

    def write_tensor(self, key: str, tensor: Any) -> IOTiming:
        """Store a device tensor under ``key``; only for a tier with ``writes_device_tensors``."""
        raise NotImplementedError(f"{self.name} does not write device tensors")

    def counters(self) -> dict[str, Any] | None:
        """Tier-specific counters for the result's ``metrics.tiers.<tier>.counters`` (retries, multipart
        parts…), read at the end of the run; None when the tier keeps none."""
        return None

    def cleanup_begins(self) -> None:
        """The run is over and its cleanup deletes every entry next: a backend may leave those deletes to
        ``close`` and finish them after the result is written, as the file tiers do (issue 32 §4,
        ``filetiers/deleter.py``).  The default changes nothing."""

    def close(self) -> None:
        """Release resources and remove every entry this run created unless ``context.keep``."""

    def notes(self) -> list[str]:
        """Lines for the result's ``warnings`` and the summary, read after ``close``: what the tier did to
        the machine that is neither a figure nor an error (a directory it created, a dead run's files it
        removed), each naming the tier (``context.label``).  The default says nothing."""
        return []

    def leftovers(self) -> dict[str, Any] | None:
        """What this run's cleanup could not remove (a server that stopped answering), named so a person
        or a later run can remove it (``{"objects": [...], "uploads": [...]}``, ``{"keys": [...]}``), read
        after ``close`` into the result's ``sections.leftovers.<tier>``; None when nothing is left.  A tier
        that leaves something records it too (``kvbench_core.contracts.leftovers``)."""
        return None


class ClientBackend(StorageBackend):
    """A tier reached through a client object (a Redis connection pool, a boto3 client).

    ``close`` is the same for all of them: nothing to do if ``open`` never
    connected; otherwise remove this run's entries (unless ``context.keep``)
    and release the client even when that cleanup fails (server gone).
    """

    _client: Any = None

    def close(self) -> None:
        if self._client is None:
            return
        try:
            if not self.context.keep:
                self._cleanup()
        finally:
            self._disconnect()

    @abc.abstractmethod
    def _cleanup(self) -> None:
        """Delete every entry this run stored (and only those)."""

    @abc.abstractmethod
    def _disconnect(self) -> None:
        """Release the client and whatever else ``open`` set up; safe to call twice."""


def check_key(key: str) -> str:
    """Reject keys that could escape a directory or a key prefix (path separators, dot-dot, NUL)."""
    if not key or "/" in key or "\\" in key or "\x00" in key or key in (".", "..") or key.startswith("."):
        raise ValueError(f"invalid cache key {key!r}")
    if os.sep != "/" and os.sep in key:
        raise ValueError(f"invalid cache key {key!r}")
    return key
