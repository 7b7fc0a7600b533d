"""Inputs and comparisons shared by tests/test_differential.py and tests/differential/runner.py:
edge-case-rich values of every scalar type, bitwise comparison, and importing generated source."""
from __future__ import annotations

import atexit
import importlib.util
import itertools
import shutil
import sys
import tempfile
from pathlib import Path
from types import ModuleType

import numpy as np

from hpvm_py import types as T
from hpvm_py.ir import semantics as S

_counter = itertools.count()
_folder: Path | None = None


def source_file(source: str, name: str | None = None) -> Path:
    """Generated source in a file of its own (leaves are compiled from source files), in one
    folder per process, removed at exit; `name` names the file (default: a counter's)."""
    global _folder
    if _folder is None:
        _folder = Path(tempfile.mkdtemp(prefix="hpvm-diff-"))
        atexit.register(shutil.rmtree, _folder, True)
    path = _folder / f"{name or f'hpvm_diff_{next(_counter)}'}.py"
    path.write_text(source)
    return path


def import_file(path: Path) -> ModuleType:
    """Import a source file as the module named by its stem."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


def load(source: str, name: str | None = None) -> ModuleType:
    """Import generated source from a file of its own (source_file)."""
    return import_file(source_file(source, name))


def values(t: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """n values of type t, a third or more of them edge cases (inf, NaN, -0.0, min, max...)."""
    st_ = T.SCALAR_TYPES[t]
    if st_.is_float:
        pool = np.array([0.0, -0.0, 1.0, -1.5, 2.0, 0.1, 1e30, -1e-30, np.inf, -np.inf, np.nan, 65504.0, 3.0],
                        np.float64)
        data = np.where(rng.random(n) < 0.3, rng.choice(pool, n), rng.standard_normal(n) * 50)
        if t == "bf16":
            return S.bf16_to_bits(data.astype(np.float32))
        with np.errstate(over="ignore"):
            return data.astype(st_.numpy_dtype)
    lo, hi = st_.min_value(), st_.max_value()
    # powers of two up to the top bit: a scalar divisor that is one runs the shift-and-mask copy
    # of a body on cpu and nvptx (the top bit is lo when signed)
    powers = [4, 64, 1 << (st_.bits - 2)] + ([] if st_.is_signed else [1 << (st_.bits - 1)])
    pool = np.array([0, 1, 2, 3, 7, lo, hi, lo + 1, hi - 1] + powers
                    + ([-1, -2, -7] if st_.is_signed else []), dtype=object)
    randoms = rng.integers(lo, hi, n, dtype=st_.numpy_dtype, endpoint=True)
    picks = rng.choice(pool, n).astype(st_.numpy_dtype)
    return np.where(rng.random(n) < 0.4, picks, randoms).astype(st_.numpy_dtype)


def pattern(t: str, n: int) -> np.ndarray:
    """Known non-zero contents for a buffer a launch may write only in part (a device copy that
    was never filled from the host cannot look like it by chance)."""
    ramp = np.arange(n, dtype=np.int64) * 37 + 11
    if t == "bf16":
        return S.bf16_to_bits((ramp * 0.25).astype(np.float32))
    dtype = T.SCALAR_TYPES[t].numpy_dtype
    if T.SCALAR_TYPES[t].is_float:
        return (ramp * 0.25).astype(dtype)
    return ramp.astype(dtype)  # wraps for narrow types: still non-zero, and still known


def scalar(t: str, rng: np.random.Generator) -> int | float:
    v = values(t, 1, rng)[0]
    if t == "bf16":
        return float(S.bf16_from_bits(v))
    return v.item()


def same(x: np.ndarray, y: np.ndarray, t: str) -> bool:
    """Bit for bit, but any NaN equals any NaN (payloads differ between libraries); -0.0 != 0.0."""
    if x.shape != y.shape:
        return False
    if t == "bf16":
        x, y = S.bf16_from_bits(x), S.bf16_from_bits(y)
    if x.dtype.kind == "f":
        nan = np.isnan(x) & np.isnan(y)
        bits = x.view(f"u{x.itemsize}") == y.view(f"u{y.itemsize}")
        return bool(np.all(nan | bits))
    return bool(np.array_equal(x, y))
