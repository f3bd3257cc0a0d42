"""What runs a measurement, in three rooms that import only downwards (tests/house/test_layers.py):
``engine.measure`` (what is counted), ``engine.cache`` (the waterfall cache) and ``engine.run`` (how a run is
driven)."""
