"""Helpers the nixl tier's test modules share (a module of its own: conftest is not imported by name)."""

from __future__ import annotations

import ctypes
from collections.abc import Callable

import pytest
from kvbench_nixl.backend import NixlBackend
from kvbench_nixl.library import INSTALL_HINT, installed_module

#: The ``open_backend`` fixture's type.
OpenBackend = Callable[..., NixlBackend]

#: Tests that move bytes through NIXL; without the wheel they skip with the install line.
needs_nixl = pytest.mark.skipif(installed_module() is None, reason=f"NIXL is not installed: {INSTALL_HINT}")



def bucket_keys(endpoint: str, bucket: str) -> list[str]:
    """Every object key in ``bucket`` (boto3 straight to the server, as a user would look)."""
    import boto3

    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    try:
        listing = client.list_objects_v2(Bucket=bucket)
    finally:
        client.close()
    return [item["Key"] for item in listing.get("Contents", [])]


def has_nvidia_driver() -> bool:
    """Whether ``libcuda.so.1`` loads (a host where the GDS backends can start)."""
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True
