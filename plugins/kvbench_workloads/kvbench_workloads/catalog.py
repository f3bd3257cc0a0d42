"""The plugin's sources by name, imported on first use so listing plugins stays cheap.

Both the plugin hook and ``survey`` read this table; neither imports the other.
"""

from __future__ import annotations


def sources() -> dict[str, type]:
    """``{source name: WorkloadSource subclass}`` of every trace format this plugin reads."""
    from kvbench_workloads.burstgpt import BurstGPTSource
    from kvbench_workloads.mooncake import MooncakeSource
    from kvbench_workloads.sharegpt import ShareGPTSource

    return {"sharegpt": ShareGPTSource, "burstgpt": BurstGPTSource, "mooncake": MooncakeSource}
