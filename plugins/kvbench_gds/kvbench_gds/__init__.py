"""kvbench's GPUDirect Storage tier (``backend: gds``): KV entries between GPU memory and files via kvikio."""
