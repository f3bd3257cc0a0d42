"""Faults during a run: each ends in a named error, a partial result and no files of the run left behind.

A full file system (a real 8 MiB tmpfs the test mounts, or, where mounting is not
permitted, a file-size limit that fails writes the same way), permission denied
(kvbench run as ``nobody``), the tier directory removed mid-run, a real Redis or
S3 server killed mid-run, and SIGINT/SIGTERM at each stage of a run.  Whatever
happens: the exit code names the kind of failure, stderr holds one
``kvbench: error:`` line and no traceback, the result JSON is written with what
was measured until then, and the tier directory is gone (or, with
``keep_files``, kept on purpose).

A run killed by a multi-client peer is the scale-out tests' business.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvbench_core.cli import main

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="faults are staged with Linux mounts and /proc")

#: A hang guard only (never a pass/fail threshold): how long any one scenario may take at most.
HANG_GUARD_S = 300
KVBENCH = [sys.executable, "-m", "kvbench_core.cli"]

#: Fault scenarios survived, by name (printed at the end of the module, recorded in docs/RELIABILITY.md).
SURVIVED: list[str] = []


def fault_spec(root: Path, tier: dict[str, Any] | None = None, **top: Any) -> dict[str, Any]:
    """tiny-1b entries of 0.4-1.5 MiB, a 256 KiB DRAM tier that spills almost everything into ``tier``
    (a directory tier in ``root/tier`` by default), and long enough to be interrupted."""
    spec: dict[str, Any] = {
        "version": 1, "name": "fault", "seed": 5,
        "model": {"name": "tiny-1b"},
        "duration": "120s",
        "workload": {"users": 4, "max_inflight": 2, "generation": "none", "options": {
            "profiles": {"chatbot": {"context": [16, 64], "generate": [1, 96], "think_s": [0, 0]}},
            "profile_mix": {"chatbot": 1}}},
        "cache": {"tiers": [
            {"name": "dram", "backend": "cpu", "capacity": "256KiB"},
            tier or {"name": "nvme", "backend": "nvme", "capacity": "1GiB",
                     "options": {"path": str(root / "tier"), "fsync": False, "drop_cache": False}},
        ]},
        "output": {"directory": str(root / "out"), "progress": "off", "interval": 0.2},
    }
    spec.update(copy.deepcopy(top))
    return spec


def write_spec(root: Path, spec: dict[str, Any]) -> Path:
    path = root / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    path.chmod(0o644)
    return path


@dataclass
class Outcome:
    code: int
    stdout: str
    stderr: str

    def error_line(self) -> str:
        assert "Traceback" not in self.stderr, self.stderr
        lines = [line for line in self.stderr.splitlines() if line.startswith("kvbench: ")]
        assert lines, f"no kvbench error line on stderr:\n{self.stderr}"
        return lines[-1]


def run_in_process(spec_path: Path, *extra: str) -> Outcome:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["run", str(spec_path), "--quiet", *extra])
    return Outcome(code, out.getvalue(), err.getvalue())


def start(spec_path: Path, *extra: str, user: str | None = None, env: dict[str, str] | None = None,
          preexec: Callable[[], None] | None = None) -> subprocess.Popen[str]:
    """``kvbench run`` as its own process (as ``user`` via setpriv), in the spec's directory."""
    command = [*KVBENCH, "run", str(spec_path), "--quiet", *extra]
    if user is not None:
        command = ["setpriv", f"--reuid={user}", f"--regid={user_group(user)}", "--clear-groups", *command]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=spec_path.parent, env={**os.environ, **(env or {})}, preexec_fn=preexec)


def finish(process: subprocess.Popen[str]) -> Outcome:
    stdout, stderr = process.communicate(timeout=HANG_GUARD_S)
    return Outcome(process.returncode, stdout, stderr)


