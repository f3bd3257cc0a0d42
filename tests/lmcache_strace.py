"""An engine's file I/O as strace saw it, turned into a kvbench I/O log that ``kvbench score`` reads.

strace records every read/write/pread64/pwrite64 a process and its threads make, with the path behind
each file descriptor (``-y``), the length asked for and what the kernel returned; ``-s 0`` leaves the
data out.  Calls on the engine's store (a directory's files, or the file raw_block uses as its device)
become one I/O log line each, ``bytes`` what the call returned (docs/kvio.md, "The I/O log, exactly");
calls on any other file are not the store's traffic and are left out.  A call strace shows on the store
that this module cannot size (vectored I/O) is an error, not a silent gap.

Which KV object a call belongs to is the engine's own word (tests/lmcache_driver.py): a file per object
(local_disk), or a slot ``[offset, offset + slot_bytes)`` per object on the device (raw_block).  A call
on the store outside every object (raw_block's index checkpoint) gets trace id 0: ``kvbench score``
counts it as untagged and does not score it.
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

#: the calls an engine moves file bytes with; the vectored ones are traced so they cannot pass unseen
TRACED = ("openat", "lseek", "read", "write", "pread64", "pwrite64", "readv", "writev",
          "preadv", "pwritev", "preadv2", "pwritev2")
_SIZED = {"read": "read", "write": "write", "pread64": "read", "pwrite64": "write"}
_LINE = re.compile(r"^(?P<pid>\d+)\s+(?P<call>\w+)\((?P<args>.*)\)\s+=\s+(?P<ret>-?\d+)")
_UNFINISHED = re.compile(r"^(?P<pid>\d+)\s+(?P<head>.*) <unfinished \.\.\.>$")
_RESUMED = re.compile(r"^(?P<pid>\d+)\s+<\.\.\. \w+ resumed>(?P<tail>.*)$")
_FD = re.compile(r"^(?P<fd>\d+)<(?P<path>[^>]*)>")
_SIZED_ARGS = re.compile(r'^\d+<[^>]*>, "[^"]*"(?:\.\.\.)?, (?P<count>\d+)(?:, (?P<offset>\d+))?$')
_OPEN_RESULT = re.compile(r"=\s+(?P<fd>\d+)<(?P<path>[^>]*)>")


def strace_command(output: Path) -> list[str]:
    """strace's options for a capture: follow threads, name fds, no data, only the traced calls (stopping
    the process on those alone: --seccomp-bpf, a third of the time of tracing every call)."""
    return ["strace", "-f", "-qq", "-y", "-s", "0", "--seccomp-bpf", "-e", "signal=none",
            "-e", f"trace={','.join(TRACED)}", "-o", str(output)]


@dataclass(frozen=True)
class Command:
    """One completed call on a store's file."""

    op: str  # write | read
    path: str
    offset: int
    nbytes: int


@dataclass
class Objects:
    """Which object (trace id, key) a store's call belongs to: by file, or by slot on a device file."""

    files: dict[str, tuple[int, str]] = field(default_factory=dict)
    device: str | None = None
    slots: list[tuple[int, int, int, str]] = field(default_factory=list)  # (start, end, trace_id, key), sorted

    def on_store(self, path: str) -> bool:
        return path in self.files or path == self.device

    def owner(self, command: Command) -> tuple[int, str]:
        if command.path in self.files:
            return self.files[command.path]
        index = bisect.bisect_right([start for start, *_ in self.slots], command.offset) - 1
        if index >= 0:
            _start, end, trace_id, key = self.slots[index]
            if command.offset + command.nbytes <= end:
                return trace_id, key
        return 0, ""  # the device outside every object: untagged


def joined_lines(lines: Iterable[str]) -> Iterator[str]:
    """strace's lines with each call split across threads (``<unfinished ...>`` / ``<... resumed>``) joined."""
    pending: dict[str, str] = {}
    for raw in lines:
        line = raw.rstrip("\n")
        if (unfinished := _UNFINISHED.match(line)) is not None:
            pending[unfinished["pid"]] = unfinished["head"]
        elif (resumed := _RESUMED.match(line)) is not None:
            yield f"{resumed['pid']} {pending.pop(resumed['pid'], '')}{resumed['tail']}"
        else:
            yield line


def commands(lines: Iterable[str], objects: Objects) -> Iterator[Command]:
    """The completed calls on the store, with the file offset each began at (tracked per fd for the
    calls that take none)."""
    position: dict[int, int] = {}
    for line in joined_lines(lines):
        call = _LINE.match(line)
        if call is None:
            continue
        name, args, ret = call["call"], call["args"], int(call["ret"])
        if name == "openat":
            opened = _OPEN_RESULT.search(line)
            if opened is not None:
                position[int(opened["fd"])] = 0
            continue
        fd = _FD.match(args)
        if fd is None or not objects.on_store(fd["path"]):
            continue
        number = int(fd["fd"])
        if name == "lseek":
            position[number] = ret
            continue
        sized = _SIZED_ARGS.match(args)
        if name not in _SIZED or sized is None:
            raise ValueError(f"strace: a call on the store this capture cannot size: {line}")
        if ret < 0:
            raise ValueError(f"strace: a failed call on the store: {line}")
        offset = int(sized["offset"]) if sized["offset"] is not None else position.get(number, 0)
        if sized["offset"] is None:
            position[number] = offset + ret
        if ret:
            yield Command(_SIZED[name], fd["path"], offset, ret)


def write_io_log(strace_output: Path, objects: Objects, io_log: Path) -> int:
    """The store's calls in strace's output as a kvbench I/O log; returns how many lines it wrote."""
    count = 0
    with open(strace_output, encoding="utf-8", errors="replace") as source, \
            open(io_log, "w", encoding="utf-8") as sink:
        for command in commands(source, objects):
            trace_id, key = objects.owner(command)
            sink.write(json.dumps({"trace_id": trace_id, "key": key, "op": command.op, "offset": command.offset,
                                   "bytes": command.nbytes}) + "\n")
            count += 1
    return count
