"""What one client of a scaled-out run is: its seed, its cache subdirectory, its users, its run id.

A run scales out as several clients (local processes, or MPI ranks), each a
complete ``Runner`` over its own copy of the resolved spec.  Both launchers
derive that copy here, so a local run and an MPI run of the same spec give
client ``i`` the same request stream, the same directory layout and the same
share of users.  See docs/scale-out.md.
"""

from __future__ import annotations

import copy
import os
import shutil
from dataclasses import dataclass
from typing import Any

import numpy as np

from kvbench_core.contracts.errors import UserError
from kvbench_core.contracts.plugins import registry


class ClientFailed(UserError):
    """A client (process or rank) died or failed; the message names it and how it ended."""

    exit_code = 6


@dataclass(frozen=True)
class ClientLayout:
    """How clients are named: ``client`` for local processes, ``rank`` for MPI ranks."""

    label: str  # "client" | "rank"
    total: int

    def directory(self, index: int) -> str:
        """The subdirectory appended to every path-like tier option of client ``index``."""
        return f"{self.label}{index}"

    def run_id(self, run_id: str, index: int) -> str:
        """Each client keys its files/objects by its own run id, so clients never touch each other's data."""
        return f"{run_id}-{self.label[0]}{index}"


def client_seed(seed: int, index: int) -> int:
    """Client 0 keeps the spec's seed; the others draw distinct, reproducible streams (and payload bytes,
    so deduplicating storage finds nothing shared between clients)."""
    if index == 0:
        return seed
    return int(np.random.SeedSequence([seed, index]).generate_state(1, dtype=np.uint32)[0])


def client_spec(spec: dict[str, Any], layout: ClientLayout, index: int) -> dict[str, Any]:
    """The resolved spec client ``index`` runs: own seed, own cache subdirectory, the client count for
    ``users_scope: split``, one client (it does not spawn clients itself)."""
    mine = copy.deepcopy(spec)
    mine["seed"] = client_seed(spec["seed"], index)
    mine["clients"] = 1
    mine["clients_total"] = layout.total
    for tier in mine["cache"]["tiers"]:
        option = _directory_option(tier)
        if option:
            tier["options"][option] = os.path.join(tier["options"][option], layout.directory(index))
    return mine


def _directory_option(tier: dict[str, Any]) -> str | None:
    """The option of this tier that names a directory it owns (``StorageBackend.directory_option``), if set."""
    option = registry("backend")[tier["backend"]].directory_option
    return option if option and isinstance(tier["options"].get(option), str) else None


def tier_directories(spec: dict[str, Any]) -> list[str]:
    """Absolute directories the enabled tiers of a (client) spec own."""
    return [os.path.abspath(tier["options"][option]) for tier in spec["cache"]["tiers"]
            if tier["capacity"] != 0 and (option := _directory_option(tier))]


class DirectorySnapshot:
    """Which cache directories a run is about to create, so what a killed client could not clean up
    (and the empty ``path`` above the ``client{i}`` subdirectories) is removed for it, without ever
    touching a directory that was there before."""

    def __init__(self, directories: list[str]) -> None:
        self.created: set[str] = set()
        for directory in directories:
            while not os.path.lexists(directory) and directory != os.path.dirname(directory):
                self.created.add(directory)
                directory = os.path.dirname(directory)

    def remove_leftovers(self, directory: str, run_id: str) -> None:
        """What a dead client left in ``directory``: all of it if the run created the directory,
        otherwise only entries named after the client's run id (the backend contract's key prefix)."""
        if not os.path.isdir(directory):
            return
        if directory in self.created:
            shutil.rmtree(directory, ignore_errors=True)
            return
        for root, _dirs, files in os.walk(directory):
            for name in files:
                if name.startswith((run_id, f".{run_id}")):
                    os.unlink(os.path.join(root, name))

    def remove_empty(self) -> None:
        """Directories the run created and nobody uses any more, deepest first."""
        for directory in sorted(self.created, key=len, reverse=True):
            try:
                os.rmdir(directory)
            except OSError:
                continue
