"""A multipart upload's parts stuck on a frozen server (SIGSTOP) do not hold the process past the tier's
cleanup limit (issue #29): the close waits at most ``cleanup_timeout`` for the helper threads carrying them,
lists the unfinished upload's id as left over, and the process exits without waiting for them.

Before, the helpers were a ``ThreadPoolExecutor``'s, which the interpreter joins at exit: a part's request
ends only at ``read_timeout`` x ``max_attempts`` (here 20 s x 3), so a process whose close had given up after
3 s still exited a minute later.  The child process is the kvbench side; this test holds the server.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from s3_servers import start_moto

pytestmark = [pytest.mark.s3, pytest.mark.slow]

CLEANUP_S, READ_TIMEOUT_S, ATTEMPTS = 3, 20, 3
#: Start-up of the close's own threads and the interpreter's exit; far below a part's 60 s.
SLACK_S = 7

CHILD = textwrap.dedent('''
    import json, sys, threading, time
    from kvbench_core.contracts.backend import BackendContext
    from kvbench_core.contracts.payload import NoisePool
    from kvbench_s3.backend import S3Backend

    PART, PARTS = 8192, 64
    pool = NoisePool(seed=5, pool_bytes=1 << 20, max_piece=1 << 20)
    payload = pool.payload("big", PART * PARTS)
    reached, release = threading.Event(), threading.Event()

    class HeldSource:  # parts 0-7 go out; the 9th part's fill waits until the server is frozen
        size = payload.size
        def fill(self, offset, out):
            if offset >= 8 * PART:
                reached.set()
                release.wait()
            payload.fill(offset, out)

    options = {"endpoint_url": sys.argv[1], "bucket": "kvb-helpers", "create_bucket": True, "region": "us-east-1",
               "addressing_style": "path", "part_size": PART, "max_concurrency": 4, "max_attempts": %(attempts)d,
               "read_timeout": "%(read)ds", "cleanup_timeout": "%(cleanup)ds"}
    backend = S3Backend(options, BackendContext(tier_name="cold", run_id="hung", concurrency=1))
    backend.open()
    threading.Thread(target=backend.write, args=("big", HeldSource()), daemon=True).start()
    reached.wait(60)
    print("READY", flush=True)
    sys.stdin.readline()  # the server is frozen now
    release.set()
    time.sleep(1.0)  # the parts are sent and wait for answers that do not come
    began = time.monotonic()
    backend.close()
    print(json.dumps({"close_s": time.monotonic() - began, "leftovers": backend.leftovers(),
                      "notes": backend.notes()}), flush=True)
''') % {"attempts": ATTEMPTS, "read": READ_TIMEOUT_S, "cleanup": CLEANUP_S}


def test_parts_stuck_on_a_frozen_server_hold_neither_the_close_nor_the_exit(
        tmp_path: Path, aws_environment: None) -> None:
    server = start_moto(tmp_path / "moto.log")
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    child = subprocess.Popen([sys.executable, "-c", CHILD, server.url], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == "READY", child.stderr.read() if child.stderr else ""
        os.kill(server.process.pid, signal.SIGSTOP)
        frozen = time.monotonic()
        child.stdin.write("frozen\n")
        child.stdin.flush()
        out, err = child.communicate(timeout=READ_TIMEOUT_S * ATTEMPTS + 60)
        took = time.monotonic() - frozen
    finally:
        os.kill(server.process.pid, signal.SIGCONT)
        if child.poll() is None:
            child.kill()
        server.stop()
    assert child.returncode == 0, err[-3000:]
    report = json.loads(out.strip().splitlines()[-1])
    assert report["close_s"] < CLEANUP_S + 2, report
    assert took < 1.0 + CLEANUP_S + SLACK_S, f"the process ended {took:.1f} s after the freeze"
    uploads = report["leftovers"]["uploads"]
    assert [upload["key"] for upload in uploads] == ["kvbench/hung/big"] and uploads[0]["upload_id"], report
    assert any("could not clean up" in note and "1 unfinished multipart uploads" in note for note in report["notes"])
    assert any("abandoned" in note for note in report["notes"]), report["notes"]
