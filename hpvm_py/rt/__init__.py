"""The runtime layer: the compile path (compiler.py), plan, placement, executor, memory tracker,
replay and streaming (stream/); docs/architecture.md, "Runtime"."""
