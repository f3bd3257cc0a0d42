"""The nvme tier's io_uring engine: the conformance suite, byte-exact round trips, queue depth as fio means
it, registered buffers made once, errors drained and named, and a clear refusal where io_uring is missing."""

from __future__ import annotations

import errno
import itertools
import json
import os
import sys
import threading
from pathlib import Path
from typing import Any, ClassVar

import pytest
from kvbench_nvme import uring
from kvbench_nvme.uring_engine import UringEngine

from kvbench_core.contracts.backend import DISCARD
from kvbench_core.contracts.conformance import FileTierConformance
from kvbench_core.contracts.errors import BackendUnavailable
from kvbench_core.contracts.payload import NoisePool

UNAVAILABLE = uring.unavailable_reason()
pytestmark = pytest.mark.skipif(UNAVAILABLE is not None, reason=f"io_uring unavailable here: {UNAVAILABLE}")

TS = 64 << 10
SIZES = [0, 1, 511, 4095, 4096, 4097, TS - 1, TS, TS + 1, 3 * TS + 17, 9 * TS]
MODES = {
    "buffered": {"fsync": True, "drop_cache": True},
    "no-fsync": {"fsync": False, "drop_cache": False},
    "direct": {"direct": True},
}
OPTIONS: dict[str, Any] = {"path": "{tmp_path}/tier", "transfer_size": "64KiB", "engine": "io_uring"}


class TestUringBufferedTier(FileTierConformance):
    backend_name = "nvme"
    backend_options: ClassVar = OPTIONS


class TestUringDirectTierQueueDepth4(TestUringBufferedTier):
    backend_options: ClassVar = {**OPTIONS, "direct": True, "queue_depth": 4}


class TestUringDirectTierQueueDepth1(TestUringBufferedTier):
    backend_options: ClassVar = {**OPTIONS, "direct": True, "fsync": False}


@pytest.mark.parametrize("queue_depth", [1, 4])
@pytest.mark.parametrize("mode", sorted(MODES))
def test_round_trip_is_byte_exact_for_every_size(make_backend: Any, round_trip: Any, mode: str,
                                                 queue_depth: int) -> None:
    backend = make_backend(engine="io_uring", queue_depth=queue_depth, **MODES[mode])
    for size in SIZES:
        key = f"entry-{size}"
        round_trip(backend, key, size)
        assert os.path.getsize(backend.path_of(key)) == size


def most_at_once(spans: list[tuple[float, float]]) -> int:
    """The largest number of ``[start, end]`` spans open at one instant."""
    events = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans], key=lambda e: (e[0], -e[1]))
    return max(itertools.accumulate(delta for _, delta in events))


@pytest.mark.parametrize("direct", [False, True])
@pytest.mark.parametrize("queue_depth", [1, 4])
def test_queue_depth_commands_are_in_flight_buffered_or_not(make_backend: Any, pool: NoisePool, direct: bool,
                                                            queue_depth: int, recording_log: Any) -> None:
    """As fio's iodepth: the first queue_depth commands go to the kernel together, and never more."""
    log = recording_log
    backend = make_backend(engine="io_uring", io_log=log, queue_depth=queue_depth, direct=direct, fsync=False)
    written = backend.write("k", pool.payload("k", 16 * TS))
    read = backend.read("k", 16 * TS, DISCARD)
    assert written.commands == read.commands == 16
    for op in ("write", "read"):
        calls = [call for call in log.calls if call[1] == op]
        assert sorted((offset, nbytes) for _, _, offset, nbytes, _, _ in calls) == [(i * TS, TS) for i in range(16)]
        assert most_at_once([(start, end) for *_, start, end in calls]) == queue_depth
    assert backend.describe()["commands_in_flight"] == queue_depth
    assert backend.describe()["engine"] == "io_uring"
    assert "io_uring" in backend.describe()["driver_layer"]


