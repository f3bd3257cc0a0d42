"""What a run counts: latency histograms, per-command records and their booking by time, the telemetry the
tiers report into, the I/O log, the measurement window's timeline and the cancellation point every command
passes.  The engine's lowest room: it knows nothing of the cache or of how a run is driven."""
