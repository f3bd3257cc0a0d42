"""Template kvbench plugin: an in-memory storage tier (``backend: template-memory``)."""
