"""The s3 tier against moto's S3 server over real HTTP: requests issued, parts, cleanup, failures, options."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import boto3
import numpy as np
import pytest
from botocore.exceptions import BotoCoreError
from kvbench_s3.backend import PIECE, S3Backend
from s3_servers import MotoServer, free_port

from kvbench_core.contracts.backend import DISCARD, BackendContext, StorageBackend
from kvbench_core.contracts.conformance import BackendConformance
from kvbench_core.contracts.errors import BackendUnavailable, SpecError
from kvbench_core.contracts.payload import NoisePool
from kvbench_core.contracts.plugins import registry
from kvbench_core.engine.run.factory import create_backend

pytestmark = pytest.mark.s3

PART = 4096
Open = Callable[..., S3Backend]
Verify = Callable[[S3Backend, str, int], None]


def raw_client(server: MotoServer) -> Any:
    return boto3.client("s3", endpoint_url=server.url, region_name="us-east-1")


def object_keys(server: MotoServer, bucket: str, prefix: str = "") -> list[str]:
    listing = raw_client(server).list_objects_v2(Bucket=bucket, Prefix=prefix)
    return sorted(item["Key"] for item in listing.get("Contents", []))


class TestS3Conformance(BackendConformance):
    """The core's conformance suite through the real selection path: 8 KiB parts, 4 in flight."""

    backend_name = "s3"

    @pytest.fixture(autouse=True)
    def _server(self, moto_server: MotoServer) -> None:
        self.server = moto_server

    def options(self, **extra: Any) -> dict[str, Any]:
        return {"endpoint_url": self.server.url, "bucket": "kvb-conformance", "create_bucket": True,
                "addressing_style": "path", "part_size": "8KiB", "max_concurrency": 4, **extra}

    def make_backend(self, context: BackendContext, tmp_path: Path) -> StorageBackend:
        return create_backend({"name": "s3", "backend": "s3", "options": self.options()}, context)

    def remaining_entries(self, backend: StorageBackend) -> Iterable[str]:
        return object_keys(self.server, "kvb-conformance", backend.key_prefix)

    def make_dead_backend(self, context: BackendContext, tmp_path: Path) -> StorageBackend:
        options = self.options(endpoint_url=f"http://127.0.0.1:{free_port()}", max_attempts=1)
        return create_backend({"name": "s3", "backend": "s3", "options": options}, context)


@pytest.mark.parametrize("max_concurrency", [1, 3])
def test_small_entries_are_one_put_and_large_ones_a_multipart_upload(
        max_concurrency: int, s3_options: dict[str, Any], open_backend: Open, pool: NoisePool,
        verify: Verify) -> None:
    backend = open_backend({**s3_options, "max_concurrency": max_concurrency})
    before = backend.counters()["requests"]
    backend.write("small", pool.payload("small", PART))
    large = backend.write("large", pool.payload("large", 4 * PART + 1))
    verify(backend, "small", PART)
    verify(backend, "large", 4 * PART + 1)
    after = backend.counters()
    issued = {op: count - before.get(op, 0) for op, count in after["requests"].items() if count != before.get(op, 0)}
    assert issued == {"put_object": 1, "create_multipart_upload": 1, "upload_part": 5,
                      "complete_multipart_upload": 1, "get_object": 6}
    assert after["http_attempts"] == sum(after["requests"].values())  # nothing was retried
    assert large.commands == 5 and large.nbytes == 4 * PART + 1  # the parts: Create/Complete move no payload
    assert large.host > 0 and large.device > 0 and large.host + large.device <= large.total


def test_an_empty_entry_and_one_of_many_parts_round_trip(s3_options: dict[str, Any], open_backend: Open,
                                                         pool: NoisePool, verify: Verify) -> None:
    backend = open_backend({**s3_options, "max_concurrency": 4})
    for size in (0, 9 * PART + 3):
        backend.write(f"e{size}", pool.payload(f"e{size}", size))
        verify(backend, f"e{size}", size)


