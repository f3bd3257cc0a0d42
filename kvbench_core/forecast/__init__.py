"""``kvbench forecast``: a measured run's request stream, cache and scheduling on a simulated clock, with each
tier replaced by a service model fitted from the result (docs/FORECAST.md)."""
