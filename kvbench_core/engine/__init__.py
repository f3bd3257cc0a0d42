"""What runs a measurement: the runner, scheduler, executor, waterfall cache, payloads, telemetry."""
