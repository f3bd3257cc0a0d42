"""The waterfall LRU cache: where an entry is placed, how it is read, promoted and demoted between tiers, and
the cache's own figures.  May import ``engine.measure`` (every tier operation is booked there), never
``engine.run``."""
