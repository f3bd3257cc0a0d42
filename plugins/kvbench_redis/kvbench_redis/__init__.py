"""kvbench's Redis / Valkey tier (backend ``redis``); see ``docs/tiers/redis.md``."""

__version__ = "0.1.0"