def thaw_and_stop(server: Any, process: subprocess.Popen[str]) -> None:
    """After a frozen-server test, whatever it ended with: the server resumed (SIGCONT) and stopped, the
    run killed if it is still there."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(server.process.pid, signal.SIGCONT)
    if process.poll() is None:
        process.kill()
    server.stop()


def user_group(user: str) -> str:
    import grp
    import pwd

    return grp.getgrgid(pwd.getpwnam(user).pw_gid).gr_name


def wait_until(condition: Callable[[], bool], what: str, process: subprocess.Popen[str] | None = None) -> None:
    """Poll until ``condition``; a process that exits first fails the test with its output."""
    deadline = time.monotonic() + HANG_GUARD_S
    while not condition():
        if process is not None and process.poll() is not None:
            stdout, stderr = process.communicate()
            pytest.fail(f"kvbench exited ({process.returncode}) before {what}:\n{stdout}\n{stderr}")
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(0.02)


@contextlib.contextmanager
def in_background(action: Callable[[], None]) -> Iterator[threading.Thread]:
    """Run ``action`` on a thread while the in-process run goes on; re-raise its failure afterwards."""
    failure: list[BaseException] = []

    def guarded() -> None:
        try:
            action()
        except BaseException as error:
            failure.append(error)

    thread = threading.Thread(target=guarded, daemon=True)
    thread.start()
    yield thread
    thread.join(HANG_GUARD_S)
    if failure:
        raise failure[0]


def entry_files(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.glob("*.kv")) if directory.is_dir() else []


def the_result(out: Path) -> dict[str, Any]:
    results = sorted(out.glob("*.json"))
    assert len(results) == 1, f"expected one result in {out}, found {[p.name for p in results]}"
    return json.loads(results[0].read_text())


def assert_failed_result(result: dict[str, Any], *, status: str, mentions: str) -> None:
    assert result["run"]["status"] == status, result["run"]
    assert mentions in (result["run"]["error"] or ""), result["run"]
    assert result["metrics"], "the partial result lost its metrics"


def survived(name: str) -> None:
    SURVIVED.append(name)


@pytest.fixture(scope="module", autouse=True)
def report() -> Iterator[None]:
    yield
    print(f"\nfault scenarios survived: {len(SURVIVED)} ({', '.join(SURVIVED)})")


# -- a full file system -----------------------------------------------------------------------------------

@pytest.fixture
def small_filesystem(tmp_path: Path) -> Iterator[Path]:
    """An 8 MiB tmpfs mounted for this test (needs CAP_SYS_ADMIN: root in a VM or container)."""
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m,mode=0777", "tmpfs", str(mount_point)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip()}); the file-size-limit variant covers it")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def _file_size_limit() -> None:
    """In the child: writes beyond 1 MiB per file fail with EFBIG, as a full quota fails them with ENOSPC."""
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))


@pytest.mark.parametrize("on_error", ["stop", "count"])
def test_a_full_file_system_stops_or_counts_then_writes_the_result_and_cleans_up(
        tmp_path: Path, small_filesystem: Path, on_error: str) -> None:
    tier = {"name": "nvme", "backend": "nvme", "capacity": "1GiB",
            "options": {"path": str(small_filesystem / "tier"), "fsync": False, "drop_cache": False}}
    spec = fault_spec(tmp_path, tier, on_error=on_error, duration="1500ms" if on_error == "count" else "120s")
    outcome = run_in_process(write_spec(tmp_path, spec))

    # stop: the storage error's 4; count: the run went on, degraded (6: results/status.py)
    assert outcome.code == (4 if on_error == "stop" else 6), outcome.stderr[-4000:]
    line = outcome.error_line()
    result = the_result(tmp_path / "out")
    if on_error == "stop":
        assert "tier 'nvme': write of" in line and "No space left on device" in line, line
        assert_failed_result(result, status="failed", mentions="No space left on device")
    else:
        assert "requests failed on storage errors (on_error: count)" in line and "No space left" in line, line
        assert result["run"]["status"] == "degraded"
        assert result["metrics"]["requests"]["failed"] > 0 and result["metrics"]["requests"]["completed"] > 0
    assert any("No space left on device" in error["error"] for error in result["errors"])
    assert list(small_filesystem.iterdir()) == [], "the run left files on the full file system"
    survived(f"disk full (tmpfs, on_error {on_error})")


@pytest.mark.slow
def test_a_failing_write_without_a_small_file_system_is_the_same_story(tmp_path: Path) -> None:
    """The fallback where no file system can be mounted: a per-file size limit fails the writes (EFBIG)."""
    process = start(write_spec(tmp_path, fault_spec(tmp_path)), preexec=_file_size_limit)
    outcome = finish(process)
    assert outcome.code == 4, outcome.stderr[-4000:]
    assert "File too large" in outcome.error_line()
    assert_failed_result(the_result(tmp_path / "out"), status="failed", mentions="File too large")
    assert not (tmp_path / "tier").exists()
    survived("disk full (file size limit)")


def test_a_full_file_system_during_preconditioning(tmp_path: Path, small_filesystem: Path) -> None:
    tier = {"name": "nvme", "backend": "nvme", "capacity": "64MiB",
            "options": {"path": str(small_filesystem / "tier"), "fsync": False, "drop_cache": False}}
    spec = fault_spec(tmp_path, tier, precondition={"size": "64MiB", "entry_size": "1MiB", "threads": 2})
    outcome = run_in_process(write_spec(tmp_path, spec))
    assert outcome.code == 4, outcome.stderr[-4000:]
    assert "No space left on device" in outcome.error_line()
    assert_failed_result(the_result(tmp_path / "out"), status="failed", mentions="No space left on device")
    assert list(small_filesystem.iterdir()) == []
    survived("disk full while preconditioning")


# -- permission denied ------------------------------------------------------------------------------------

@pytest.fixture
def nobody_root() -> Iterator[Path]:
    """A directory ``nobody`` may write in, for a kvbench run as ``nobody`` (root bypasses permissions).

    Not under pytest's own temporary directory, which only its owner may enter."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run kvbench as an unprivileged user")
    probe = subprocess.run(["setpriv", "--reuid=nobody", f"--regid={user_group('nobody')}", "--clear-groups",
                            sys.executable, "-c", "import kvbench_core"], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"nobody cannot run this Python: {probe.stderr.strip()[-200:]}")
    root = Path(tempfile.mkdtemp(prefix="kvbench-nobody-"))
    root.chmod(0o777)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def test_a_tier_directory_it_may_not_write_is_refused_at_start(nobody_root: Path) -> None:
    locked = nobody_root / "locked"
    locked.mkdir(mode=0o755)  # owned by root: nobody may not create the tier directory inside
    spec = fault_spec(nobody_root)
    spec["cache"]["tiers"][1]["options"]["path"] = str(locked / "tier")
    outcome = finish(start(write_spec(nobody_root, spec), user="nobody"))
    assert outcome.code == 3, outcome
    line = outcome.error_line()
    assert "tier 'nvme' (nvme)" in line and "permission denied" in line, line
    assert_failed_result(the_result(nobody_root / "out"), status="failed", mentions="permission denied")
    assert list(locked.iterdir()) == []
    survived("permission denied at start")


