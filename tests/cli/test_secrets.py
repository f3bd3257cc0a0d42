"""No credential ever reaches anything kvbench writes or prints.

A real run through a DRAM tier, a password-protected Redis server and an S3
endpoint (moto), with the S3 keys in the environment, the Redis password in
the variable ``password_env`` names, and tokens in URLs in the spec's free-text
fields; every output (stdout, stderr, the result JSON, the xlsx workbook
unpacked, the png plots with their text chunks, the I/O log, anything else in
the output directory) is then searched for every secret string.  Then the same
for the error paths: a wrong password, a spec that puts a password in a URL.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import subprocess
import sys
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from tiny_spec import history_spec

from kvbench_core.cli import main

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.redis, pytest.mark.s3]

#: Distinctive values: found anywhere, in any encoding we can undo, they are a leak.
SECRETS = {
    "aws access key id": "KVBAKID7Q4J9X2SECRETID",
    "aws secret key": "kvbSecretKey/0xDEADbeef+moreSECRET42",
    "aws session token": "kvbSessionTOKEN//FwoGZXIvYXdzSECRETtoken",
    "redis password": "kvbRedisPassw0rd-SECRET-9931",
    "url password": "kvbUrlPassSECRET77",
    "url query token": "kvbQueryTokenSECRET88",
    "url api key": "kvbApiKeySECRET99",
}
REDIS_PASSWORD_ENV = "KVB_TEST_REDIS_PASSWORD"


def environment(tmp_path: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("AWS_")}
    env.update({
        "AWS_ACCESS_KEY_ID": SECRETS["aws access key id"],
        "AWS_SECRET_ACCESS_KEY": SECRETS["aws secret key"],
        "AWS_SESSION_TOKEN": SECRETS["aws session token"],
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": str(tmp_path / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no-aws-credentials"),
        REDIS_PASSWORD_ENV: SECRETS["redis password"],
    })
    return env


@pytest.fixture(scope="module")
def redis_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    from redis_servers import require_redis, start_redis

    require_redis()
    server = start_redis(tmp_path_factory.mktemp("redis"), "--requirepass", SECRETS["redis password"],
                         client_kwargs={"password": SECRETS["redis password"]})
    yield server.port
    server.stop()


def secret_spec(tmp_path: Path, redis_port: int, s3_url: str) -> dict[str, Any]:
    dashboard = (f"https://kvbench:{SECRETS['url password']}@grafana.example/d/kv"
                 f"?token={SECRETS['url query token']}&api_key={SECRETS['url api key']}")
    tiers = [
        {"name": "redis", "backend": "redis", "capacity": "2MiB",
         "options": {"host": "127.0.0.1", "port": redis_port, "password_env": REDIS_PASSWORD_ENV}},
        {"name": "s3", "backend": "s3", "capacity": "256MiB",
         "options": {"endpoint_url": s3_url, "bucket": "kvb-secrets", "create_bucket": True,
                     "addressing_style": "path", "part_size": "512KiB", "max_attempts": 1}},
    ]
    output = {"directory": str(tmp_path / "out"), "formats": ["json", "xlsx", "png", "html"], "progress": "on",
              "interval": 0.2, "io_log": str(tmp_path / "out" / "io.jsonl")}
    return history_spec(
        tiers, users=3, name="secrets", seed=9, output=output, description=f"dashboard: {dashboard}",
        declaration={"network": {"fabric": f"RoCE, monitored at {dashboard}"},
                     "notes": f"metrics pushed to https://push.example/?password={SECRETS['url password']}"})


def kvbench(tmp_path: Path, spec: dict[str, Any], *extra: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return subprocess.run([sys.executable, "-m", "kvbench_core.cli", "run", str(path), *extra],
                          capture_output=True, text=True, env=environment(tmp_path), cwd=tmp_path, timeout=600)


def readable_forms(path: Path) -> list[tuple[str, bytes]]:
    """A file's bytes, and whatever it holds compressed: the members of a zip (xlsx), the zlib-compressed
    text chunks of a png."""
    data = path.read_bytes()
    forms = [(str(path), data)]
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            forms += [(f"{path}!{name}", archive.read(name)) for name in archive.namelist()]
    if data.startswith(b"\x89PNG"):
        at = 8
        while at + 8 <= len(data):
            length = int.from_bytes(data[at:at + 4], "big")
            kind, body = data[at + 4:at + 8], data[at + 8:at + 8 + length]
            if kind in (b"zTXt", b"iTXt"):
                text = body.split(b"\x00", 1)[1]
                for start in range(len(text)):  # past the compression flag/method bytes
                    try:
                        forms.append((f"{path}!{kind.decode()}", zlib.decompress(text[start:])))
                        break
                    except zlib.error:
                        continue
            at += 12 + length
    return forms


def leaks(texts: list[tuple[str, bytes]]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for what, secret in SECRETS.items():
        needles = {secret.encode(), secret.encode("utf-16-le"), secret.replace("/", "%2F").encode()}
        hits = [where for where, data in texts if any(needle in data for needle in needles)]
        if hits:
            found[what] = hits
    return found


def outputs(tmp_path: Path, done: subprocess.CompletedProcess[str]) -> list[tuple[str, bytes]]:
    texts = [("stdout", done.stdout.encode()), ("stderr", done.stderr.encode())]
    for path in sorted((tmp_path / "out").rglob("*")):
        if path.is_file():
            texts += readable_forms(path)
    return texts


def test_a_run_with_credentials_leaves_them_in_no_output(tmp_path: Path, redis_port: int, s3_url: str) -> None:
    done = kvbench(tmp_path, secret_spec(tmp_path, redis_port, s3_url))
    assert done.returncode == 0, done.stderr

    files = sorted(path.name for path in (tmp_path / "out").iterdir())
    assert any(name.endswith(".json") for name in files)
    assert any(name.endswith(".xlsx") for name in files) and any(name.endswith(".png") for name in files), files
    assert any(name.endswith(".html") for name in files), files
    assert "io.jsonl" in files
    texts = outputs(tmp_path, done)
    assert leaks(texts) == {}
    # The run did use them: the password opened Redis, the keys signed S3 requests, both stored entries.
    raw = next(data for where, data in texts if where.endswith(".json") and "!" not in where)
    result = json.loads(raw)
    tiers = result["metrics"]["tiers"]
    assert tiers["redis"]["write"]["ops"] > 0 and tiers["s3"]["write"]["ops"] > 0
    assert result["metrics"]["tiers"]["redis"]["describe"]["login"] == "password"
    assert "***@grafana.example" in result["spec"]["as_written"]["description"]  # there, and masked


def test_error_messages_carry_no_credentials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, redis_port: int,
                                             s3_url: str) -> None:
    """In-process (the same code prints the error): credentials in URLs refused by the schema, and a
    password the server refuses."""
    for name, value in environment(tmp_path).items():
        monkeypatch.setenv(name, value)
    spec = secret_spec(tmp_path, redis_port, s3_url)
    spec["output"]["formats"] = ["json"]
    texts: list[tuple[str, bytes]] = []

    def run(bad: dict[str, Any], expected_code: int) -> None:
        path = tmp_path / "spec.yaml"
        path.write_text(yaml.safe_dump(bad, sort_keys=False))
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["run", str(path), "--quiet"])
        assert code == expected_code, err.getvalue()
        texts.extend(outputs(tmp_path, subprocess.CompletedProcess([], code, out.getvalue(), err.getvalue())))

    # A password in a Redis URL, and user info in the S3 endpoint: refused by the schema, quoted masked.
    for tier, options in ((1, {"url": f"redis://admin:{SECRETS['url password']}@127.0.0.1:{redis_port}/0"}),
                          (2, {**spec["cache"]["tiers"][2]["options"],
                               "endpoint_url": s3_url.replace("://", f"://{SECRETS['aws access key id']}:"
                                                                     f"{SECRETS['aws secret key']}@")})):
        bad = copy.deepcopy(spec)
        bad["cache"]["tiers"][tier]["options"] = options
        run(bad, 2)

    # The wrong password: the server refuses it, the message names the endpoint, not the password.
    wrong = copy.deepcopy(spec)
    wrong["cache"]["tiers"][1]["options"]["password_env"] = "KVB_TEST_WRONG_PASSWORD"
    monkeypatch.setenv("KVB_TEST_WRONG_PASSWORD", SECRETS["url query token"])  # a secret of its own
    run(wrong, 3)
    assert any(b"authentication" in data for where, data in texts if where == "stderr")
    assert leaks(texts) == {}


#: Planted in every string option of every backend (issue 19): credential-shaped, in no list of known fields.
PLANTED = "Zq7KvbPlantedSECRET4242x"


def _string_options(cls: Any) -> list[str]:
    properties = (getattr(cls, "options_schema", {}) or {}).get("properties", {})
    return sorted(name for name, schema in properties.items()
                  if schema.get("type") == "string" or any(alt.get("type") == "string"
                                                           for alt in schema.get("oneOf", [])))


def test_a_secret_planted_in_any_option_of_any_backend_reaches_no_output(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, redis_port: int, s3_url: str) -> None:
    """A password typed where an environment variable's name belongs (``password_env: <secret>``), in a
    Redis ``host`` (``default:<secret>@127.0.0.1``), or given with ``--set``, was echoed in the error, stdout,
    stderr and the result.  Every string option of every installed backend gets the secret, through
    ``--set``; whatever the run does with it (refused, unreachable, or a run), no output carries it."""
    from kvbench_core.contracts.plugins import registry

    for name, value in environment(tmp_path).items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    needed = {"nvme": {"path": str(tmp_path / "tier"), "fsync": False, "drop_cache": False},
              "gds": {"path": str(tmp_path / "gds")},
              "redis": {"host": "127.0.0.1", "port": redis_port},
              "s3": {"endpoint_url": s3_url, "bucket": "kvb-planted", "create_bucket": True,
                     "addressing_style": "path", "max_attempts": 1}}
    texts: list[tuple[str, bytes]] = []
    tried = 0
    for backend, cls in sorted(registry("backend").items()):
        for option in _string_options(cls):
            planted = f"default:{PLANTED}@127.0.0.1" if option in ("host", "endpoint_url", "url") else PLANTED
            spec = history_spec([{"name": "t", "backend": backend, "capacity": "64MiB",
                                  "options": needed.get(backend, {})}], name="planted",
                                output={"directory": str(tmp_path / "out"), "formats": ["json", "xlsx", "png"],
                                        "progress": "on", "interval": 0.2})
            path = tmp_path / "spec.yaml"
            path.write_text(yaml.safe_dump(spec, sort_keys=False))
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = main(["run", str(path), "--quiet", "--set", f"cache.tiers[1].options.{option}={planted}"])
            assert "Traceback" not in err.getvalue()
            texts.extend(outputs(tmp_path, subprocess.CompletedProcess([], code, out.getvalue(), err.getvalue())))
            tried += 1
    assert tried >= 15  # nvme, redis and s3 alone have that many string options
    hits = sorted({where for where, data in texts if PLANTED.encode() in data or
                   PLANTED.encode("utf-16-le") in data})
    assert hits == []
