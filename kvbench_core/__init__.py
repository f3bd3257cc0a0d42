"""kvbench core: hook specifications, run spec, waterfall cache, runner, telemetry and results."""

__version__ = "0.1.0"