@pytest.mark.slow
def test_permission_denied_mid_run(nobody_root: Path) -> None:
    """Entry files made unreadable while the run reads them: the read fails, the run stops and still
    removes every file (deleting needs only the directory, which stays writable)."""
    tier = nobody_root / "tier"
    process = start(write_spec(nobody_root, fault_spec(nobody_root)), user="nobody")
    wait_until(lambda: len(entry_files(tier)) >= 2, "entries on disk", process)

    def lock_entries() -> None:
        while process.poll() is None:
            for name in entry_files(tier):
                with contextlib.suppress(FileNotFoundError):
                    (tier / name).chmod(0)
            time.sleep(0.01)

    with in_background(lock_entries):
        outcome = finish(process)
    assert outcome.code == 4, outcome.stderr[-4000:]
    assert "Permission denied" in outcome.error_line()
    assert_failed_result(the_result(nobody_root / "out"), status="failed", mentions="Permission denied")
    assert not tier.exists(), f"left behind: {list(tier.iterdir())}"
    survived("permission denied mid-run")


# -- the tier directory vanishes --------------------------------------------------------------------------

def test_the_tier_directory_removed_mid_run(tmp_path: Path) -> None:
    tier = tmp_path / "tier"

    def remove_when_written() -> None:
        wait_until(lambda: len(entry_files(tier)) >= 2, "entries on disk")
        gone = tmp_path / "gone"
        tier.rename(gone)  # at once, as a whole: deleting file by file would race the run's new files
        shutil.rmtree(gone)

    with in_background(remove_when_written):
        outcome = run_in_process(write_spec(tmp_path, fault_spec(tmp_path)))
    assert outcome.code == 4, outcome.stderr[-4000:]
    assert "No such file or directory" in outcome.error_line()
    assert_failed_result(the_result(tmp_path / "out"), status="failed", mentions="No such file or directory")
    assert not tier.exists(), "the run re-created the vanished directory"
    survived("tier directory removed mid-run")


