"""Execute one request's storage steps against the cache (seed §3.1, §3.3).

Reads before prefill (prefix, previous turn, RAG chunks; a miss performs the
read's ``on_miss`` write), then the prefill write, then the decode reads
batched by ``decode_batch``.  Returns the storage time (L2) and what happened,
so the runner can fold it into the end-to-end latency (L1).

The request's steps run through one ``WriteStream``: its entries' writes are
pipelined where the tier can (the next entry starts while the previous one's
fsync runs, issue 32 §1), and every write has ended, durable, before the
request's storage time stops.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import numpy as np

from kvbench_core.contracts.backend import DISCARD, ByteSink
from kvbench_core.contracts.payload import NoisePool, VerifySink
from kvbench_core.contracts.workload import Phase, Request, Write, decode_read_count, derive_phase
from kvbench_core.engine.cache.waterfall import MultiTierCache
from kvbench_core.engine.cache.write_stream import WriteStream
from kvbench_core.engine.measure.iolog import CURRENT_REQUEST
from kvbench_core.engine.measure.telemetry import RequestTally, Telemetry


@dataclass(slots=True)
class StepOutcome:
    storage_s: float
    decode_tokens_read: int
    #: A KV write of this request (its prefill, a prefix or chunk it had to store) found no tier with room.
    write_failed: bool = False
    #: Its reads, hits and tier operations, booked when the request ends (``Telemetry.book``).
    tally: RequestTally | None = None


class RequestExecutor:
    """Turns ``Request`` objects into cache operations; thread-safe, one instance per run."""

    def __init__(self, cache: MultiTierCache, telemetry: Telemetry, bytes_per_token: int, decode_batch: int,
                 *, pool: NoisePool | None = None, verify: bool = False) -> None:
        self.cache = cache
        self.telemetry = telemetry
        self.bytes_per_token = bytes_per_token
        self.decode_batch = decode_batch
        self.pool = pool
        self.verify = verify
        self._scratch = threading.local()

    def _sink(self, key: str) -> ByteSink:
        if not self.verify or self.pool is None:
            return DISCARD
        scratch = getattr(self._scratch, "buffer", None)
        if scratch is None:
            scratch = np.empty(self.pool.max_piece, dtype=np.uint8)
            self._scratch.buffer = scratch
        return _TimedVerifySink(VerifySink(self.pool, key, scratch), self.telemetry)

    def _read(self, key: str, stream: WriteStream) -> str | None:
        sink = self._sink(key)
        tier = stream.get(key, sink)
        if isinstance(sink, _TimedVerifySink):
            sink.finish(tier, key)
        return tier

    def _store(self, write: Write, stream: WriteStream) -> bool:
        """Start storing one KV entry; False (and an error listed) when no tier had room for it.  A failure of
        its write is raised when the stream collects it."""
        size = max(1, write.tokens) * self.bytes_per_token
        if stream.put(write.key, size):
            return True
        self.telemetry.record_error("kv_write", write.key, f"no tier had room for the {write.kind} entry "
                                                           f"({size} bytes): the KV was not stored")
        return False

    def execute(self, request: Request, *, book: bool = True, issued_at: float | None = None) -> StepOutcome:
        """Run the request's storage steps.  ``book`` books its tally at once, in the window it ran in (a
        caller that knows better when the request ends, the runner, books ``outcome.tally`` itself).
        ``issued_at`` is when the request started for the windows' sake (the runner: when it was issued)."""
        start = time.perf_counter()
        issued_at = start if issued_at is None else issued_at
        tally = self.telemetry.begin_request()
        CURRENT_REQUEST.id = f"u{request.user_id}.{request.seq}"  # the I/O log's request of each command
        try:
            outcome = self._steps(request)
        except BaseException:  # a failed or cancelled request's reads and writes still happened: book them
            self.telemetry.end_request()
            self.telemetry.book(tally, self.telemetry.bucket(issued_at, time.perf_counter()))
            raise
        finally:
            CURRENT_REQUEST.id = None
        self.telemetry.end_request()
        outcome.storage_s = time.perf_counter() - start
        outcome.tally = tally
        if book:
            self.telemetry.book(tally, self.telemetry.bucket(issued_at, start + outcome.storage_s))
        return outcome

    def _steps(self, request: Request) -> StepOutcome:
        """The request's reads and writes through one stream; its last write collected before it ends."""
        stream = WriteStream(self.cache)
        try:
            stored = self._prefill_steps(request, stream)
            decode_tokens = 0
            if derive_phase(request) in (Phase.PREFILL_DECODE, Phase.DECODE):
                decode_tokens = self._decode_reads(request, stream)
            stream.collect()
        except BaseException:
            stream.abandon()  # its write ends (booked, freed or stored) before the request's error is raised
            raise
        return StepOutcome(0.0, decode_tokens, write_failed=not stored)

    def _prefill_steps(self, request: Request, stream: WriteStream) -> bool:
        """The reads before prefill (a miss storing the read's ``on_miss``) and the prefill write; False when
        one of their entries found no tier with room."""
        stored = True
        for read in request.reads:
            self.telemetry.count(f"{read.kind}_reads")
            if self._read(read.key, stream) is not None:
                self.telemetry.count(f"{read.kind}_hits")
            else:
                self.telemetry.count(f"{read.kind}_misses")
                if read.on_miss is not None:
                    stored = self._store(read.on_miss, stream) and stored
                    self.telemetry.count(f"{read.on_miss.kind}_writes")
        if request.write is not None:
            stored = self._store(request.write, stream) and stored
            self.telemetry.count("prefill_writes")
        return stored

    def _decode_reads(self, request: Request, stream: WriteStream) -> int:
        """The decode steps' reads of the request's entries; the tokens read (a step cut short by a miss
        counts what it read, and ends the decode)."""
        bpt, decode_tokens = self.bytes_per_token, 0
        keys = request.decode_keys or ((request.write.key,) if request.write else ())
        for _ in range(decode_read_count(request.generate_tokens, self.decode_batch) if keys else 0):
            self.telemetry.count("decode_reads")
            for key in keys:
                size = self.cache.entry_size(key)
                if size is None or self._read(key, stream) is None:
                    if size is None:  # not even looked up: still a read of the cache that missed
                        self.telemetry.record_read_outcome(None)
                    self.telemetry.count("decode_misses")
                    return decode_tokens
                decode_tokens += size // bpt  # what was read counts, even in a step cut short
        return decode_tokens


class _TimedVerifySink:
    """Wraps a VerifySink to time verification separately from the device timings."""

    __slots__ = ("inner", "nbytes", "seconds", "telemetry")

    def __init__(self, inner: VerifySink, telemetry: Telemetry) -> None:
        self.inner, self.telemetry = inner, telemetry
        self.seconds = 0.0
        self.nbytes = 0

    def consume(self, offset: int, data: memoryview) -> None:
        start = time.perf_counter()
        self.inner.consume(offset, data)
        self.seconds += time.perf_counter() - start
        self.nbytes += len(data)

    def finish(self, tier: str | None, key: str) -> None:
        if tier is None:
            return
        self.telemetry.record_verify(self.seconds, self.nbytes)
        if self.inner.mismatches:
            self.telemetry.record_integrity_error(tier, key, self.inner.first_bad_offset)
