"""kvbench writes only into its own directories and deletes only what it created.

System paths (``/``, ``/etc``, ``/usr``, ``/boot``, ``/proc``, ``/sys``, ``/dev``,
the home directory itself, and symlinks to them) are refused for tiers and for
results; a non-empty directory kvbench did not create is refused unless the spec
says ``allow_nonempty``, and then every foreign file survives byte for byte, as
do a shared Redis server's and S3 bucket's foreign keys.  A whole run touches
nothing outside its tier, output and I/O-log paths: not the working directory,
not the home directory.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from tiny_spec import history_spec, run_cli

from kvbench_core.cli import main

REPO = Path(__file__).resolve().parents[2]

pytest.importorskip("kvbench_nvme", reason="the kvbench-nvme plugin is not installed")

SYSTEM_PATHS = ["/", "/etc", "/usr", "/boot", "/proc", "/sys", "/dev", "/usr/lib/kvbench", "/etc/kvbench",
                "/proc/self/kvbench", "/sys/kvbench", "/dev/kvbench", "/root", "/home", "/var"]


def small_spec(root: Path, tier: dict[str, Any] | None = None, **top: Any) -> dict[str, Any]:
    return history_spec([tier or nvme_tier(root / "tier")], **{
        "name": "safety", "seed": 1, "output": {"directory": str(root / "out"), "progress": "off"}, **top})


def nvme_tier(path: Path | str, **options: Any) -> dict[str, Any]:
    return {"name": "nvme", "backend": "nvme", "capacity": "256MiB",
            "options": {"path": str(path), "fsync": False, "drop_cache": False, **options}}


def run(root: Path, spec: dict[str, Any]) -> tuple[int, str]:
    code, _, stderr = run_cli(root, spec)
    return code, stderr


def snapshot(directory: Path) -> dict[str, str]:
    """Every file under ``directory`` with a digest of its content (directories as themselves)."""
    found: dict[str, str] = {}
    for path in sorted(directory.rglob("*")):
        relative = str(path.relative_to(directory))
        found[relative] = "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def listing(path: str) -> list[str] | None:
    """What ``path`` holds, less what the machine changes on its own: /proc's process directories come
    and go with every process started or ended anywhere meanwhile (a CI run saw one, not kvbench's)."""
    with contextlib.suppress(OSError):
        names = sorted(os.listdir(path))
        if os.path.realpath(path) == "/proc":
            names = [name for name in names if not name.isdigit()]
        return names
    return None


# -- refused places ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("target", [*SYSTEM_PATHS, "~"])
def test_a_tier_in_a_system_path_or_the_home_directory_is_refused(tmp_path: Path, target: str) -> None:
    resolved = os.path.realpath(os.path.expanduser(target))
    existing = resolved if os.path.isdir(resolved) else os.path.dirname(resolved)
    before = listing(existing)
    code, stderr = run(tmp_path, small_spec(tmp_path, nvme_tier(target)))
    # Refused when the spec is loaded (exit 2, as output.directory is), not when the run opens the tier
    # after creating its result directory (it once exited 3 leaving a failed result behind).
    assert code == 2, stderr
    assert "cache.tiers[1].options.path: " in stderr
    assert "is a system or home directory" in stderr or "is inside a system directory" in stderr, stderr
    assert listing(existing) == before, f"{existing} changed"
    assert not os.path.exists(resolved) or resolved == existing
    assert not (tmp_path / "out").exists()


def test_a_symlink_to_a_system_directory_is_the_system_directory(tmp_path: Path) -> None:
    (tmp_path / "innocent").symlink_to("/etc")
    before = listing("/etc")
    code, stderr = run(tmp_path, small_spec(tmp_path, nvme_tier(tmp_path / "innocent" / "kvbench")))
    assert code == 2 and "(/etc/kvbench) is inside a system directory" in stderr, stderr
    assert listing("/etc") == before


@pytest.mark.parametrize("target", [*SYSTEM_PATHS, "~"])
def test_results_are_never_written_to_a_system_path(tmp_path: Path, target: str) -> None:
    resolved = os.path.realpath(os.path.expanduser(target))
    existing = resolved if os.path.isdir(resolved) else os.path.dirname(resolved)
    before = listing(existing)
    spec = small_spec(tmp_path)
    spec["output"]["directory"] = target
    code, stderr = run(tmp_path, spec)
    assert code == 2 and stderr.startswith("kvbench: error: output.directory: "), stderr
    assert listing(existing) == before
    assert not (tmp_path / "tier").exists()


def test_a_run_name_cannot_steer_the_result_out_of_its_directory(tmp_path: Path) -> None:
    code, stderr = run(tmp_path, small_spec(tmp_path, name="../../escaped"))
    assert code == 2 and stderr.startswith("kvbench: error: name: "), stderr
    assert snapshot(tmp_path) == {"spec.yaml": snapshot(tmp_path)["spec.yaml"]}


# -- other people's files -------------------------------------------------------------------------------

FOREIGN = {"notes.txt": b"someone's notes\n", "data.kv": b"not kvbench's\n",
           "20260101T000000-abcdef-u0_c1_turn_1.kv": b"an older run's entry, kept on purpose\n",
           "sub/deep.bin": bytes(range(256))}


def seed_foreign(directory: Path) -> dict[str, str]:
    for name, content in FOREIGN.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    return snapshot(directory)


def test_a_non_empty_directory_it_did_not_create_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    before = seed_foreign(shared)
    code, stderr = run(tmp_path, small_spec(tmp_path, nvme_tier(shared)))
    assert code == 3, stderr
    assert "is not empty" in stderr and "allow_nonempty" in stderr
    assert snapshot(shared) == before


def test_with_allow_nonempty_only_its_own_files_are_removed(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    before = seed_foreign(shared)
    code, stderr = run(tmp_path, small_spec(tmp_path, nvme_tier(shared, allow_nonempty=True)))
    assert code == 0, stderr
    result = json.loads(next((tmp_path / "out").glob("*.json")).read_text())
    assert result["metrics"]["tiers"]["nvme"]["write"]["ops"] > 0  # it did write there
    assert snapshot(shared) == before, "a foreign file was touched, or one of kvbench's was left"


def test_an_interrupted_keep_files_run_then_a_new_run_leave_each_others_files(tmp_path: Path) -> None:
    """A directory kvbench made and kept (keep_files) is its own; the next run adds and removes only its files."""
    tier = tmp_path / "tier"
    code, stderr = run(tmp_path, small_spec(tmp_path, nvme_tier(tier), output={
        "directory": str(tmp_path / "out1"), "progress": "off", "keep_files": True}))
    assert code == 0, stderr
    kept = snapshot(tier)
    assert any(name.endswith(".kv") for name in kept) and ".kvbench-owner" in kept
    code, stderr = run(tmp_path, small_spec(tmp_path, nvme_tier(tier)))
    assert code == 0, stderr
    assert snapshot(tier) == kept


# -- a whole run stays inside its paths ------------------------------------------------------------------

def test_a_run_writes_nowhere_but_its_tier_output_and_log_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                ) -> None:
    work, home, area = tmp_path / "work", tmp_path / "home", tmp_path / "area"
    for directory in (work, home, area):
        directory.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("HOME", str(home))
    spec = small_spec(area, output={"directory": str(area / "out"), "progress": "off",
                                    "io_log": str(area / "logs" / "io.jsonl"), "formats": ["json"]})
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(spec))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        assert main(["run", str(spec_path), "--quiet"]) == 0, err.getvalue()

    assert snapshot(work) == {} and snapshot(home) == {}
    names = sorted(snapshot(area))
    assert names[:3] == ["logs", "logs/io.jsonl", "out"] and len(names) == 4 and names[3].endswith(".json"), names