def test_parts_larger_than_a_piece_are_filled_and_consumed_in_pieces(s3_options: dict[str, Any]) -> None:
    backend = S3Backend({**s3_options, "part_size": "64MiB"}, BackendContext(tier_name="s3", run_id="r"))
    assert (backend.part_size, backend.transfer_size) == (64 << 20, PIECE)


def test_missing_entries_are_key_errors_and_deletes_are_idempotent(
        s3_options: dict[str, Any], open_backend: Open, pool: NoisePool) -> None:
    backend = open_backend(s3_options)
    backend.write("entry", pool.payload("entry", 2 * PART))
    backend.delete("entry")
    backend.delete("entry")
    backend.delete("never-written")
    with pytest.raises(KeyError, match="no entry 'entry' in tier 's3'"):
        backend.read("entry", 2 * PART, DISCARD)
    with pytest.raises(KeyError):
        backend.read_range("entry", 0, memoryview(bytearray(10)))


def test_read_range_is_one_ranged_get(s3_options: dict[str, Any], open_backend: Open, pool: NoisePool) -> None:
    backend = open_backend(s3_options)
    size = 3 * PART + 100
    backend.write("entry", pool.payload("entry", size))
    expected = np.empty(size, dtype=np.uint8)
    pool.payload("entry", size).fill(0, memoryview(expected))
    gets = backend.counters()["requests"].get("get_object", 0)
    out = bytearray(2 * PART)
    backend.read_range("entry", PART - 7, memoryview(out))
    assert bytes(out) == expected[PART - 7:3 * PART - 7].tobytes()
    assert backend.counters()["requests"]["get_object"] == gets + 1


def test_a_size_mismatch_is_an_error_not_silent_short_data(
        s3_options: dict[str, Any], open_backend: Open, pool: NoisePool) -> None:
    backend = open_backend(s3_options)
    backend.write("entry", pool.payload("entry", 100))
    with pytest.raises(OSError, match="returned 100 bytes, expected 200"):
        backend.read("entry", 200, DISCARD)


def test_close_deletes_only_this_runs_objects_and_aborts_its_unfinished_uploads(
        moto_server: MotoServer, s3_options: dict[str, Any], open_backend: Open, pool: NoisePool) -> None:
    bucket, client = s3_options["bucket"], raw_client(moto_server)
    backend = open_backend({**s3_options, "prefix": "team-a/"}, run_id="run1")
    foreign = ["team-a/kvbench/run10/e0", "team-a/kvbench/other/e0", "kvbench/run1/e0", "team-a/notes.txt"]
    for key in foreign:
        client.put_object(Bucket=bucket, Key=key, Body=b"theirs")
    theirs = client.create_multipart_upload(Bucket=bucket, Key="team-a/kvbench/other/upload")["UploadId"]
    ours = client.create_multipart_upload(Bucket=bucket, Key="team-a/kvbench/run1/crashed")["UploadId"]
    for index in range(3):
        backend.write(f"e{index}", pool.payload(f"e{index}", (index + 1) * PART))
    assert object_keys(moto_server, bucket, "team-a/kvbench/run1/") == [f"team-a/kvbench/run1/e{i}" for i in range(3)]
    backend.close()
    assert object_keys(moto_server, bucket) == sorted(foreign)
    uploads = {upload["UploadId"] for upload in client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])}
    assert theirs in uploads and ours not in uploads


def test_keep_leaves_the_objects_for_inspection(moto_server: MotoServer, s3_options: dict[str, Any],
                                                open_backend: Open, pool: NoisePool) -> None:
    backend = open_backend(s3_options, keep=True)
    backend.write("kept", pool.payload("kept", 10))
    backend.close()
    assert object_keys(moto_server, s3_options["bucket"]) == [f"{backend.key_prefix}kept"]


