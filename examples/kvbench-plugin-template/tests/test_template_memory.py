"""The template tier passes kvbench's conformance suite: this is all a vendor's test module needs."""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from kvbench_core.contracts.backend import StorageBackend
from kvbench_core.contracts.conformance import BackendConformance


class TestTemplateMemory(BackendConformance):
    backend_name = "template-memory"
    backend_options: ClassVar = {"transfer_size": "64KiB", "limit": "1GiB"}

    def remaining_entries(self, backend: StorageBackend) -> Iterable[str]:
        # Your tier's own listing of what this run stored: files in its directory, keys under its prefix.
        return list(backend._entries)


def test_an_entry_round_trips_through_kvbenchs_pytest_fixtures(kvbench_scratch_tier, kvbench_payload,
                                                                kvbench_verify) -> None:
    """Your own tests reuse kvbench's fixtures (its pytest plugin, loaded with kvbench-core): an opened
    scratch tier of your backend, the payload a run writes, and a read checked byte for byte."""
    backend = kvbench_scratch_tier("template-memory", {"transfer_size": "64KiB"})
    backend.write("entry", kvbench_payload.payload("entry", 200_000))
    kvbench_verify(backend, "entry", 200_000)
