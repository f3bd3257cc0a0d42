"""Where the nvme tier may write and what it deletes: system paths refused, foreign directories
left alone, keys kept inside, every file of the run removed at close, half-written entries never kept."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from kvbench_nvme.backend import NVMeBackend

from kvbench_core.contracts.backend import BackendContext
from kvbench_core.contracts.errors import BackendUnavailable, Cancelled
from kvbench_core.contracts.payload import NoisePool
from kvbench_core.filetiers.directory import MARKER


def unopened(path: str | Path, **options: Any) -> NVMeBackend:
    return NVMeBackend({"path": str(path), **options}, BackendContext(tier_name="nvme0", run_id="run1"))


@pytest.mark.parametrize("path", ["/", "/etc", "/usr/lib/kvbench", "/proc/kv", "/sys/kv", "/dev/kv", "/var",
                                  "/boot/kv", "/home", os.path.expanduser("~")])
def test_system_and_home_directories_are_refused(path: str) -> None:
    existed = os.path.exists(path)
    with pytest.raises(BackendUnavailable, match=r"system|home"):
        unopened(path, allow_nonempty=True).open()
    assert os.path.exists(path) == existed


def test_a_symlink_into_a_system_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "sneaky").symlink_to("/etc")
    with pytest.raises(BackendUnavailable, match="-> /etc"):
        unopened(tmp_path / "sneaky", allow_nonempty=True).open()


def test_a_file_is_not_a_directory(tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("x")
    with pytest.raises(BackendUnavailable, match="is not a directory"):
        unopened(tmp_path / "plain").open()
    with pytest.raises(BackendUnavailable, match="parent that is not a directory"):
        unopened(tmp_path / "plain" / "tier").open()


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_permission_denied_is_a_clear_error(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    with pytest.raises(BackendUnavailable, match="permission denied"):
        unopened(locked / "tier").open()


def test_a_foreign_non_empty_directory_is_refused_unless_allowed(tmp_path: Path, pool: NoisePool) -> None:
    (tmp_path / "precious.txt").write_text("user data")
    with pytest.raises(BackendUnavailable, match=r"not empty .* allow_nonempty"):
        unopened(tmp_path).open()
    backend = unopened(tmp_path, allow_nonempty=True)
    backend.open()
    backend.write("k", pool.payload("k", 10))
    backend.close()
    assert sorted(os.listdir(tmp_path)) == ["precious.txt"]


def test_a_created_directory_is_marked_and_removed_with_its_parents(tmp_path: Path, pool: NoisePool) -> None:
    backend = unopened(tmp_path / "a" / "b" / "tier")
    backend.open()
    marker = json.loads((tmp_path / "a" / "b" / "tier" / MARKER).read_text())
    assert marker["tool"] == "kvbench" and marker["run_id"] == "run1"
    backend.write("k", pool.payload("k", 10))
    backend.close()
    assert os.listdir(tmp_path) == []


def test_an_existing_empty_directory_is_used_and_kept(tmp_path: Path, pool: NoisePool) -> None:
    backend = unopened(tmp_path)
    backend.open()
    backend.write("k", pool.payload("k", 10))
    backend.close()
    assert tmp_path.is_dir() and os.listdir(tmp_path) == []


def test_a_second_run_on_a_live_runs_directory_is_refused_naming_the_first(tmp_path: Path,
                                                                           pool: NoisePool) -> None:
    """Issue 19: two runs at once on one directory contaminated each other's measurement.  (This test
    used to assert that they share it; the directory is now locked for the whole run.)"""
    path = str(tmp_path / "tier")
    first = NVMeBackend({"path": path}, BackendContext(tier_name="nvme0", run_id="first"))
    second = NVMeBackend({"path": path}, BackendContext(tier_name="nvme0", run_id="second"))
    first.open()
    first.write("k", pool.payload("k", 10))
    with pytest.raises(BackendUnavailable, match=rf"in use by run first \(pid {os.getpid()} on "):
        second.open()
    # the refused run wrote nothing
    assert sorted(os.listdir(path)) == sorted([".kvbench-run-first", MARKER, "first-k.kv"])
    first.close()
    assert not os.path.exists(path)
    second.open()  # the lock went with the first run
    second.write("k", pool.payload("k", 10))
    second.close()
    assert not os.path.exists(path)


def test_keep_leaves_the_entries(make_backend: Any, pool: NoisePool) -> None:
    backend = make_backend(keep=True)
    backend.write("k", pool.payload("k", 10))
    backend.close()
    assert os.path.exists(backend.path_of("k"))


def test_close_removes_every_file_of_the_run(make_backend: Any, pool: NoisePool, tmp_path: Path) -> None:
    backend = make_backend(queue_depth=4)
    for index in range(10):
        backend.write(f"k{index}", pool.payload(f"k{index}", 70_000))
    backend.delete("k3")
    backend.close()
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("key", ["../escape", "a/b", "..", ".", ".hidden", "", "nul\x00byte"])
def test_keys_cannot_leave_the_directory(make_backend: Any, pool: NoisePool, tmp_path: Path, key: str) -> None:
    backend = make_backend()
    with pytest.raises(ValueError, match="invalid cache key"):
        backend.write(key, pool.payload("x", 10))
    with pytest.raises(ValueError, match="invalid cache key"):
        backend.delete(key)
    assert sorted(os.listdir(tmp_path)) == ["tier"]
    assert sorted(os.listdir(tmp_path / "tier")) == [MARKER, ".kvbench-run-run1"]  # marker and the live run record


class FailingSource:
    """Fills the first pieces, then fails like an upper tier whose read broke mid-demotion."""

    def __init__(self, pool: NoisePool, size: int, fail_at: int) -> None:
        self.inner = pool.payload("k", size)
        self.size = size
        self.fail_at = fail_at

    def fill(self, offset: int, out: memoryview) -> None:
        if offset >= self.fail_at:
            raise OSError(5, "source failed")
        self.inner.fill(offset, out)


@pytest.mark.parametrize("queue_depth", [1, 4])
def test_a_failed_write_leaves_no_file(make_backend: Any, pool: NoisePool, queue_depth: int) -> None:
    backend = make_backend(queue_depth=queue_depth)
    size = 8 * (64 << 10)
    backend.write("k", pool.payload("k", size))
    with pytest.raises(OSError, match="source failed"):
        backend.write("k", FailingSource(pool, size, fail_at=3 * (64 << 10)))
    assert not os.path.exists(backend.path_of("k"))


# -- ownership is proven, a live run's directory is locked, a dead run's files are cleaned (issue 19) -----------

@pytest.mark.parametrize("marker", ["symlink", "dangling", "foreign json", "directory"])
def test_a_fake_owner_marker_confers_no_ownership(tmp_path: Path, pool: NoisePool, marker: str) -> None:
    """A ``.kvbench-owner`` that is a symlink to a decoy, a dangling link, another tool's JSON or a directory
    made a foreign directory kvbench's own, and the run then deleted the link and the directory."""
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    decoy = tmp_path / "decoy.json"
    decoy.write_text(json.dumps({"tool": "kvbench", "run_id": "run1", "pid": 1, "host": "h", "created": "t"}))
    fake = foreign / MARKER
    if marker == "symlink":
        fake.symlink_to(decoy)
    elif marker == "dangling":
        fake.symlink_to(tmp_path / "nowhere")
    elif marker == "foreign json":
        fake.write_text(json.dumps({"tool": "other", "run_id": "run1", "pid": 1}))
    else:
        fake.mkdir()
    with pytest.raises(BackendUnavailable, match=r"was not created by kvbench \(its .kvbench-owner is not a regular"):
        unopened(foreign).open()
    backend = unopened(foreign, allow_nonempty=True)  # allowed in: still never kvbench's to delete
    backend.open()
    backend.write("k", pool.payload("k", 10))
    backend.close()
    assert os.listdir(foreign) == [MARKER] and os.path.lexists(fake)
    assert decoy.exists()


