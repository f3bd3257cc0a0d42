"""No credential ever appears in what the s3 tier produces: describe(), counters(), errors, logs.

The credentials come from the environment (the boto3 chain), with botocore's
DEBUG logging switched on, because botocore logs request headers (the session
token, the access key id) there.
"""

from __future__ import annotations

import json
import logging
import traceback
from collections.abc import Callable
from typing import Any

import pytest
from kvbench_s3.backend import S3Backend
from s3_servers import free_port

from kvbench_core.contracts.backend import DISCARD, BackendContext
from kvbench_core.contracts.errors import BackendUnavailable
from kvbench_core.contracts.payload import NoisePool

pytestmark = pytest.mark.s3

SECRETS = {
    "AWS_ACCESS_KEY_ID": "AKIAKVBENCHTEST00042",
    "AWS_SECRET_ACCESS_KEY": "kvbench/Secret+Access/Key0123456789abcdefgh",
    "AWS_SESSION_TOKEN": "kvbenchSessionToken/FwoGZXIvYXdzEJr//////////wEaDKVBENCH",
}


def _texts_of(error: BaseException) -> list[str]:
    return ["".join(traceback.format_exception(error)), repr(error.args)]


def test_no_credential_reaches_describe_counters_errors_or_logs(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, s3_options: dict[str, Any],
        open_backend: Callable[..., S3Backend], pool: NoisePool) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    caplog.set_level(logging.DEBUG)
    produced: list[str] = []

    backend = open_backend({**s3_options, "max_concurrency": 2})
    backend.write("small", pool.payload("small", 100))
    backend.write("large", pool.payload("large", 3 * 4096 + 1))
    backend.read("large", 3 * 4096 + 1, DISCARD)
    backend.read_range("small", 10, memoryview(bytearray(10)))
    backend.delete("small")
    with pytest.raises(KeyError) as missing:
        backend.read("small", 100, DISCARD)
    produced += [*_texts_of(missing.value), json.dumps(backend.describe()), json.dumps(backend.counters())]
    backend.close()

    for options in ({**s3_options, "create_bucket": False, "bucket": "kvb-missing-bucket"},
                    {**s3_options, "endpoint_url": f"http://127.0.0.1:{free_port()}"}):
        with pytest.raises(BackendUnavailable) as unavailable:
            S3Backend(options, BackendContext(tier_name="s3", run_id="r")).open()
        produced += _texts_of(unavailable.value)

    sdk_records = [record for record in caplog.records if record.name.startswith("botocore")]
    assert any("Sending http request" in record.getMessage() for record in sdk_records), "no SDK debug logs seen"
    produced += [record.getMessage() for record in caplog.records] + [caplog.text]
    leaks = {name: [text[:200] for text in produced if secret in text] for name, secret in SECRETS.items()}
    assert leaks == {name: [] for name in SECRETS}
