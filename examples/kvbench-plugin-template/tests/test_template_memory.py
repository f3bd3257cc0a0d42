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
