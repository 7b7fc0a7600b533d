"""Shared command line of the examples: `python examples/X.py [--target cpu|gpu|python] [--size N]`."""
from __future__ import annotations

import argparse


def parse_args(description: str, default_size: int) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--target", choices=("cpu", "gpu", "python"), default=None,
                        help="where the leaves run (default: $HPVM_TARGET, else gpu if usable, else cpu)")
    parser.add_argument("--size", type=int, default=default_size, help="problem size")
    return parser.parse_args()