KILLED_RUN = """
import os, signal, sys
from kvbench_nvme.backend import NVMeBackend
from kvbench_core.contracts.backend import BackendContext
from kvbench_core.contracts.payload import NoisePool
backend = NVMeBackend({"path": sys.argv[1], "fsync": False}, BackendContext(tier_name="nvme0", run_id="dead1"))
backend.open()
pool = NoisePool(1, pool_bytes=1 << 20)
for index in range(5):
    backend.write(f"k{index}", pool.payload(f"k{index}", 100_000))
print("written", flush=True)
if sys.argv[2] == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
signal.pause()
"""


def _start_run(path: Path, how: str) -> subprocess.Popen[str]:
    process = subprocess.Popen([sys.executable, "-c", KILLED_RUN, str(path), how], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdout.readline().strip() == "written"
    return process


def test_a_killed_runs_files_are_found_reported_and_removed(tmp_path: Path, pool: NoisePool,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """After SIGKILL the next run silently left 594 MB of the dead run's files."""
    tier = tmp_path / "tier"
    process = _start_run(tier, "kill")
    process.wait(timeout=30)
    foreign = tier / "dead1-user-file.txt"  # the dead run's id, but not one of its entry names: stays
    foreign.write_text("not kvbench's")
    assert len([name for name in os.listdir(tier) if name.endswith(".kv")]) == 5
    backend = unopened(tier)
    backend.open()
    warning = capsys.readouterr().err
    assert "removed 5 files (500000 B) left by run dead1 (pid" in warning and "killed?" in warning
    assert warning.strip().endswith(backend.describe()["stale_runs"][0])
    # and the run's result says it too (its warnings, from the tier's notes), not stderr alone (issue #29)
    assert backend.notes() == [warning.strip().removeprefix("kvbench: warning: ")]
    assert sorted(os.listdir(tier)) == sorted([MARKER, ".kvbench-run-run1", foreign.name])
    backend.write("k", pool.payload("k", 10))
    backend.close()
    assert sorted(os.listdir(tier)) == sorted([MARKER, foreign.name])  # the foreign file keeps the directory
    foreign.unlink()
    again = unopened(tier)
    again.open()
    again.close()
    assert not tier.exists()  # made by the dead run, now empty: kvbench's own to remove


def test_a_live_run_in_another_process_is_named_and_its_files_untouched(tmp_path: Path) -> None:
    tier = tmp_path / "tier"
    process = _start_run(tier, "live")
    try:
        before = sorted(os.listdir(tier))
        with pytest.raises(BackendUnavailable, match=rf"in use by run dead1 \(pid {process.pid} on "):
            unopened(tier).open()
        assert sorted(os.listdir(tier)) == before
    finally:
        process.kill()
        process.wait(timeout=30)


class _CancelAfterFirstPiece:
    """A source whose write is cancelled at the drain limit after its first piece (a command boundary)."""

    size = 4 << 20

    def __init__(self) -> None:
        self.pieces = 0

    def fill(self, offset: int, out: memoryview) -> None:
        if self.pieces:
            raise Cancelled("the drain limit ran out")
        self.pieces += 1
        out[:] = b"\x5a" * len(out)


@pytest.mark.parametrize("keep", [False, True])
def test_a_cancelled_write_leaves_its_file_to_close_which_removes_it_even_with_keep(tmp_path: Path,
                                                                                    keep: bool) -> None:
    """Issue 16: unlinking several multi-GiB half-written files in the workers kept the drain past its
    limit, so a cancelled write stops at once and its file goes at close, the entries kept or not."""
    backend = NVMeBackend({"path": str(tmp_path / "tier"), "fsync": False, "transfer_size": "1MiB"},
                          BackendContext(tier_name="nvme0", run_id="run1", keep=keep))
    backend.open()
    backend.write("kept", _FullSource(1 << 20))
    with pytest.raises(Cancelled):
        backend.write("cut", _CancelAfterFirstPiece())
    cut = Path(backend.path_of("cut"))
    assert cut.exists()  # not deleted in the worker
    backend.close()
    assert not cut.exists()
    assert Path(backend.path_of("kept")).exists() is keep


class _FullSource:
    def __init__(self, size: int) -> None:
        self.size = size

    def fill(self, offset: int, out: memoryview) -> None:
        out[:] = b"\x11" * len(out)
