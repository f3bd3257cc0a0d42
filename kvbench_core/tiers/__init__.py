"""The core's built-in memory tiers (registered through ``kvbench_core.builtins``)."""
