"""The s3 tier's options: their schema (defaults live here once) and the sizes derived from them.

Secrets have no place among them: ``propertyNames`` refuses any option whose
name looks like a credential, so a spec can only name a ``profile`` of the
boto3 chain.  The nixl tier's OBJ options reuse these definitions.
"""

from __future__ import annotations

from typing import Any

from kvbench_core.contracts.units import duration_schema, size_schema

#: Largest piece handed to ``source.fill`` / ``sink.consume`` (parts may be larger).
PIECE = 16 << 20

_SIZE = size_schema("a size such as 8MiB or 8388608")
_DURATION = duration_schema("a duration such as 10s or 1m", exclusive=True)

OPTIONS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["bucket"],
    "propertyNames": {
        "not": {"pattern": "(?i)(secret|access_key|session_token|password|credential)"},
        "description": "credentials come from the boto3 chain (environment, profile, instance role), "
                       "never from the spec",
    },
    "properties": {
        "bucket": {"type": "string", "pattern": "^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$",
                   "description": "an S3 bucket name (3-63 lowercase letters, digits, dots, hyphens)"},
        "endpoint_url": {"type": "string", "pattern": r"^https?://[^/@\s]+(/[^@\s]*)?$",  # no user:secret@
                         "description": "http(s)://host[:port] of an S3-compatible service, without user info"},
        "region": {"type": "string", "minLength": 1},
        "profile": {"type": "string", "minLength": 1, "description": "a profile of the AWS config files"},
        "addressing_style": {"enum": ["auto", "path", "virtual"], "default": "auto"},
        "create_bucket": {"type": "boolean", "default": False,
                          "description": "create the bucket when it does not exist (it is never deleted)"},
        "prefix": {"type": "string", "pattern": "^(?!/)", "default": "",
                   "description": "key prefix in front of kvbench/<run_id>/, e.g. team-a/"},
        "part_size": {**_SIZE, "default": "8MiB",
                      "description": "multipart part and ranged-GET size (AWS needs >= 5MiB except the last)"},
        "max_concurrency": {"type": "integer", "minimum": 1, "maximum": 64, "default": 4,
                            "description": "parts of one entry in flight at once"},
        "max_attempts": {"type": "integer", "minimum": 1, "maximum": 20, "default": 3,
                         "description": "botocore attempts per request (standard retry mode)"},
        "connect_timeout": {**_DURATION, "default": "10s"},
        "read_timeout": {**_DURATION, "default": "60s"},
        "complete_timeout": {**_DURATION, "default": "15m",
                             "description": "how long CompleteMultipartUpload may take (the server assembles "
                                            "the object meanwhile: minutes for a large one); one attempt"},
        "cleanup_timeout": {**_DURATION, "default": "30s",
                            "description": "the most the close's cleanup waits for the server: what is left "
                                           "then is listed in the result and removed by the next run on the "
                                           "bucket, or by kvbench clean SPEC"},
        "checksum": {"enum": ["when_supported", "when_required"], "default": "when_supported",
                     "description": "botocore request checksums; some S3-compatible stores need when_required"},
    },
}
