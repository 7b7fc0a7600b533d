"""Streaming launches (`launch(..., stream=True)`, push/pop): the stream handle, its stages, the
schedulers that run them and the hazards between items (docs/streaming.md)."""