# -- servers killed mid-run -------------------------------------------------------------------------------

def kill_server_mid_run(tmp_path: Path, tier: dict[str, Any], server: Any, stored: Callable[[], int],
                        cause: str) -> None:
    """Run on ``tier``, SIGKILL ``server`` once three entries are stored, and demand the fault contract:
    exit 4, one line naming the tier, operation, key and ``cause``, a failed result, a cleanup error."""
    name = tier["name"]

    def kill_when_written() -> None:
        wait_until(lambda: stored() >= 3, f"entries in {name}")
        server.kill()

    try:
        with in_background(kill_when_written):
            outcome = run_in_process(write_spec(tmp_path, fault_spec(tmp_path, tier)))
    finally:
        server.stop()
    assert outcome.code == 4, outcome.stderr[-4000:]
    line = outcome.error_line()
    assert re.match(rf"kvbench: error: tier '{name}': (write|read|delete) of '[^']+' failed: {cause}", line), line
    result = the_result(tmp_path / "out")
    assert_failed_result(result, status="failed", mentions=f"tier '{name}'")
    # The server is gone, so the cleanup could not reach it: what it could not remove is listed as the tier's
    # leftovers (removed by the next run or `kvbench clean`, issue #29), or a cleanup error names the tier.
    sections = result["sections"]
    assert name in sections.get("leftovers", {}) or any(
        f"{name}:" in error for error in sections.get("cleanup_errors", [])), sections
    survived(f"{name} server killed mid-run")


@pytest.mark.redis
def test_a_redis_server_killed_mid_run(tmp_path: Path) -> None:
    from redis_servers import require_redis, start_redis

    require_redis()
    server = start_redis(tmp_path / "redis")
    tier = {"name": "redis", "backend": "redis", "capacity": "256MiB",
            "options": {"host": "127.0.0.1", "port": server.port, "connect_timeout": "2s"}}
    kill_server_mid_run(tmp_path, tier, server, lambda: server.client().dbsize(), "ConnectionError")


def _moto_tier(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bucket: str,
               **options: Any) -> tuple[Any, dict[str, Any], Callable[[], int]]:
    """A moto S3 server, an s3 tier on ``bucket`` (1 MiB parts, ``options`` added) and how many objects the
    bucket holds (0 while the server does not answer)."""
    from s3_servers import fake_aws_environment, require_moto, start_moto

    require_moto()
    fake_aws_environment(monkeypatch, tmp_path)
    server = start_moto(tmp_path / "moto.log")
    import boto3

    client = boto3.client("s3", endpoint_url=server.url, region_name="us-east-1")
    tier = {"name": "s3", "backend": "s3", "capacity": "256MiB",
            "options": {"endpoint_url": server.url, "bucket": bucket, "create_bucket": True,
                        "addressing_style": "path", "part_size": "1MiB", **options}}

    def objects() -> int:
        with contextlib.suppress(Exception):
            return int(client.list_objects_v2(Bucket=bucket).get("KeyCount", 0))
        return 0

    return server, tier, objects


@pytest.mark.s3
@pytest.mark.slow
def test_an_s3_server_killed_mid_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server, tier, objects = _moto_tier(tmp_path, monkeypatch, "kvb-faults", max_attempts=2)
    # Refused, reset, or cut off mid-answer: the cause depends on the instant of the kill; the form does not.
    kill_server_mid_run(tmp_path, tier, server, objects, r"\S")


@pytest.mark.redis
def test_a_redis_server_that_is_not_there(tmp_path: Path) -> None:
    from redis_servers import free_port

    tier = {"name": "redis", "backend": "redis", "capacity": "256MiB",
            "options": {"host": "127.0.0.1", "port": free_port(), "connect_timeout": "2s"}}
    outcome = run_in_process(write_spec(tmp_path, fault_spec(tmp_path, tier)))
    assert outcome.code == 3, outcome
    assert "tier 'redis' (redis): cannot use the server at 127.0.0.1:" in outcome.error_line()
    assert_failed_result(the_result(tmp_path / "out"), status="failed", mentions="cannot use the server")
    survived("redis server down at start")


# -- signals ----------------------------------------------------------------------------------------------

