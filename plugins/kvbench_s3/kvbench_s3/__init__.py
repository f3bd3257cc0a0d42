"""kvbench's S3 / S3-compatible object tier (backend ``s3``); see ``docs/tiers/s3.md``."""

__version__ = "0.1.0"