@pytest.mark.parametrize("direct", [False, True])
def test_reads_go_to_the_kernel_one_per_submission(make_backend: Any, pool: NoisePool, direct: bool,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Adjacent reads submitted under one block plug merge into one device request (the bench saw 1 MiB reads
    reach the disk as 2-4 MiB ones, 0.70x fio at depth 16): each io_uring_enter carries at most one read, as
    fio's default ``iodepth_batch_submit=1``, while queue_depth of them stay in flight."""
    carried: list[int] = []
    enter = uring.Ring.enter

    def counting(ring: uring.Ring, wait_for: int = 0) -> None:
        carried.append(ring.queued)
        enter(ring, wait_for)

    backend = make_backend(engine="io_uring", queue_depth=4, direct=direct, fsync=False)
    backend.write("k", pool.payload("k", 16 * TS))
    monkeypatch.setattr(uring.Ring, "enter", counting)
    backend.read("k", 16 * TS, DISCARD)
    assert max(carried) == 1 and sum(carried) == 16


def test_direct_tail_is_padded_truncated_and_logged_as_the_kernel_returned_it(
        make_backend: Any, pool: NoisePool, round_trip: Any, recording_log: Any) -> None:
    log = recording_log
    backend = make_backend(engine="io_uring", io_log=log, direct=True, queue_depth=2)
    round_trip(backend, "k", TS + 17)
    returned = {op: sorted((call[2], call[3]) for call in log.calls if call[1] == op) for op in ("write", "read")}
    assert returned == {"write": [(0, TS), (TS, 4096)], "read": [(0, TS), (TS, 17)]}
    assert log.requests == {("write", TS): (4096, 4096), ("read", TS): (4096, 4096)}


def test_one_ring_per_thread_with_its_buffers_made_once(make_backend: Any, pool: NoisePool, count_mmaps: Any) -> None:
    backend = make_backend(engine="io_uring", queue_depth=4, direct=True)
    engine = backend.engine
    assert isinstance(engine, UringEngine)
    ring = engine._ring()
    assert len(ring.buffers) == 5 and all(len(buffer) == TS for buffer in ring.buffers)
    allocations = count_mmaps()
    for index in range(10):
        key = f"k{index}"
        backend.write(key, pool.payload(key, 6 * TS))
        backend.read(key, 6 * TS, DISCARD)
    assert engine._ring() is ring and allocations == []


class FailingSource:
    """Fills ``good`` pieces, then raises: a source that breaks while commands are in flight."""

    def __init__(self, pool: NoisePool, size: int, good: int, error: BaseException) -> None:
        self.payload, self.size, self.good, self.error, self.calls = pool.payload("bad", size), size, good, error, 0

    def fill(self, offset: int, out: memoryview) -> None:
        self.calls += 1
        if self.calls > self.good:
            raise self.error
        self.payload.fill(offset, out)


@pytest.mark.parametrize("error", [ValueError("source broke"), KeyboardInterrupt()])
def test_a_failure_mid_entry_drains_the_ring_removes_the_file_and_leaves_the_ring_usable(
        make_backend: Any, pool: NoisePool, round_trip: Any, error: BaseException) -> None:
    backend = make_backend(engine="io_uring", queue_depth=4, direct=True)
    with pytest.raises(type(error)):
        backend.write("bad", FailingSource(pool, 12 * TS, good=6, error=error))
    assert not os.path.exists(backend.path_of("bad"))
    round_trip(backend, "after", 8 * TS + 5)  # nothing of the failed entry is left in the ring


def test_a_short_file_is_an_error_naming_the_offset(make_backend: Any, pool: NoisePool) -> None:
    backend = make_backend(engine="io_uring", queue_depth=4)
    backend.write("k", pool.payload("k", 4 * TS))
    os.truncate(backend.path_of("k"), TS + 100)
    with pytest.raises(OSError, match=f"ends at byte {TS + 100}"):
        backend.read("k", 4 * TS, DISCARD)


def test_a_kernel_error_is_raised_with_its_errno_after_the_rest_completed(make_backend: Any, pool: NoisePool) -> None:
    backend = make_backend(engine="io_uring", queue_depth=4)
    backend.write("k", pool.payload("k", 4 * TS))
    fd = os.open(backend.path_of("k"), os.O_RDONLY)
    try:
        with pytest.raises(OSError, match="io_uring write at offset 0") as caught:
            backend.engine.write(fd, "k", pool.payload("k", 4 * TS), 4 * TS, _phase(), None)
    finally:
        os.close(fd)
    assert caught.value.errno == errno.EBADF
    assert backend.read("k", 4 * TS, DISCARD).nbytes == 4 * TS  # the ring is still fine


def _phase() -> Any:
    from kvbench_core.filetiers.accounting import Phase

    return Phase()


# -- where io_uring is missing ------------------------------------------------------------------------------


def refusing_setup(code: int, monkeypatch: Any) -> None:
    real = uring._syscall

    def syscall(number: int, *args: int) -> int:
        if number == uring.SYS_IO_URING_SETUP:
            raise OSError(code, os.strerror(code))
        return real(number, *args)

    monkeypatch.setattr(uring, "_syscall", syscall)


@pytest.mark.parametrize(("code", "cause"), [(errno.ENOSYS, "seccomp"), (errno.EPERM, "io_uring"),
                                              (errno.ENOMEM, "RLIMIT_MEMLOCK")])
def test_open_fails_clearly_naming_the_cause_and_leaves_nothing(make_backend: Any, tmp_path: Path, monkeypatch: Any,
                                                                code: int, cause: str) -> None:
    refusing_setup(code, monkeypatch)
    with pytest.raises(BackendUnavailable) as caught:
        make_backend(engine="io_uring", path=str(tmp_path / "tier"))
    message = str(caught.value)
    assert "engine: io_uring is unavailable here" in message and cause in message
    assert "set engine: psync" in message and "\n" not in message
    assert not (tmp_path / "tier").exists()


def test_an_old_kernel_off_x86_is_refused_rather_than_run_without_ordering(monkeypatch: Any) -> None:
    refusing_setup(errno.EINVAL, monkeypatch)
    monkeypatch.setattr(uring.platform, "machine", lambda: "aarch64")
    with pytest.raises(uring.UringUnavailable, match=r"Linux >= 6\.1 on aarch64"):
        uring.Ring(entries=2, buffer_count=1, buffer_size=4096)


def test_an_old_kernel_on_x86_gets_the_plain_ring(monkeypatch: Any) -> None:
    real = uring._syscall
    setups: list[int] = []

    def syscall(number: int, *args: int) -> int:
        if number == uring.SYS_IO_URING_SETUP:
            flags = uring._Params.from_address(args[1]).flags
            setups.append(flags)
            if flags & uring.SETUP_DEFER_TASKRUN:
                raise OSError(errno.EINVAL, "Invalid argument")
        return real(number, *args)

    monkeypatch.setattr(uring, "_syscall", syscall)
    monkeypatch.setattr(uring.platform, "machine", lambda: "x86_64")
    ring = uring.Ring(entries=2, buffer_count=1, buffer_size=4096)
    try:
        assert setups == [uring.SETUP_SINGLE_ISSUER | uring.SETUP_DEFER_TASKRUN, 0] and ring.flags == 0
    finally:
        ring.close()


def _tiny_spec() -> tuple[Any, Any]:
    """``history_spec`` and ``run_cli`` from the core tests' tiny_spec module."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests"))
    try:
        from tiny_spec import history_spec, run_cli
    finally:
        sys.path.pop(0)
    return history_spec, run_cli


def test_a_run_with_verify_over_the_io_uring_tier_checks_every_byte(tmp_path: Path) -> None:
    """``verify: true`` end to end: every read of the io_uring tier compared with what was written."""
    history_spec, run_cli = _tiny_spec()
    out = tmp_path / "out"
    tier = {"name": "nvme", "backend": "nvme", "capacity": "256MiB",
            "options": {"path": str(tmp_path / "tier"), "engine": "io_uring", "direct": True, "queue_depth": 4,
                        "transfer_size": "256KiB"}}
    spec = history_spec([tier], verify=True, output={"directory": str(out), "progress": "off"})
    code, stdout, stderr = run_cli(tmp_path, spec)
    assert code == 0, (stdout, stderr)
    (result_path,) = out.glob("*.json")
    result = json.loads(result_path.read_text())
    verify = result["metrics"]["verify"]
    assert verify["integrity_errors"] == 0
    assert verify["enabled"] is True and verify["bytes_verified"] > 0
    assert result["metrics"]["tiers"]["nvme"]["reads_served"] > 0
    assert not (tmp_path / "tier").exists()


def test_a_run_asking_for_io_uring_where_it_is_missing_exits_3_with_one_line(tmp_path: Path, monkeypatch: Any) -> None:
    history_spec, run_cli = _tiny_spec()
    refusing_setup(errno.ENOSYS, monkeypatch)
    tier = {"name": "nvme", "backend": "nvme", "capacity": "64MiB",
            "options": {"path": str(tmp_path / "tier"), "engine": "io_uring"}}
    spec = history_spec([tier], output={"directory": str(tmp_path / "out"), "progress": "off"})
    code, _stdout, stderr = run_cli(tmp_path, spec)
    assert code == 3  # BackendUnavailable: the tier cannot be used here (docs/backend-contract.md)
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "engine: io_uring is unavailable here" in lines[0] and "seccomp" in lines[0], stderr
    assert not (tmp_path / "tier").exists()


def test_too_little_lockable_memory_for_the_rings_is_refused_at_open(make_backend: Any, tmp_path: Path,
                                                                      monkeypatch: Any) -> None:
    """(concurrency + 1) rings x (queue_depth + 1) buffers must fit RLIMIT_MEMLOCK for a user without it."""
    monkeypatch.setattr(uring.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(uring.resource, "getrlimit", lambda _which: (8 << 20, 8 << 20))
    make_backend(engine="io_uring", queue_depth=1, concurrency=1, path=str(tmp_path / "fits"))  # 2 x 2 x 64 KiB
    with pytest.raises(BackendUnavailable, match=r"need 20971520 B of locked memory and RLIMIT_MEMLOCK is 8388608"):
        make_backend(engine="io_uring", queue_depth=4, concurrency=3, transfer_size="1MiB",
                     path=str(tmp_path / "tier"))
    assert not (tmp_path / "tier").exists()


def test_a_finished_thread_takes_its_ring_with_it(make_backend: Any, pool: NoisePool) -> None:
    """A pool that is done (pre-population, preconditioning) must not leave rings and locked buffers behind."""
    backend = make_backend(engine="io_uring", queue_depth=2)
    engine = backend.engine
    rings_at_open = len(engine._rings)
    seen: list[Any] = []

    def work(index: int) -> None:
        backend.write(f"t{index}", pool.payload(f"t{index}", 3 * TS))
        seen.append(engine._ring())

    for index in range(3):
        thread = threading.Thread(target=work, args=(index,))
        thread.start()
        thread.join()
    assert len(seen) == 3 and all(ring.fd == -1 for ring in seen)  # closed when their threads ended
    assert len(engine._rings) == rings_at_open