def test_what_an_earlier_run_recorded_as_left_is_removed_at_open_and_said(
        moto_server: MotoServer, s3_options: dict[str, Any], open_backend: Open, pool: NoisePool, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A run whose cleanup could not reach the bucket recorded its objects (``ServerCleanup``); the next tier
    opened on that bucket removes them, drops the record and says so; a prefix not kvbench's stays."""
    from kvbench_core.contracts.leftovers import Leftovers, pending, record

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    bucket = s3_options["bucket"]
    dead = open_backend(s3_options, keep=True)
    dead.write("lost", pool.payload("lost", 3 * PART))
    dead.close()
    raw_client(moto_server).put_object(Bucket=bucket, Key="mine/notes.txt", Body=b"theirs")
    place = f"s3 {moto_server.url} {bucket}/"
    record(Leftovers(place, dead.context.run_id, {"prefix": dead.key_prefix, "objects": [f"{dead.key_prefix}lost"],
                                                   "uploads": []}))
    record(Leftovers(place, "user", {"prefix": "mine/", "objects": ["mine/notes.txt"]}))
    backend = open_backend(s3_options)
    assert object_keys(moto_server, bucket) == ["mine/notes.txt"]
    assert [left.run_id for left in pending(place)] == ["user"]
    assert backend.notes() == [f"tier 's3' (s3): removed what run {dead.context.run_id} left under "
                               f"s3://{bucket}/{dead.key_prefix} (1 objects and uploads listed)"]


def test_an_endpoint_that_is_down_is_unavailable_naming_it(s3_options: dict[str, Any]) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    backend = S3Backend({**s3_options, "endpoint_url": url}, BackendContext(tier_name="cold", run_id="r"))
    with pytest.raises(BackendUnavailable, match=f"tier 'cold' \\(s3\\): cannot reach {re.escape(url)}"):
        backend.open()


def test_a_missing_bucket_is_a_clear_error_unless_create_bucket(
        moto_server: MotoServer, s3_options: dict[str, Any], open_backend: Open) -> None:
    options = {**s3_options, "create_bucket": False}
    with pytest.raises(BackendUnavailable, match=f"bucket '{options['bucket']}' does not exist at "
                                                 f"{re.escape(moto_server.url)}; create it or set create_bucket"):
        open_backend(options)
    open_backend({**options, "create_bucket": True})
    raw_client(moto_server).head_bucket(Bucket=options["bucket"])
    open_backend(options)  # now it exists


@pytest.mark.slow  # starts a second moto server
def test_a_server_killed_mid_use_fails_the_operation(
        start_server: Callable[[], MotoServer], s3_options: dict[str, Any], open_backend: Open,
        pool: NoisePool) -> None:
    server = start_server()
    backend = open_backend({**s3_options, "endpoint_url": server.url, "connect_timeout": "2s"})
    backend.write("before", pool.payload("before", 2 * PART))
    server.kill()
    with pytest.raises(BotoCoreError):
        backend.write("after", pool.payload("after", 2 * PART))
    with pytest.raises(BotoCoreError):
        backend.read("before", 2 * PART, DISCARD)
    backend.context.keep = True  # the endpoint is gone: nothing to clean up
    backend.close()


def test_describe_declares_the_access_path(moto_server: MotoServer, s3_options: dict[str, Any],
                                           open_backend: Open) -> None:
    info = open_backend({**s3_options, "max_concurrency": 8}, run_id="run7").describe()
    assert (info["endpoint"], info["bucket"], info["key_prefix"], info["part_size"], info["max_concurrency"]) == (
        moto_server.url, s3_options["bucket"], "kvbench/run7/", PART, 8)
    assert info["identity_source"] == "env" and info["addressing_style"] == "path"
    assert "multipart" in info["access_mechanism"] and set(info["sdk"]) == {"boto3", "botocore"}


def test_capacity_is_unknown(s3_options: dict[str, Any], open_backend: Open) -> None:
    assert open_backend(s3_options).capacity_bytes() is None


def tier(**options: Any) -> dict[str, Any]:
    return {"name": "s3", "backend": "s3", "options": options}


@pytest.mark.parametrize(("options", "message"), [
    ({"bucket": "b-ok", "aws_secret_access_key": "x"},
     "tier.options: credentials come from the boto3 chain (environment, profile, instance role), never from the spec"),
    ({"bucket": "b-ok", "session_token": "x"}, "credentials come from the boto3 chain"),
    ({}, "tier.options.bucket: required field is missing"),
    ({"bucket": "Bad_Bucket"}, "tier.options.bucket: expected an S3 bucket name"),
    ({"bucket": "b-ok", "endpoint_url": "http://key:secret@minio:9000"}, "tier.options.endpoint_url: expected"),
    ({"bucket": "b-ok", "part_size": "lots"}, "tier.options.part_size"),
    ({"bucket": "b-ok", "max_concurrency": 0}, "tier.options.max_concurrency: expected a value >= 1"),
    ({"bucket": "b-ok", "addressing_style": "sideways"}, "tier.options.addressing_style: expected one of"),
])
def test_bad_options_are_spec_errors(options: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match=re.escape(message)):
        create_backend(tier(**options), BackendContext(tier_name="s3", run_id="r"))


def test_an_unknown_profile_is_unavailable(s3_options: dict[str, Any]) -> None:
    backend = S3Backend({**s3_options, "profile": "nope"}, BackendContext(tier_name="s3", run_id="r"))
    with pytest.raises(BackendUnavailable, match="profile \\(nope\\) could not be found"):
        backend.open()


def test_the_plugin_is_found_through_its_entry_point_without_importing_boto3() -> None:
    assert registry("backend")["s3"] is S3Backend
    probe = ("import sys, kvbench_s3.plugin as p; p.kvbench_storage_backends(); "
             "assert not {'boto3', 'botocore'} & set(sys.modules), 'boto3 imported at selection'")
    subprocess.run([sys.executable, "-c", probe], check=True)


@pytest.mark.slow
def test_a_run_with_multipart_entries_holds_its_command_invariants(s3_options: dict[str, Any],
                                                                   tmp_path: Path) -> None:
    """Entries of several parts (issue #28 §5): every run printed 'INVARIANT VIOLATED: command_count.s3.write'
    because Create/Complete were counted as commands the I/O log never saw; the commands are the parts."""
    from kvbench_core.engine.run.runner import Runner
    from kvbench_core.results.result import build_result
    from kvbench_core.runspec.loader import resolve, validate
    from kvbench_core.runspec.plan import plan_run

    raw = {"version": 1, "name": "s3-parts", "seed": 7, "model": {"name": "tiny-1b"}, "requests": 6,
           "workload": {"users": 2, "max_inflight": 2,
                        "options": {"profiles": {"chatbot": {"context": [16, 64], "generate": [1, 8],
                                                             "think_s": [0, 0]}},
                                    "profile_mix": {"chatbot": 1}}},
           "cache": {"tiers": [{"name": "s3", "backend": "s3", "capacity": "256MiB",
                                "options": {**s3_options, "part_size": "256KiB"}}]},
           "output": {"progress": "off", "directory": str(tmp_path / "out")}}
    validate(raw)
    state = Runner(plan_run(resolve(raw, str(tmp_path)))).run()
    assert state.crash is None, state.stop_reason
    result = build_result(state, raw)
    write = result["metrics"]["tiers"]["s3"]["write"]
    assert write["commands"] > write["ops"] > 0  # multipart: several parts per entry
    names = {item["name"]: item["passed"] for item in result["checks"]["items"]}
    assert names["command_count.s3.write"] and names["command_bytes.s3.write"], result["checks"]["violations"]
    assert result["checks"]["passed"], result["checks"]["violations"]