@pytest.mark.redis
def test_a_shared_redis_keeps_every_key_that_is_not_the_runs(tmp_path: Path) -> None:
    from redis_servers import require_redis, start_redis

    require_redis()
    server = start_redis(tmp_path / "redis")
    try:
        client = server.client()
        foreign = {"user:1": b"alice", "kvbench:20260101T000000-abcdef:{u0_c1_turn_1}:p0": b"an older run",
                   "kvbench:shared:team:{k}:p0": b"a shared namespace", "session:xyz": b"\x00\x01"}
        client.mset(foreign)
        tier = {"name": "redis", "backend": "redis", "capacity": "256MiB",
                "options": {"host": "127.0.0.1", "port": server.port}}
        code, stderr = run(tmp_path, small_spec(tmp_path, tier))
        assert code == 0, stderr
        result = json.loads(next((tmp_path / "out").glob("*.json")).read_text())
        assert result["metrics"]["tiers"]["redis"]["write"]["ops"] > 0
        assert {key.decode(): client.get(key) for key in client.keys("*")} == foreign
    finally:
        server.stop()


@pytest.fixture
def s3_client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Any]]:
    from s3_servers import fake_aws_environment, require_moto, start_moto

    require_moto()
    fake_aws_environment(monkeypatch, tmp_path)
    server = start_moto(tmp_path / "moto.log")
    import boto3

    yield server.url, boto3.client("s3", endpoint_url=server.url, region_name="us-east-1")
    server.stop()


