"""KV codecs in the data path: the codec contract, the built-in codecs and the codec stage (``CodecTier``).

A codec turns a piece of an entry's logical bytes (what the model's KV is) into
physical bytes (what reaches the device) and back.  The stage sits between the
payload and a tier's backend, so every figure the tier reports is measured with
the codec's CPU time and the device's time side by side.  See docs/codecs.md.
"""
