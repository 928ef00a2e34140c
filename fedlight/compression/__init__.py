"""Smaller uploads: the encodings of a client's update (``codecs``) and the recipe's ``server.compress``
around any aggregator (``update_compression``; docs/compression.md)."""
