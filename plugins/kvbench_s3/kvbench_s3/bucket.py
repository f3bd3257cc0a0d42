"""The bucket's lifecycle: made sure of at open (created only when asked), emptied of the run's keys at close.

kvbench owns only what it wrote: the objects and unfinished multipart uploads
under ``<prefix>kvbench/<run_id>/``.  A bucket it created is never deleted.
"""

from __future__ import annotations

from typing import Any

from kvbench_core.contracts.errors import BackendUnavailable
from kvbench_s3.client import MISSING_BUCKET, S3Client, error_code

#: S3 accepts at most this many keys per DeleteObjects request.
DELETE_BATCH = 1000


def ensure_bucket(client: S3Client, bucket: str, *, create: bool, where: str, endpoint: str) -> None:
    """Check the bucket exists; create it when it does not and ``create`` allows it."""
    from botocore.exceptions import ClientError

    try:
        client.call("head_bucket", Bucket=bucket)
        return
    except ClientError as error:
        if error_code(error) not in MISSING_BUCKET:
            raise
    if not create:
        raise BackendUnavailable(f"{where}: bucket '{bucket}' does not exist at {endpoint}; "
                                 "create it or set create_bucket: true")
    params: dict[str, Any] = {"Bucket": bucket}
    region = client.client.meta.region_name
    if region and region != "us-east-1":  # us-east-1 is the one region that rejects a LocationConstraint
        params["CreateBucketConfiguration"] = {"LocationConstraint": region}
    client.call("create_bucket", **params)


def delete_prefix(client: S3Client, bucket: str, prefix: str, tier_name: str) -> None:
    """Delete every object under ``prefix`` and abort its unfinished multipart uploads."""
    listing: dict[str, Any] = {"IsTruncated": True}
    while listing.get("IsTruncated"):
        more = {"ContinuationToken": listing["NextContinuationToken"]} if "NextContinuationToken" in listing else {}
        listing, _, _ = client.call("list_objects_v2", Bucket=bucket, Prefix=prefix, MaxKeys=DELETE_BATCH, **more)
        objects = [{"Key": item["Key"]} for item in listing.get("Contents", [])]
        if objects:
            reply, _, _ = client.call("delete_objects", Bucket=bucket, Delete={"Objects": objects, "Quiet": True})
            if reply.get("Errors"):
                first = reply["Errors"][0]
                raise OSError(f"tier {tier_name!r}: could not delete {len(reply['Errors'])} objects "
                              f"under {prefix!r} (first: {first.get('Key')}: {first.get('Code')})")
    uploads: dict[str, Any] = {"IsTruncated": True}
    while uploads.get("IsTruncated"):
        more = {"KeyMarker": uploads["NextKeyMarker"], "UploadIdMarker": uploads["NextUploadIdMarker"]
                } if "NextKeyMarker" in uploads else {}
        uploads, _, _ = client.call("list_multipart_uploads", Bucket=bucket, Prefix=prefix, **more)
        for upload in uploads.get("Uploads", []):
            client.call("abort_multipart_upload", Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"])
