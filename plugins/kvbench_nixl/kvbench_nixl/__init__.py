"""kvbench's NIXL tier (``backend: nixl``): KV entries moved by NVIDIA's NIXL transfer library."""
