"""``transfers.Helpers``, the daemon threads that carry an upload's parts beyond the caller's own: started as
parts need them, never joined at exit, and stopped with a bounded wait that says how many it left busy."""

from __future__ import annotations

import threading
import time

import pytest
from kvbench_s3.transfers import Helpers


def test_threads_start_as_work_needs_them_up_to_the_limit_and_are_daemons() -> None:
    helpers, release = Helpers(3, "kvbench-s3-t"), threading.Event()
    futures = [helpers.submit(release.wait) for _ in range(5)]
    time.sleep(0.2)
    started = [thread for thread in threading.enumerate() if thread.name.startswith("kvbench-s3-t_")]
    assert len(started) == 3 and all(thread.daemon for thread in started)
    release.set()
    for future in futures:
        future.result(timeout=10)  # the two queued ones ran once a thread was free
    assert helpers.stop(5) == 0


def test_stop_waits_at_most_its_time_for_busy_threads_and_cancels_what_is_queued() -> None:
    helpers, release = Helpers(1, "kvbench-s3-stuck"), threading.Event()
    busy = helpers.submit(release.wait)  # a part stuck on a server that does not answer
    queued = helpers.submit(lambda: None)
    time.sleep(0.1)
    began = time.monotonic()
    assert helpers.stop(0.3) == 1  # one abandoned
    assert time.monotonic() - began < 5
    assert queued.cancelled() and not busy.done()
    with pytest.raises(RuntimeError, match="stopped"):
        helpers.submit(lambda: None)
    release.set()
    busy.result(timeout=10)


def test_an_error_in_the_work_reaches_its_future() -> None:
    helpers = Helpers(2, "kvbench-s3-err")

    def fail() -> None:
        raise OSError("reset by peer")

    with pytest.raises(OSError, match="reset by peer"):
        helpers.submit(fail).result(timeout=10)
    assert helpers.stop(5) == 0
