"""Starting and stopping moto's standalone S3 server on 127.0.0.1, as its own process.

boto3 then talks real HTTP to a real S3-protocol server, as against MinIO or
AWS.  A module of its own (not conftest) so tests can import it by a name no
other plugin's tests use.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from testkit import ServerProcess, free_port

HAS_MOTO_SERVER = importlib.util.find_spec("moto") is not None and importlib.util.find_spec("flask") is not None
MISSING = "moto's S3 server is not installed (pip install 'moto[server]')"
#: moto enforces AWS's 5 MiB minimum part size unless told otherwise; small parts keep tests fast.
MIN_PART_SIZE = 1024
#: The fake credentials tests run with (the secrets test uses its own, distinctive ones).
FAKE_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


def require_moto() -> None:
    """Skip the calling test, with the install line, when moto's server is missing."""
    if not HAS_MOTO_SERVER:
        pytest.skip(MISSING)


def fake_aws_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Credentials from the environment only, exactly as in production (the boto3 chain), with the
    user's own AWS config files and the instance metadata service switched off, so a developer's real
    credentials never take part."""
    for name, value in FAKE_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@dataclass
class MotoServer(ServerProcess):
    port: int
    process: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def start_moto(log: Path) -> MotoServer:
    """``python -m moto.server`` on a free port; returns once it answers HTTP."""
    port = free_port()
    env = {**os.environ, "S3_UPLOAD_PART_MIN_SIZE": str(MIN_PART_SIZE)}
    with open(log, "wb") as output:
        process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                   stdout=output, stderr=subprocess.STDOUT, env=env)
    server = MotoServer(port, process)
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"{server.url}/moto-api/", timeout=2):
                return server
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                server.stop()
                raise RuntimeError(f"moto server did not start: {log.read_text()[-2000:]}") from None
            time.sleep(0.1)


# --- fixtures the s3 and nixl tiers' conftests import (one definition for both) ---------------------


@pytest.fixture(autouse=True)
def aws_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Fake credentials and no real AWS config for every test of the importing conftest."""
    fake_aws_environment(monkeypatch, tmp_path)


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    """The shared S3 endpoint (tests use their own buckets or run ids)."""
    require_moto()
    server = start_moto(tmp_path_factory.mktemp("moto") / "moto.log")
    yield server
    server.stop()
