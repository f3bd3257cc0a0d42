"""The codec stage: a ``StorageBackend`` that encodes on write and decodes on read around a tier's own backend.

Layout.  An entry is cut into *segments* of at most ``segment_bytes`` logical
bytes; each segment is one object of the inner backend (segment 0 under the
entry's own key, so an entry of one segment is stored exactly where it would
be without a codec).  A segment object is a header, a chunk table and the
chunks, each encoded independently (or stored raw when the codec cannot
shrink it, as zstd's raw blocks do):

    "KVC1" | u32 codec tag | u64 logical bytes | u32 chunk bytes | u32 chunks
    | u32 length per chunk (bit 31 = stored raw) | the chunks

The header is real bytes on the device and counts as physical bytes.

Memory.  A segment is encoded whole into a per-thread buffer before the inner
backend writes it, because a write must know its size up front; so a worker
holds at most one encoded segment (plus one chunk) whatever the entry size.

Timing.  Filling chunks from the payload and encoding them is host time, the
encode (or decode) alone is also reported as the ``codec`` layer; the inner
backend's host and device times are added as they are.  Decoding happens after
the segment's device read completes (blocking, not overlapped).  Over a shared
inner tier, segments another writer had committed are the entry's
``dedup_bytes`` (``SegmentTally``; docs/codecs.md, "Over a shared tier").

Demotion.  A lower tier that uses the same codec, chunk and segment size copies
the encoded segments as they are (nothing is decoded or re-encoded, as an
engine moving compressed KV between tiers would); any other lower tier pulls
logical bytes through ``read_range``, which decodes only the chunks it covers
and tells the cache's ``TierSource`` what it read and how long it decoded
(``read_range_costs``), so the copy books those bytes and that host time.
"""

from __future__ import annotations

import errno
import json
import threading
import time
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from kvbench_core.contracts.backend import ByteSink, ByteSource, IOTiming, StorageBackend
from kvbench_core.contracts.buffers import ThreadBuffers
from kvbench_core.contracts.codec import Codec

MAGIC = b"KVC1"
FIXED_HEADER = 24
RAW = 1 << 31


@dataclass(frozen=True, slots=True)
class Segment:
    """Where one stored segment's chunks lie: ``starts[i]`` .. ``starts[i + 1]`` in the object."""

    logical: int
    physical: int
    starts: np.ndarray  # int64, chunks + 1 entries
    raw: np.ndarray  # bool per chunk


class ArraySource:
    """``ByteSource`` over an encoded segment already in memory (what the inner backend writes)."""

    __slots__ = ("array", "size")

    def __init__(self, array: np.ndarray) -> None:
        self.array, self.size = array, int(array.shape[0])

    def fill(self, offset: int, out: memoryview) -> None:
        np.copyto(np.frombuffer(out, dtype=np.uint8), self.array[offset:offset + len(out)])


class ArraySink:
    """``ByteSink`` that gathers a segment's bytes (in any piece order) into a reused array."""

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def consume(self, offset: int, data: memoryview) -> None:
        self.array[offset:offset + len(data)] = np.frombuffer(data, dtype=np.uint8)


SEGMENT_MARK = ".kvc"


def segment_key(key: str, index: int) -> str:
    """The inner backend's key of segment ``index`` (segment 0 keeps the entry's own key)."""
    return key if index == 0 else f"{key}{SEGMENT_MARK}{index}"


def entry_key(key: str) -> str:
    """The entry an inner object key belongs to (``segment_key``'s inverse): a segment's device commands
    are commands of the entry's operation, and the recorder books them there."""
    head, mark, index = key.rpartition(SEGMENT_MARK)
    return head if mark and index.isdigit() else key


@dataclass(slots=True)
class SegmentTally:
    """What an entry's segments did on the inner backend, summed into the entry's ``IOTiming`` (a write's,
    a read's, a same-codec demotion's).

    A shared inner tier may store a segment without a transfer (another writer committed it): its logical
    bytes are the entry's ``dedup_bytes``, the rest its ``nbytes``, so an entry whose every segment was
    found is a store without a transfer and no operation (docs/codecs.md, "Over a shared tier")."""

    host: float = 0.0
    codec: float = 0.0
    device: float = 0.0
    commands: int = 0
    physical: int = 0
    moved: int = 0
    deduplicated: int = 0

    def add(self, timing: IOTiming, logical: int, host: float = 0.0, codec: float = 0.0) -> None:
        """One segment of ``logical`` bytes: ``host``/``codec`` the stage's own work on it."""
        found = timing.nbytes + timing.dedup_bytes
        sent = logical if not timing.dedup_bytes else logical * timing.nbytes // max(found, 1)
        self.host += host + timing.host
        self.codec += codec if sent else 0.0  # the codec layer pairs its time with the bytes it books
        self.device += timing.device
        self.commands += timing.commands
        self.physical += timing.nbytes
        self.moved += sent
        self.deduplicated += logical - sent

    def timing(self, start: float) -> IOTiming:
        return IOTiming(total=time.perf_counter() - start, host=self.host, device=self.device, nbytes=self.moved,
                        commands=self.commands, codec=self.codec, physical_bytes=self.physical,
                        dedup_bytes=self.deduplicated)


