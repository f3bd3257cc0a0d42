"""Run bpftrace beside the benchmark: check it can work, start it, wait for it to attach, stop it.

bpftrace runs in its own session (process group), so a Ctrl-C meant for
kvbench never reaches it half-way and the stop is always ours: SIGINT, on
which bpftrace runs ``END`` and prints its maps, then a bounded wait, then
SIGKILL to the whole group if it is stuck.  Everything that can stop tracing
on a machine (no bpftrace, not root, no tracefs, no block tracepoints, eBPF
refused) is a ``TracingUnavailable`` whose message says which.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from kvbench_blktrace.devices import DeviceNotTraceable, TraceDevice, devices_for
from kvbench_blktrace.program import READY_MARKER, build_program
from kvbench_core.contracts.errors import UserError

TRACEFS_MOUNT = Path("/sys/kernel/tracing")
TRACEFS_DIRS = (TRACEFS_MOUNT, Path("/sys/kernel/debug/tracing"))
STOP_TIMEOUT_S = 30.0
MAP_KEYS_MAX = 65536  # in-flight requests and threads keyed in maps; bpftrace's default is 4096
_NOISE = "RLIMIT_MEMLOCK"  # bpftrace warns about it even where memlock no longer limits eBPF (kernel >= 5.11)


class TracingUnavailable(UserError):
    """Block tracing cannot run here; the message says why (and the run goes on untraced unless required)."""

    exit_code = 3


@dataclass
class Preflight:
    """What a trace will cover, decided before bpftrace starts."""

    bpftrace: str
    devices: list[TraceDevice]
    syscalls: bool
    notes: list[str] = field(default_factory=list)


def find_tracefs() -> Path | None:
    for directory in TRACEFS_DIRS:
        if (directory / "events").is_dir():
            return directory
    return None


def ensure_tracefs() -> tuple[Path, str | None]:
    """The tracefs directory, mounting it at /sys/kernel/tracing when missing; and a note if we did."""
    found = find_tracefs()
    if found is not None:
        return found, None
    try:
        done = subprocess.run(["mount", "-t", "tracefs", "nodev", str(TRACEFS_MOUNT)],
                              capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise TracingUnavailable(f"tracefs is not mounted and 'mount -t tracefs' could not run: {error}") from None
    found = find_tracefs()
    if done.returncode != 0 or found is None:
        detail = done.stderr.strip() or f"exit status {done.returncode}"
        raise TracingUnavailable(f"tracefs is not mounted and mounting it at {TRACEFS_MOUNT} failed: {detail}")
    return found, f"tracefs was not mounted; kvbench mounted it at {TRACEFS_MOUNT}"


def preflight(paths: list[str]) -> Preflight:
    """Check everything that can be checked without starting bpftrace; fast, no side effects but the mount."""
    if not paths:
        raise TracingUnavailable("no tier stores files (no tier has options.path), so no block device to trace")
    bpftrace = shutil.which("bpftrace")
    if bpftrace is None:
        raise TracingUnavailable("bpftrace is not installed (apt-get install bpftrace)")
    if os.geteuid() != 0:
        raise TracingUnavailable("bpftrace needs root to load eBPF programs; run kvbench as root")
    tracefs, mounted = ensure_tracefs()
    notes = [mounted] if mounted else []
    if not (tracefs / "events" / "block" / "block_rq_issue").is_dir():
        raise TracingUnavailable(f"this kernel has no block request tracepoints ({tracefs}/events/block)")
    devices: set[TraceDevice] = set()
    for path in paths:
        try:
            devices.update(devices_for(path))
        except (OSError, DeviceNotTraceable) as error:
            notes.append(f"no block-layer histograms for {path}: {error}")
    syscalls = (tracefs / "events" / "syscalls").is_dir()
    if not syscalls:
        notes.append("the kernel has no syscall tracepoints (CONFIG_FTRACE_SYSCALLS): no syscall histograms")
    if not devices and not syscalls:
        raise TracingUnavailable("; ".join(notes))
    return Preflight(bpftrace, sorted(devices), syscalls, notes)


class BpftraceProcess:
    """One bpftrace run: ``start`` returns once its probes are attached, ``stop`` returns what it printed."""

    def __init__(self, bpftrace: str, program: str, *, attach_timeout_s: float,
                 stop_timeout_s: float = STOP_TIMEOUT_S) -> None:
        self.command = [bpftrace, "-e", program]
        self.attach_timeout_s = attach_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self._lines: list[str] = []
        self._ready = threading.Event()
        self._process: subprocess.Popen[str] | None = None
        self._reader: threading.Thread | None = None
        self._stderr = tempfile.TemporaryFile(mode="w+", prefix="kvbench-bpftrace-")  # noqa: SIM115 - closed in stop

    def start(self) -> float:
        """Start bpftrace and wait until it has attached; returns the seconds that took."""
        started = time.monotonic()
        env = {**os.environ, "BPFTRACE_MAP_KEYS_MAX": str(MAP_KEYS_MAX)}
        try:
            self._process = subprocess.Popen(self.command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                             stderr=self._stderr, text=True, env=env, start_new_session=True)
        except OSError as error:
            self._stderr.close()
            raise TracingUnavailable(f"cannot start bpftrace: {error}") from None
        self._reader = threading.Thread(target=self._read, name="kvbench-bpftrace-reader", daemon=True)
        self._reader.start()
        while not self._ready.wait(0.1):
            if self._process.poll() is not None:
                self._reader.join()
                if self._ready.is_set():  # attached, then exited: stop() reports how
                    break
                tail = self._stderr_tail()
                self._stderr.close()
                raise TracingUnavailable(f"bpftrace exited (status {self._process.returncode}) before its probes "
                                         f"attached: {tail}")
            if time.monotonic() - started > self.attach_timeout_s:
                with contextlib.suppress(TracingUnavailable):  # the reason to report is the timeout
                    self.stop()
                raise TracingUnavailable(f"bpftrace did not attach its probes within {self.attach_timeout_s:g} s "
                                         "(raise tracing.attach_timeout on a slow or busy machine)")
        return time.monotonic() - started

    def _read(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        for line in self._process.stdout:
            self._lines.append(line)
            if line.strip() == READY_MARKER:
                self._ready.set()

    def stop(self) -> str:
        """SIGINT (bpftrace prints its maps), bounded wait, SIGKILL the group if stuck; returns stdout.

        Anything but a clean exit 0 raises: a killed or failed bpftrace has not printed
        (all) its maps, and empty histograms must never pass for a quiet device.
        """
        process = self._process
        assert process is not None, "stop() without a successful start()"
        exited_early = process.poll() is not None
        killed = False
        if not exited_early:
            self._signal(signal.SIGINT)
            try:
                process.wait(self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                process.wait()
                killed = True
        if self._reader is not None:
            self._reader.join()
        tail = self._stderr_tail()
        self._stderr.close()
        self._process = None
        if killed:
            raise TracingUnavailable(f"bpftrace did not exit within {self.stop_timeout_s:g} s of SIGINT and was "
                                     "killed before printing its maps")
        if process.returncode != 0:
            when = "during the run" if exited_early else "when stopped"
            raise TracingUnavailable(f"bpftrace failed {when} (status {process.returncode}): {tail}")
        return "".join(self._lines)

    def _signal(self, signum: int) -> None:
        assert self._process is not None
        with contextlib.suppress(ProcessLookupError):  # it may exit between poll and signal
            os.killpg(self._process.pid, signum)

    def _stderr_tail(self) -> str:
        self._stderr.seek(0)
        lines = [line.strip() for line in self._stderr.read().splitlines() if line.strip()]
        useful = [line for line in lines if _NOISE not in line] or lines
        return " | ".join(useful[-4:])[:600] or "no message"


@dataclass
class ActiveTrace:
    """A running trace and what it was started for."""

    process: BpftraceProcess
    preflight: Preflight
    pid: int
    attach_s: float
    started_at: float


def start_trace(pid: int, paths: list[str], *, attach_timeout_s: float) -> ActiveTrace:
    """Preflight, then start bpftrace on ``paths``' disks and ``pid``'s syscalls; returns once attached."""
    checked = preflight(paths)
    process = BpftraceProcess(checked.bpftrace, build_program(pid, checked.devices, syscalls=checked.syscalls),
                              attach_timeout_s=attach_timeout_s)
    attach_s = process.start()
    return ActiveTrace(process, checked, pid, attach_s, time.time())


def bpftrace_version(bpftrace: str) -> str:
    try:
        done = subprocess.run([bpftrace, "--version"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "bpftrace (version unknown)"
    return done.stdout.strip() or "bpftrace (version unknown)"
