"""kvio: project a model's KV-offload I/O without a GPU, record it as a manifest, replay it on a tier,
and score a measured I/O log against the projection (see docs/kvio.md)."""
