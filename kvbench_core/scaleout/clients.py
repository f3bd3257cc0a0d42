"""What one client of a scaled-out run is: its seed, its cache subdirectory, its users, its run id.

A run scales out as several clients (local processes, or MPI ranks), each a
complete ``Runner`` over its own copy of the run plan.  Both launchers
derive that copy here, so a local run and an MPI run of the same spec give
client ``i`` the same request stream, the same directory layout and the same
share of users.  See docs/scale-out.md.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

import numpy as np

from kvbench_core.contracts.errors import UserError
from kvbench_core.results.merge import ClientReport, mode_splits
from kvbench_core.runspec.plan import RunPlan, TierPlan


class ClientFailed(UserError):
    """A client (process or rank) died or failed; the message names it and how it ended."""

    exit_code = 6


def client_failure(reports: list[ClientReport], label: str) -> ClientFailed | None:
    """The error for the clients that failed or ended without a result, each named with how it ended; its
    exit code is the first such client's own non-zero one (a spec error's 2 stays 2), else ``ClientFailed``'s."""
    failed = [r for r in reports if r.failed]
    if not failed:
        return None
    error = ClientFailed("; ".join(r.describe_failure(label) for r in failed))
    error.exit_code = next((r.extra["exit_code"] for r in failed if r.extra.get("exit_code")), ClientFailed.exit_code)
    return error


@dataclass(frozen=True)
class ClientLayout:
    """How clients are named: ``client`` for local processes, ``rank`` for MPI ranks, ``process`` for the worker
    processes of one run (``workers.processes``: they split the run instead of each running all of it)."""

    label: str  # "client" | "rank" | "process"
    total: int

    @property
    def splits_the_run(self) -> bool:
        return mode_splits(self.label)

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


def local_layout(plan: RunPlan) -> ClientLayout:
    """The local processes of ``plan``: its worker processes, else its clients."""
    return ClientLayout("process", plan.processes) if plan.processes > 1 else ClientLayout("client", plan.clients)


def client_plan(plan: RunPlan, layout: ClientLayout, index: int) -> RunPlan:
    """The plan client ``index`` runs: own seed, own cache subdirectory, the client count for
    ``users_scope: split``, one client (it does not spawn clients itself).  A worker process keeps the run's
    seed and takes its share of the run instead (``RunPlan.for_process``)."""
    directories = {tier.name: os.path.join(path, layout.directory(index))
                   for tier in plan.tiers if (path := _directory(tier)) is not None}
    if layout.splits_the_run:
        return plan.for_process(index, directory_of=directories)
    return plan.for_client(seed=client_seed(plan.seed, index), clients_total=layout.total, directory_of=directories)


def _directory(tier: TierPlan) -> str | None:
    """The directory this tier owns (its ``StorageBackend.directory_option``), if the tier names one."""
    option = tier.backend.cls.directory_option
    path = tier.backend.options.get(option) if option else None
    return path if isinstance(path, str) else None


def tier_directories(plan: RunPlan) -> list[str]:
    """Absolute directories the enabled tiers of a (client) plan own."""
    return [os.path.abspath(path) for tier in plan.enabled_tiers if (path := _directory(tier)) is not None]


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