def demotion_source(source: Any) -> Any:
    """The cache's ``TierSource`` under any wrappers (a cancellable source forwards reads, not writes)."""
    while "inner" in getattr(type(source), "__slots__", ()):
        source = source.inner
    return source


def corrupt(key: str, why: str) -> OSError:
    return OSError(errno.EIO, f"codec frame of {key!r} is corrupt: {why}")


class CodecTier(StorageBackend):
    """``inner`` seen through ``codec``: the cache stores logical bytes, the device receives physical ones."""

    def __init__(self, inner: StorageBackend, codec: Codec, *, chunk_bytes: int, segment_bytes: int) -> None:
        super().__init__(inner.options, inner.context)
        if chunk_bytes <= 0 or segment_bytes < chunk_bytes or segment_bytes % chunk_bytes:
            raise ValueError(f"codec segment ({segment_bytes}) must be a multiple of its chunk ({chunk_bytes})")
        self.inner, self.codec = inner, codec
        self.chunk_bytes, self.segment_bytes = chunk_bytes, segment_bytes
        # What the result names the tier by: the backend it really is, seen through the codec.
        self.name = inner.name  # type: ignore[misc]
        self.volatile = inner.volatile  # type: ignore[misc]
        self.directory_option = inner.directory_option  # type: ignore[misc]  # its directory is the inner's
        self.transfer_size = chunk_bytes
        self.signature = json.dumps([codec.name, codec.options, chunk_bytes, segment_bytes], sort_keys=True)
        self.tag = zlib.crc32(self.signature.encode())
        self._encoded = ThreadBuffers()  # one encoded segment per worker: the write and read staging area
        self._plain = ThreadBuffers()  # one logical chunk per worker
        self._range_encoded = ThreadBuffers()  # read_range's own pair: a demotion writes while it reads
        self._range_plain = ThreadBuffers()
        self._range_last = threading.local()  # the chunk read_range decoded last (pieces rarely span chunks)
        self._lock = threading.Lock()
        self._index: dict[str, list[Segment]] = {}
        if hasattr(inner.context.io_log, "owner_of"):  # the run's CommandRecorder: segments book to their entry
            inner.context.io_log.owner_of = entry_key

    # -- pass-through ------------------------------------------------------------------------------------
    def open(self) -> None:
        self.inner.open()

    def close(self) -> None:
        self.inner.close()

    def notes(self) -> list[str]:
        return self.inner.notes()

    def leftovers(self) -> dict[str, Any] | None:
        return self.inner.leftovers()

    def capacity_bytes(self) -> int | None:
        return self.inner.capacity_bytes()

    def reserve(self, capacity: int) -> None:
        self.inner.reserve(capacity)

    def describe(self) -> dict[str, Any]:
        return {**self.inner.describe(), "codec": {**self.codec.describe(), "chunk_bytes": self.chunk_bytes,
                                                   "segment_bytes": self.segment_bytes,
                                                   "integration": "host CPU, between payload and tier",
                                                   "decode": "blocking"}}

    def counters(self) -> dict[str, Any]:
        return self.inner.counters() or {}

    def layout(self, key: str) -> list[Segment] | None:
        with self._lock:
            return self._index.get(key)

    def stored_bytes(self, key: str) -> int | None:
        """Physical bytes of an entry (what a demotion reads from this tier's device), None if unknown."""
        segments = self.layout(key)
        return sum(segment.physical for segment in segments) if segments else None

    # -- write ---------------------------------------------------------------------------------------------
    def write(self, key: str, source: ByteSource) -> IOTiming:
        start = time.perf_counter()
        upper = getattr(source, "backend", None)
        if isinstance(upper, CodecTier) and upper.signature == self.signature and upper.layout(key):
            return self._copy_encoded(key, source, upper, start)
        tally = SegmentTally()
        segments = []
        for index, at in enumerate(range(0, max(source.size, 1), self.segment_bytes)):
            logical = min(self.segment_bytes, source.size - at)
            encoded, fill_s, encode_s = self._encode_segment(source, at, logical)
            timing = self.inner.write(segment_key(key, index), ArraySource(encoded))
            segments.append(self._layout_of(encoded, key))
            tally.add(timing, logical, host=fill_s + encode_s, codec=encode_s)
        self._publish(key, segments)
        return tally.timing(start)

    def _encode_segment(self, source: ByteSource, at: int, logical: int) -> tuple[np.ndarray, float, float]:
        """Encode logical bytes ``[at, at + logical)`` into this thread's segment buffer."""
        chunk = self.chunk_bytes
        count = -(-logical // chunk)
        header = FIXED_HEADER + 4 * count
        bound = header + count * max(self.codec.max_encoded_size(chunk), chunk)
        out = np.frombuffer(self._encoded.get(bound), dtype=np.uint8)
        plain = np.frombuffer(self._plain.get(chunk), dtype=np.uint8)
        table = out[FIXED_HEADER:header].view("<u4")
        fill_s = encode_s = 0.0
        pos = header
        for i in range(count):
            size = min(chunk, logical - i * chunk)
            piece = plain[:size]
            t0 = time.perf_counter()
            source.fill(at + i * chunk, memoryview(piece))
            t1 = time.perf_counter()
            written = self.codec.encode(piece, out[pos:])
            if written >= size:  # incompressible: stored raw, so decoding it is a copy
                out[pos:pos + size] = piece
                written, table[i] = size, size | RAW
            else:
                table[i] = written
            encode_s += time.perf_counter() - t1
            fill_s += t1 - t0
            pos += written
        out[:4] = np.frombuffer(MAGIC, dtype=np.uint8)
        out[4:8].view("<u4")[0] = self.tag
        out[8:16].view("<u8")[0] = logical
        out[16:24].view("<u4")[:] = (chunk, count)
        return out[:pos], fill_s, encode_s

    def _layout_of(self, encoded: np.ndarray, key: str) -> Segment:
        """Parse (and check) a segment's header and chunk table."""
        if encoded.shape[0] < FIXED_HEADER or bytes(encoded[:4]) != MAGIC:
            raise corrupt(key, "no KVC1 header")
        if int(encoded[4:8].view("<u4")[0]) != self.tag:
            raise corrupt(key, "written with another codec, chunk or segment size")
        logical = int(encoded[8:16].view("<u8")[0])
        chunk, count = (int(n) for n in encoded[16:24].view("<u4"))
        if chunk != self.chunk_bytes or FIXED_HEADER + 4 * count > encoded.shape[0]:
            raise corrupt(key, "chunk table does not fit")
        table = encoded[FIXED_HEADER:FIXED_HEADER + 4 * count].view("<u4")
        lengths = (table & ~np.uint32(RAW)).astype(np.int64)
        starts = np.empty(count + 1, dtype=np.int64)
        starts[0] = FIXED_HEADER + 4 * count
        np.cumsum(lengths, out=starts[1:])
        starts[1:] += starts[0]
        if starts[-1] != encoded.shape[0]:
            raise corrupt(key, f"chunks end at {starts[-1]}, the object has {encoded.shape[0]} bytes")
        return Segment(logical=logical, physical=int(encoded.shape[0]), starts=starts, raw=(table & RAW) != 0)

    def _publish(self, key: str, segments: list[Segment]) -> None:
        """Record the new layout; segments the previous version had beyond the new count are deleted."""
        with self._lock:
            old = self._index.get(key)
            self._index[key] = segments
        for index in range(len(segments), len(old or ())):
            self.inner.delete(segment_key(key, index))

    def _copy_encoded(self, key: str, source: Any, upper: CodecTier, start: float) -> IOTiming:
        """Demotion between tiers with the same codec: move the encoded segments without decoding."""
        segments = upper.layout(key) or []
        tally = SegmentTally()
        pulled = demotion_source(source)
        for index, segment in enumerate(segments):
            encoded = np.frombuffer(self._encoded.get(segment.physical), dtype=np.uint8)
            t0 = time.perf_counter()
            upper.inner.read_range(segment_key(key, index), 0, memoryview(encoded))
            pulled.read_seconds += time.perf_counter() - t0  # booked as the upper tier's read
            pulled.bytes_read += segment.logical
            pulled.encoded_read += segment.physical
            tally.add(self.inner.write(segment_key(key, index), ArraySource(encoded)), segment.logical)
        self._publish(key, segments)
        return tally.timing(start)

    # -- read ----------------------------------------------------------------------------------------------
    def _segments(self, key: str) -> list[Segment]:
        segments = self.layout(key)
        if segments is None:
            raise FileNotFoundError(errno.ENOENT, f"no entry {key!r} in this codec tier")
        return segments

    def read(self, key: str, size: int, sink: ByteSink) -> IOTiming:
        start = time.perf_counter()
        tally = SegmentTally()
        for index, segment in enumerate(self._segments(key)):
            encoded = np.frombuffer(self._encoded.get(segment.physical), dtype=np.uint8)
            timing = self.inner.read(segment_key(key, index), segment.physical, ArraySink(encoded))
            stored = self._layout_of(encoded, key)  # the bytes read back must describe themselves
            if stored.logical != segment.logical:
                raise corrupt(key, f"segment {index} holds {stored.logical} bytes, {segment.logical} were written")
            plain = np.frombuffer(self._plain.get(self.chunk_bytes), dtype=np.uint8)
            decode_s = 0.0
            for chunk in range(stored.starts.shape[0] - 1):
                t0 = time.perf_counter()
                piece = self._decode_chunk(stored, chunk, encoded[stored.starts[chunk]:stored.starts[chunk + 1]],
                                           plain, key)
                decode_s += time.perf_counter() - t0
                sink.consume(index * self.segment_bytes + chunk * self.chunk_bytes, memoryview(piece))
            tally.add(timing, segment.logical, host=decode_s, codec=decode_s)
        return tally.timing(start)

    def _decode_chunk(self, segment: Segment, chunk: int, encoded: np.ndarray, plain: np.ndarray,
                      key: str) -> np.ndarray:
        size = min(self.chunk_bytes, segment.logical - chunk * self.chunk_bytes)
        out = plain[:size]
        if segment.raw[chunk]:
            if encoded.shape[0] != size:
                raise corrupt(key, f"raw chunk {chunk} holds {encoded.shape[0]} bytes, expected {size}")
            out[:] = encoded
            return out
        try:
            decoded = self.codec.decode(encoded, out)
        except Exception as error:  # a codec library's own error type: the cache reports it as a StorageError
            raise corrupt(key, f"chunk {chunk}: {error}") from error
        if decoded != size:
            raise corrupt(key, f"chunk {chunk} decoded to {decoded} bytes, expected {size}")
        return out

    def read_range(self, key: str, offset: int, out: memoryview) -> None:
        self.read_range_costs(key, offset, out)

    def read_range_costs(self, key: str, offset: int, out: memoryview) -> tuple[int, float]:
        """``read_range``, returning the encoded bytes it read from the inner backend (chunks only: the
        layout is known, no header is read) and the seconds it spent decoding them (host time), which a
        copy out of this tier books as such (``TierSource``), not as device time."""
        target = np.frombuffer(out, dtype=np.uint8)
        segments = self._segments(key)
        done = encoded = 0
        decode_s = 0.0
        while done < target.shape[0]:
            at = offset + done
            index, within = divmod(at, self.segment_bytes)
            chunk, skip = divmod(within, self.chunk_bytes)
            plain, read, decoding = self._range_chunk(key, index, segments[index], chunk)
            encoded += read
            decode_s += decoding
            n = min(plain.shape[0] - skip, target.shape[0] - done)
            target[done:done + n] = plain[skip:skip + n]
            done += n
        return encoded, decode_s

    def _range_chunk(self, key: str, index: int, segment: Segment, chunk: int) -> tuple[np.ndarray, int, float]:
        """One decoded chunk for ``read_range``, with the encoded bytes read and the seconds decoded for it
        (0 and 0.0 for the chunk decoded last, kept as pieces rarely span two chunks)."""
        last = getattr(self._range_last, "chunk", None)
        if last is not None and last[0] is segment and last[1] == chunk:
            return last[2], 0, 0.0
        begin, end = int(segment.starts[chunk]), int(segment.starts[chunk + 1])
        encoded = np.frombuffer(self._range_encoded.get(end - begin), dtype=np.uint8)
        self.inner.read_range(segment_key(key, index), begin, memoryview(encoded))
        plain = np.frombuffer(self._range_plain.get(self.chunk_bytes), dtype=np.uint8)
        t0 = time.perf_counter()
        decoded = self._decode_chunk(segment, chunk, encoded, plain, key)
        decode_s = time.perf_counter() - t0
        self._range_last.chunk = (segment, chunk, decoded)
        return decoded, end - begin, decode_s

    # -- delete --------------------------------------------------------------------------------------------
    def delete(self, key: str) -> None:
        with self._lock:
            segments = self._index.pop(key, None)
        for index in range(len(segments) if segments else 1):
            self.inner.delete(segment_key(key, index))