@pytest.mark.s3
@pytest.mark.slow
def test_a_shared_bucket_keeps_every_object_that_is_not_the_runs(tmp_path: Path,
                                                                  s3_client: tuple[str, Any]) -> None:
    url, client = s3_client
    bucket = f"kvb-{uuid.uuid4().hex[:10]}"
    client.create_bucket(Bucket=bucket)
    foreign = {"datasets/train.bin": b"training data", "kvbench/20260101T000000-abcdef/u0_c1_turn_1": b"older run",
               "team-a/kvbench/x": b"another prefix", "kvbench-notes.txt": b"notes"}
    for key, body in foreign.items():
        client.put_object(Bucket=bucket, Key=key, Body=body)
    tier = {"name": "s3", "backend": "s3", "capacity": "256MiB",
            "options": {"endpoint_url": url, "bucket": bucket, "addressing_style": "path", "part_size": "512KiB",
                        "max_attempts": 1}}
    code, stderr = run(tmp_path, small_spec(tmp_path, tier))
    assert code == 0, stderr
    listed = client.list_objects_v2(Bucket=bucket).get("Contents", [])
    assert {item["Key"]: client.get_object(Bucket=bucket, Key=item["Key"])["Body"].read() for item in listed} == foreign
    assert client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def test_an_output_directory_that_cannot_be_written_is_refused_before_the_run(tmp_path: Path) -> None:
    """Found out at load, not after a long run whose result then has nowhere to go."""
    (tmp_path / "a-file").write_text("in the way\n")
    read_only = tmp_path / "read-only"
    read_only.mkdir()
    mounted = os.geteuid() == 0 and subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,ro", "tmpfs",
                                                    str(read_only)], capture_output=True).returncode == 0
    if not mounted:
        read_only.chmod(0o555)  # a non-root user is refused by the permission bits instead
    try:
        for directory, why in ((tmp_path / "a-file", "is not a directory"),
                               (tmp_path / "a-file" / "sub", "is not a directory"),
                               (read_only / "out", "is not writable")):
            spec = small_spec(tmp_path)
            spec["output"]["directory"] = str(directory)
            code, stderr = run(tmp_path, spec)
            assert code == 2 and stderr.startswith("kvbench: error: output.directory: ") and why in stderr, stderr
            assert not (tmp_path / "tier").exists()
    finally:
        if mounted:
            subprocess.run(["umount", str(read_only)], check=False)


# -- issue 19: never overwrite a foreign file, no overlapping tiers, $HOME like ~ ------------------------------

def test_an_existing_io_log_target_is_refused_and_left_intact(tmp_path: Path) -> None:
    """``output: {io_log: spec.yaml}`` replaced the spec itself with a JSONL log, exit 0, no warning."""
    spec = small_spec(tmp_path)
    spec["output"]["io_log"] = str(tmp_path / "spec.yaml")  # run_cli writes the spec there
    code, stderr = run(tmp_path, spec)
    assert code == 2
    assert stderr.strip().endswith("spec.yaml already exists; kvbench never overwrites a file it did not create: "
                                   "remove it or name a new file")
    assert yaml.safe_load((tmp_path / "spec.yaml").read_text())["name"] == "safety"  # the spec survived
    assert not (tmp_path / "out").exists() and not (tmp_path / "tier").exists()


def test_the_io_log_never_opens_an_existing_file_or_a_symlink(tmp_path: Path) -> None:
    """The run-time half: a file (or a link to one) appearing after the spec was checked is not replaced."""
    from kvbench_core.contracts.errors import InputFileError
    from kvbench_core.engine.measure.iolog import IOLog

    precious = tmp_path / "precious.txt"
    precious.write_text("user data")
    (tmp_path / "link.jsonl").symlink_to(precious)
    for target in (precious, tmp_path / "link.jsonl"):
        with pytest.raises(InputFileError, match="kvbench never overwrites a file it did not create"):
            IOLog(str(target))
    assert precious.read_text() == "user data"
    log = IOLog(str(tmp_path / "new.jsonl"))
    log.close()
    IOLog(str(tmp_path / "new.jsonl")).close()  # its own log, again (the next trial of the session)


@pytest.mark.parametrize("second", ["same", "dotdot", "nested", "parent"])
def test_overlapping_tier_directories_are_refused(tmp_path: Path, second: str) -> None:
    """Two nvme tiers on one directory (also spelled ./kvcache/../kvcache/, or nested) were accepted, and a
    nested one left a stray marker."""
    first = tmp_path / "kvcache"
    other = {"same": first, "dotdot": f"{first}/../kvcache/", "nested": first / "inner", "parent": tmp_path}[second]
    spec = small_spec(tmp_path, nvme_tier(first))
    spec["cache"]["tiers"].append({**nvme_tier(other), "name": "nvme2"})
    code, stderr = run(tmp_path, spec)
    assert code == 2, stderr
    assert "cache.tiers[2].options.path: " in stderr and "cache.tiers[1]" in stderr
    assert ("is the same directory as" if second in ("same", "dotdot") else "overlaps") in stderr
    assert sorted(os.listdir(tmp_path)) == ["spec.yaml"]  # no marker, no directory, no result


def test_home_in_a_path_is_expanded_like_a_tilde(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``$HOME/kv`` made a directory literally named ``$HOME``; an unset variable is an error instead."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    spec = small_spec(tmp_path, nvme_tier("$HOME/kv"), output={"directory": "${HOME}/out", "progress": "off"})
    code, stderr = run(tmp_path, spec)
    assert code == 0, stderr
    assert list((home / "out").glob("*.json")) and not (tmp_path / "$HOME").exists()
    code, stderr = run(tmp_path, small_spec(tmp_path, nvme_tier("$KVBENCH_NOT_SET/kv")))
    assert code == 2
    assert "cache.tiers[1].options.path: $KVBENCH_NOT_SET/kv: $KVBENCH_NOT_SET is not set" in stderr
