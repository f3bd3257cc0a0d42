"""kvbench trace replay: ShareGPT, BurstGPT and Mooncake traces as workload sources."""

__version__ = "0.1.0"
