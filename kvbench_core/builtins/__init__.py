"""The core's own plugin: built-in tiers, the synthetic workload, the autoscalers and the KV codecs.

Registered through the ``kvbench`` entry-point group like any vendor plugin.
Classes are imported inside the hooks so listing plugins stays cheap.
"""

from __future__ import annotations

from kvbench_core.contracts.plugins import hookimpl


@hookimpl
def kvbench_storage_backends() -> dict[str, type]:
    from kvbench_core.builtins.memory import CPUMemoryBackend, GPUMemoryBackend

    return {"cpu": CPUMemoryBackend, "gpu": GPUMemoryBackend}


@hookimpl
def kvbench_workload_sources() -> dict[str, type]:
    from kvbench_core.builtins.synthetic import SyntheticSource

    return {"synthetic": SyntheticSource}


@hookimpl
def kvbench_autoscalers() -> dict[str, type]:
    from kvbench_core.builtins.autoscalers import CapacityAutoscaler, QoSAutoscaler
    from kvbench_core.builtins.sla_search import SLASearchAutoscaler

    return {"qos": QoSAutoscaler, "capacity": CapacityAutoscaler, "sla_search": SLASearchAutoscaler}


@hookimpl
def kvbench_codecs() -> dict[str, type]:
    from kvbench_core.codecs.bf16 import BF16PlanesCodec
    from kvbench_core.codecs.general import Lz4Codec, NoneCodec, ZstdCodec

    return {"none": NoneCodec, "zstd": ZstdCodec, "lz4": Lz4Codec, "bf16_planes": BF16PlanesCodec}
