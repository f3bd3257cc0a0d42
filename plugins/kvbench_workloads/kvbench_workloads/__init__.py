"""kvbench-workloads: ShareGPT, BurstGPT and Mooncake workload traces as workload sources."""

__version__ = "0.1.0"
