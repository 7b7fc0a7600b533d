"""The version of hpvm-py (pyproject.toml's), a part of every disk cache key."""
VERSION = "0.1.0"
