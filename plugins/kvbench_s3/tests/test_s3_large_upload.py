"""Large multipart uploads (issue 19): ``specs/nvme-s3-cold.yaml`` stored 0 bytes on S3 because its
1.6 GB uploads ended in a server 500, ``seek of closed file``.

The cause, found in moto's log: CompleteMultipartUpload of a large object takes the server longer than
the 60 s read timeout of a part; botocore retried it, and the retry read the parts the first Complete
(still running) had just disposed.  moto's 500 is a server race, but kvbench's side was the trigger:
Complete now has its own long timeout (``complete_timeout``, default 15 min) and a single attempt.
The test gives parts a read timeout far shorter than moto needs to assemble the object, which failed
every time before the fix.
"""

from __future__ import annotations

from typing import Any

import pytest

from kvbench_core.contracts.payload import NoisePool

pytestmark = [pytest.mark.s3, pytest.mark.slow]

LARGE = 256 << 20  # a few hundred MB: 32 parts of 8 MiB, assembled by moto in well over a second


def test_a_large_multipart_upload_survives_a_complete_slower_than_a_parts_timeout(
        open_backend: Any, s3_options: dict[str, Any]) -> None:
    pool = NoisePool(seed=13, pool_bytes=32 << 20, max_piece=16 << 20)
    backend = open_backend({**s3_options, "part_size": "8MiB", "read_timeout": "300ms", "max_attempts": 3})
    timing = backend.write("big", pool.payload("big", LARGE))
    assert timing.nbytes == LARGE
    counters = backend.counters()["requests"]
    assert counters["complete_multipart_upload"] == 1 and counters["upload_part"] >= LARGE // (8 << 20)
    head = backend.s3.client.head_object(Bucket=backend.bucket, Key=backend.object_name("big"))
    assert head["ContentLength"] == LARGE
