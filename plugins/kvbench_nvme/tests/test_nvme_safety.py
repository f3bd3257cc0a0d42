"""Where the nvme tier may write and what it deletes: system paths refused, foreign directories
left alone, keys kept inside, every file of the run removed at close, half-written entries never kept."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from kvbench_nvme.backend import NVMeBackend
from kvbench_nvme.directory import MARKER

from kvbench_core.contracts.backend import BackendContext
from kvbench_core.contracts.errors import BackendUnavailable
from kvbench_core.engine.payload import NoisePool


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


def test_a_kvbench_directory_is_shared_and_each_run_removes_only_its_own_files(tmp_path: Path,
                                                                            pool: NoisePool) -> None:
    path = str(tmp_path / "tier")
    first = NVMeBackend({"path": path}, BackendContext(tier_name="nvme0", run_id="first"))
    second = NVMeBackend({"path": path}, BackendContext(tier_name="nvme0", run_id="second"))
    first.open()
    first.write("k", pool.payload("k", 10))
    second.open()  # non-empty, but marked as kvbench's
    second.write("k", pool.payload("k", 10))
    first.close()
    assert sorted(os.listdir(path)) == [MARKER, "second-k.kv"]
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
    assert os.listdir(tmp_path / "tier") == [MARKER]


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
