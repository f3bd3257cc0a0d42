"""Registers the trace sources under the ``kvbench`` entry-point group.

Classes are imported inside the hook, as in the core's built-ins, so listing
plugins stays cheap and ``kvbench_workloads.stats`` can import this module freely.
"""

from __future__ import annotations

from kvbench_core.contracts.plugins import hookimpl


@hookimpl
def kvbench_workload_sources() -> dict[str, type]:
    from kvbench_workloads.burstgpt import BurstGPTSource
    from kvbench_workloads.mooncake import MooncakeSource
    from kvbench_workloads.sharegpt import ShareGPTSource

    return {"sharegpt": ShareGPTSource, "burstgpt": BurstGPTSource, "mooncake": MooncakeSource}