def catches(process: subprocess.Popen[str], signum: int) -> bool:
    """Whether the process has installed a handler for ``signum`` (kvbench's ``main`` has begun).

    Only once it runs kvbench: between fork and exec the child is still a copy of this pytest process,
    whose own handlers (kvbench imported in-process installs its start-up ones) would answer too early."""
    with contextlib.suppress(FileNotFoundError, ProcessLookupError):
        if b"kvbench_core.cli" not in Path(f"/proc/{process.pid}/cmdline").read_bytes():
            return False
        for line in Path(f"/proc/{process.pid}/status").read_text().splitlines():
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


#: Stages of a run a signal can arrive in: (name, spec overrides, what to wait for before signalling).
STAGES: dict[str, tuple[dict[str, Any], Callable[[Path, subprocess.Popen[str]], bool]]] = {
    "start-up": ({}, lambda root, process: catches(process, signal.SIGTERM)),
    "tiers opened": ({}, lambda root, process: (root / "tier" / ".kvbench-owner").exists()),
    "measuring": ({}, lambda root, process: len(entry_files(root / "tier")) >= 3),
    "warm-up": ({"warmup": "120s"}, lambda root, process: len(entry_files(root / "tier")) >= 3),
    "preconditioning": ({"precondition": {"size": "64GiB", "entry_size": "1MiB", "threads": 2}},
                        lambda root, process: len(entry_files(root / "tier")) >= 1),
}


def interrupt(tmp_path: Path, stage: str, signum: int, *, keep_files: bool = False) -> tuple[Outcome, Path]:
    overrides, ready = STAGES[stage]
    spec = fault_spec(tmp_path, **overrides)
    spec["output"]["keep_files"] = keep_files
    process = start(write_spec(tmp_path, spec))
    wait_until(lambda: ready(tmp_path, process), f"stage {stage}", process)
    process.send_signal(signum)
    return finish(process), tmp_path / "tier"


def check_interrupted(outcome: Outcome, tier: Path, out: Path, signum: int, stage: str) -> None:
    assert outcome.code == 128 + signum, outcome
    line = outcome.error_line()
    assert line == f"kvbench: interrupted by {signal.Signals(signum).name}", line  # whenever it lands
    assert not tier.exists() or entry_files(tier) == [], f"left behind: {entry_files(tier)}"
    assert not tier.exists(), f"the tier directory is still there: {list(tier.iterdir())}"
    if stage != "start-up":  # from the tiers' opening on, the partial result is always written
        result = the_result(out)
        assert result["run"]["status"] == "interrupted", result["run"]
        assert result["run"]["stop_reason"] == f"signal {signal.Signals(signum).name}"


@pytest.mark.parametrize("signum", [signal.SIGINT, pytest.param(signal.SIGTERM, marks=pytest.mark.slow)],
                         ids=["SIGINT", "SIGTERM"])
def test_a_signal_mid_run_writes_the_partial_result_and_cleans_up(tmp_path: Path, signum: int) -> None:
    outcome, tier = interrupt(tmp_path, "measuring", signum)
    check_interrupted(outcome, tier, tmp_path / "out", signum, "measuring")
    survived(f"{signal.Signals(signum).name} while measuring")


@pytest.mark.slow
@pytest.mark.parametrize("stage", [stage for stage in STAGES if stage != "measuring"])
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_at_any_stage(tmp_path: Path, signum: int, stage: str) -> None:
    outcome, tier = interrupt(tmp_path, stage, signum)
    check_interrupted(outcome, tier, tmp_path / "out", signum, stage)
    survived(f"{signal.Signals(signum).name} during {stage}")


@pytest.mark.slow
def test_keep_files_keeps_the_entries_of_an_interrupted_run(tmp_path: Path) -> None:
    outcome, tier = interrupt(tmp_path, "measuring", signal.SIGINT, keep_files=True)
    assert outcome.code == 130, outcome
    assert entry_files(tier), "keep_files: true, yet the entries are gone"
    assert the_result(tmp_path / "out")["run"]["status"] == "interrupted"
    survived("SIGINT with keep_files")


@pytest.mark.slow
def test_a_second_signal_does_not_cut_the_cleanup_short(tmp_path: Path) -> None:
    """An impatient second Ctrl-C while the run stops: still one line, the result, no files."""
    overrides, ready = STAGES["measuring"]
    process = start(write_spec(tmp_path, fault_spec(tmp_path, **overrides)))
    wait_until(lambda: ready(tmp_path, process), "entries on disk", process)
    process.send_signal(signal.SIGINT)
    process.send_signal(signal.SIGINT)
    check_interrupted(finish(process), tmp_path / "tier", tmp_path / "out", signal.SIGINT, "measuring")
    survived("two SIGINTs")


