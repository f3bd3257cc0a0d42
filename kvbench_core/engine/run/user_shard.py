"""One worker process's users of a run's workload source (``workers.processes``; docs/scale-out.md).

A worker process drives the run's users ``index``, ``index + N``, … .  Its source is the run's source, built
as a one-process run builds it (the run's seed, all of its users), so each user draws the stream it draws
there: the processes together issue the one-process run's requests, split by user, not N runs' worth.
The process's user pool counts its own users ``0 .. n-1`` (the arrivals and the think events work on those);
this adapter maps them to the run's numbers on the way in and back on the way out.  Entries every user
shares (RAG documents) are preloaded by each process into its own share of the tiers.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kvbench_core.contracts.errors import SpecError
from kvbench_core.contracts.workload import Request, WorkloadSource, Write
from kvbench_core.runspec.plan import Shard


class UserShard(WorkloadSource):
    """The run's ``source`` as worker process ``shard.index`` of ``shard.count`` sees it."""

    def __init__(self, source: WorkloadSource, shard: Shard) -> None:
        if source.open_loop:  # known only once the source is built (a synthetic source's arrival option)
            raise SpecError(f"workers.processes: {shard.count} cannot split the arrivals of the open-loop source "
                            f"'{source.name}' yet; run a closed loop, or use clients for separate engines")
        if source.context.mode == "decode-only":  # its pre-populated entries are every user's, not this shard's
            raise SpecError(f"workers.processes: {shard.count} cannot split workload.mode: decode-only (every "
                            "process would pre-populate every user's entries); use workers.processes: 1")
        super().__init__({}, source.context)
        self.source, self.shard = source, shard

    def preload(self) -> Iterable[Write]:
        return self.source.preload()

    def next_request(self, user_id: int) -> Request | None:
        request = self.source.next_request(self.shard.user(user_id))
        if request is not None:
            request.user_id = user_id  # back to the pool's number: its think event readies this user
        return request

    def describe(self) -> dict[str, Any]:
        return self.source.describe()
