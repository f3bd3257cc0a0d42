"""tests/lmcache_strace.py, on strace lines as strace 6 prints them (-f -y -s 0): what becomes an I/O log
line, with which offset and owner, and what is refused.  Fast: no strace, no LMCache."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from lmcache_strace import Objects, commands, write_io_log

DISK = "/store/m@1@0@2b76@bfloat16.pt"
DEVICE = "/store/raw.img"
LOCAL_DISK = f"""\
101 openat(AT_FDCWD</w>, "{DISK}", O_WRONLY|O_CREAT|O_TRUNC|O_CLOEXEC, 0666 <unfinished ...>
102 read(3</usr/lib/python3.11/os.py>, ""..., 4096) = 4096
101 <... openat resumed>) = 5<{DISK}>
101 lseek(5<{DISK}>, 0, SEEK_CUR) = 0
101 write(5<{DISK}>, ""..., 3145728 <unfinished ...>
102 write(1</dev/pts/0>, ""..., 12) = 12
101 <... write resumed>) = 2097152
101 write(5<{DISK}>, ""..., 1048576) = 1048576
103 openat(AT_FDCWD</w>, "{DISK}", O_RDONLY|O_CLOEXEC) = 5<{DISK}>
103 read(5<{DISK}>, ""..., 3145728) = 3145728
103 read(5<{DISK}>, ""..., 8192) = 0
"""


def test_calls_on_the_store_become_commands_with_their_file_offsets() -> None:
    found = list(commands(LOCAL_DISK.splitlines(), Objects(files={DISK: (7, "c0")})))
    # a short write and its rest, at the offsets the fd had reached; the other files and an EOF read are not
    # the store's traffic
    assert [(c.op, c.offset, c.nbytes) for c in found] == [("write", 0, 2097152), ("write", 2097152, 1048576),
                                                           ("read", 0, 3145728)]


def test_a_slot_owns_what_lies_inside_it_and_the_rest_of_the_device_is_untagged(tmp_path: Path) -> None:
    trace = tmp_path / "strace.txt"
    trace.write_text(f"""\
9 pread64(4<{DEVICE}>, ""..., 4096, 0) = 4096
9 pwrite64(4<{DEVICE}>, ""..., 4096, 134217728) = 4096
9 pwrite64(4<{DEVICE}>, ""..., 8388608, 134221824) = 8388608
9 pread64(4<{DEVICE}>, ""..., 8388608, 134221824) = 8388608
9 pwrite64(4<{DEVICE}>, ""..., 4096, 4096) = 4096
""")
    objects = Objects(device=DEVICE, slots=[(134217728, 134217728 + 8392704, 7, "c0")])
    log = tmp_path / "io.jsonl"
    assert write_io_log(trace, objects, log) == 5
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(line["trace_id"], line["op"], line["offset"], line["bytes"]) for line in lines] == [
        (0, "read", 0, 4096), (7, "write", 134217728, 4096), (7, "write", 134221824, 8388608),
        (7, "read", 134221824, 8388608), (0, "write", 4096, 4096)]


@pytest.mark.parametrize(("line", "why"), [
    (f'9 pwritev(4<{DEVICE}>, [{{iov_base=""..., iov_len=4096}}], 1, 0) = 4096', "cannot size"),
    (f'9 pwrite64(4<{DEVICE}>, ""..., 4096, 0) = -1 ENOSPC (No space left on device)', "failed call"),
])
def test_a_store_call_it_cannot_size_or_that_failed_is_an_error(line: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        list(commands([line], Objects(device=DEVICE)))