@pytest.mark.redis
@pytest.mark.slow
def test_a_third_signal_leaves_a_stop_stuck_behind_a_hung_server(tmp_path: Path) -> None:
    """Issue 19: a run stopping behind operations that never return ignored SIGINT and SIGTERM for 830 s.
    The first signal stops gracefully and waits for the operations in flight; here they hang on a frozen
    (SIGSTOPped) server with a 10-minute socket timeout, so the third signal must leave at once."""
    from redis_servers import require_redis, start_redis

    require_redis()
    server = start_redis(tmp_path / "redis")
    tier = {"name": "redis", "backend": "redis", "capacity": "256MiB",
            "options": {"host": "127.0.0.1", "port": server.port, "socket_timeout": "10m"}}
    process = start(write_spec(tmp_path, fault_spec(tmp_path, tier)))
    try:
        wait_until(lambda: server.client().dbsize() > 0, "entries stored", process)
        os.kill(server.process.pid, signal.SIGSTOP)
        time.sleep(0.5)  # the run's next operations are now stuck in the frozen server
        for _ in range(2):
            process.send_signal(signal.SIGINT)
            time.sleep(0.5)
        assert process.poll() is None, "two signals: still waiting for the operations in flight, as it should"
        started = time.monotonic()
        process.send_signal(signal.SIGINT)
        outcome = finish(process)
        assert time.monotonic() - started < 10
        assert outcome.code == 130, outcome
        assert "stopping did not finish" in outcome.error_line()
        assert "Traceback" not in outcome.stderr
    finally:
        thaw_and_stop(server, process)
    survived("a stop stuck behind a frozen server, left on the third signal")


@pytest.mark.parametrize("signum", [signal.SIGHUP, signal.SIGQUIT], ids=["SIGHUP", "SIGQUIT"])
def test_a_closed_terminal_or_ctrl_backslash_stops_the_run_as_sigterm_does(tmp_path: Path, signum: int) -> None:
    """Issue 29: SIGHUP (a closed terminal, a dropped ssh session) and SIGQUIT killed kvbench outright: exit
    129/131 in 70 ms, no message, no result, the entry files left.  Now each stops the run as SIGTERM does
    (the partial result, the cleanup, one line), SIGQUIT after printing where every thread is."""
    outcome, tier = interrupt(tmp_path, "measuring", signum)
    check_interrupted(outcome, tier, tmp_path / "out", signum, "measuring")
    if signum == signal.SIGQUIT:
        assert "kvbench: SIGQUIT: the stack of every thread follows" in outcome.stderr, outcome.stderr
        assert "most recent call first" in outcome.stderr and outcome.stderr.count("Thread 0x") >= 2
    else:
        assert outcome.stderr.splitlines() == ["kvbench: interrupted by SIGHUP"], outcome.stderr
    survived(f"{signal.Signals(signum).name} while measuring")


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGHUP, signal.SIGQUIT], ids=["SIGHUP", "SIGQUIT"])
def test_sighup_and_sigquit_at_start_up_are_one_line(tmp_path: Path, signum: int) -> None:
    outcome, tier = interrupt(tmp_path, "start-up", signum)
    check_interrupted(outcome, tier, tmp_path / "out", signum, "start-up")


@pytest.mark.parametrize("delay_s", [0.0, 0.05, 0.1])
def test_a_signal_while_kvbench_is_still_importing_is_one_line(tmp_path: Path, delay_s: float) -> None:
    """Issue 19: a SIGINT in the first ~0.1 s was a KeyboardInterrupt traceback from inside an import.
    The handler is installed before kvbench imports anything heavy (it is the first thing
    ``kvbench_core.cli`` does, and SIGTERM is caught from then on too, which is how the test sees it)."""
    process = start(write_spec(tmp_path, fault_spec(tmp_path)))
    wait_until(lambda: catches(process, signal.SIGTERM), "kvbench's start-up handler", process)
    time.sleep(delay_s)
    process.send_signal(signal.SIGINT)
    outcome = finish(process)
    assert outcome.code == 130, outcome
    assert outcome.error_line() == "kvbench: interrupted by SIGINT"
    assert "Traceback" not in outcome.stderr
    assert not (tmp_path / "tier").exists()


