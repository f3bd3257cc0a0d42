"""Registers the ``s3`` backend under the ``kvbench`` entry-point group.

Importing this module must stay cheap and must not import boto3: the core
lists plugins without their heavy dependencies and checks ``requires`` only
when a spec selects the backend.
"""

from __future__ import annotations

from kvbench_core.contracts.plugins import hookimpl


@hookimpl
def kvbench_storage_backends() -> dict[str, type]:
    from kvbench_s3.backend import S3Backend

    return {"s3": S3Backend}