#: A stand-in for ``python -m kvbench_core.cli`` whose Ctrl-C lands where one at random often did while
#: ``main`` imported the commands and plugins: inside the ``exec`` of source text with which every dataclass
#: and named tuple makes its methods.
CTRL_C_IN_GENERATED_CODE = """
import sys
import kvbench_core.cli as cli

def build_parser():
    exec("import signal; signal.raise_signal(signal.SIGINT)", {})

cli.build_parser = build_parser
sys.exit(cli.main(["run", "spec.yaml"]))
"""


def test_a_ctrl_c_inside_generated_code_still_exits_130(tmp_path: Path) -> None:
    """The intermittent start-up signal test: main caught that Ctrl-C and printed its line, yet the process
    then killed itself with SIGINT (-2 to this parent), because CPython marks a ``KeyboardInterrupt`` of its
    own exact type leaving such an ``exec`` as unhandled for good, and a module run with ``-m`` ends by that
    mark.  main's own Ctrl-C is a subclass."""
    (tmp_path / "ctrl_c_child.py").write_text(CTRL_C_IN_GENERATED_CODE)
    done = subprocess.run([sys.executable, "-m", "ctrl_c_child"], capture_output=True, text=True, cwd=tmp_path,
                          timeout=HANG_GUARD_S)
    assert (done.returncode, done.stderr) == (130, "kvbench: interrupted by SIGINT\n")


def _frozen_server(tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, dict[str, Any],
                                                                                       Callable[[], int]]:
    """A server of ``kind`` (redis or s3), a tier on it whose operations time out after 1 s, and how many
    entries it holds."""
    if kind == "redis":
        from redis_servers import require_redis, start_redis

        require_redis()
        server = start_redis(tmp_path / "redis")
        tier = {"name": "redis", "backend": "redis", "capacity": "256MiB",
                "options": {"host": "127.0.0.1", "port": server.port, "socket_timeout": "1s"}}
        return server, tier, lambda: int(server.client().dbsize())
    # A multipart Complete has its own timeout (15 min by default, for big objects): 1 s here as well, or an
    # entry caught mid-Complete by the freeze holds the stop until the test's own timeout.
    return _moto_tier(tmp_path, monkeypatch, "kvb-frozen", max_attempts=1, read_timeout="1s", connect_timeout="1s",
                      complete_timeout="1s")


@pytest.mark.slow
@pytest.mark.parametrize("kind", [pytest.param("redis", marks=pytest.mark.redis),
                                  pytest.param("s3", marks=pytest.mark.s3),
                                  pytest.param("s3 cold", marks=pytest.mark.s3)])
def test_on_error_stop_stops_at_the_first_timeout_and_says_so(tmp_path: Path, kind: str,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 19: with ``on_error: stop``, S3 timeouts printed ``(on_error: count)`` and the status said
    ``completed`` with 0 requests completed.  Here the tier's server freezes mid-run (SIGSTOP) and every
    operation on it times out after 1 s."""
    server, tier, stored = _frozen_server(tmp_path, kind.split()[0], monkeypatch)
    spec = fault_spec(tmp_path, tier, on_error="stop", duration="60s")
    if kind == "s3 cold":  # as in specs/nvme-s3-cold.yaml: entries idle 0.5 s move down off the request path
        spec["cache"]["tiers"][1] = {**tier, "cold_after": "0.5s"}
        spec["cache"]["tiers"].insert(1, {"name": "nvme", "backend": "nvme", "capacity": "1GiB", "options": {
            "path": str(tmp_path / "tier"), "fsync": False, "drop_cache": False}})
    process = start(write_spec(tmp_path, spec))
    try:
        wait_until(lambda: stored() > 0, "entries stored", process)
        os.kill(server.process.pid, signal.SIGSTOP)
        outcome = finish(process)
    finally:
        thaw_and_stop(server, process)
    assert outcome.code == 4, outcome.stderr[-4000:]
    line = outcome.error_line()
    assert "on_error: count" not in line and re.search(r"(?i)time(d )?out", line), line
    result = the_result(tmp_path / "out")
    assert result["run"]["status"] == "failed", result["run"]
    assert result["run"]["stop_reason"].startswith("storage error: "), result["run"]
    survived(f"a frozen {kind} server under on_error: stop")
