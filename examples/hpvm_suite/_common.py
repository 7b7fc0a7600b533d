"""Shared pieces of the HPVM benchmark-suite ports: seeded inputs, Parboil's comparisons, input errors.

Every benchmark module of this package has the same face, which `benchmarks/hpvm_suite.py` uses:

- `SIZES`: `{"small": {...}, "standard": {...}}`, keyword arguments of `make_inputs`;
- `make_inputs(**size) -> dict`: the inputs, generated with a fixed seed (`SEED`);
- `run(inputs, target, passes=None) -> dict`: the HPVM launch sequence of the original's host
  code, inside `hpvm.runtime(target)`; returns the output buffers. With `passes` (a `Passes`)
  the sequence runs once untimed and then once per timed pass, in the same runtime: the timed
  passes find the tracked buffers already on the device, as the peers find theirs;
- `reference(inputs) -> dict`: the same computation in NumPy;
- `check(outputs, expected) -> str | None`: None when the outputs pass the original's own
  comparison (Parboil's `tools/compare-output` tolerances), else what differs;
- `torch_program(inputs, device) -> (kernel, driver)`: the same computation in torch; the runner
  times `driver(torch.compile(kernel))` (the driver loops over iterations, time steps or frames);
- `numba_program(inputs, cuda=False) -> callable | None`: a Numba port of the Parboil OpenMP
  (or CUDA) kernel, for the four Parboil benchmarks.
"""
from __future__ import annotations

import contextlib
import statistics
import time
from pathlib import Path
from typing import Any, Callable, ContextManager, Iterator

import numpy as np

from hpvm_py.errors import HPVMError

SEED = 20240611  # every generated input of the suite comes from this seed (and the benchmark's name)


WARMUP = 3  # untimed passes before the timed ones (see Passes)


class Passes:
    """How many times `run` repeats its launch sequence inside one runtime, and how long each took.

    `for _ in passes or ONCE:` around the launch sequence: without `passes` it runs once; with
    `Passes(n)`, WARMUP times untimed and then n times timed. The untimed passes compile, copy
    the tracked inputs to the device, record the launches and capture their replay as a CUDA
    graph (a replay with the recorded scalars is captured on its second run), so the timed
    passes see the steady state that a peer's time, taken after its own warm-up, also covers. On a GPU `wait` returns once the kernels are queued (as torch's calls do: the
    tracked buffers' later uses are ordered after them), so `sync` (e.g. torch.cuda.synchronize)
    ends each timed pass: its time is the work it launched. The outputs of a timed run are not
    checked: the runner checks a plain run."""

    def __init__(self, timed: int, sync: Callable[[], Any] | None = None) -> None:
        self.timed = timed
        self.sync = sync
        self.seconds: list[float] = []

    def __iter__(self) -> Iterator[int]:
        yield from range(WARMUP)
        if self.sync is not None:
            self.sync()
        for index in range(WARMUP, WARMUP + self.timed):
            with self.around():
                start = time.perf_counter()
                yield index
                if self.sync is not None:
                    self.sync()
                self.seconds.append(time.perf_counter() - start)

    def around(self) -> ContextManager[Any]:
        """What a timed pass runs inside (nothing here; a profile for benchmarks/hpvm_suite.py)."""
        return contextlib.nullcontext()

    def median(self) -> float:
        return statistics.median(self.seconds)


ONCE = (0,)  # the launch sequence of a plain run: one untimed pass


class SuiteInputError(HPVMError):
    """An input file of the suite is missing, truncated, of the wrong size or in the wrong format."""


def rng_for(name: str) -> np.random.Generator:
    """The generator of one benchmark's inputs: the same numbers on every run and machine."""
    return np.random.default_rng([SEED, sum(name.encode())])


def read_exact(path: str | Path, nbytes: int, what: str) -> bytes:
    """The whole of `path`, which must hold exactly `nbytes` bytes (`what` says what it should be)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SuiteInputError(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    if len(data) != nbytes:
        kind = "truncated" if len(data) < nbytes else "too long"
        raise SuiteInputError(f"{path}: {kind}: expected {what}, {nbytes} bytes, found {len(data)} bytes")
    return data


def parboil_close(out: np.ndarray, ref: np.ndarray, abs_tol: float, rel_tol: float,
                  what: str, strict_abs: bool = False) -> str | None:
    """Parboil's element test: |ref - out| <= abs_tol (< when strict_abs) or < rel_tol * |ref|.

    None when every element passes (and the shapes agree), else a line naming the worst element.
    """
    out = np.asarray(out, dtype=np.float64).ravel()
    ref = np.asarray(ref, dtype=np.float64).ravel()
    if out.shape != ref.shape:
        return f"{what}: {out.size} values, expected {ref.size}"
    diff = np.abs(ref - out)
    near = diff < abs_tol if strict_abs else diff <= abs_tol
    ok = near | (diff < rel_tol * np.abs(ref)) | (np.isnan(out) & np.isnan(ref))
    if ok.all():
        return None
    bad = np.flatnonzero(~ok)
    worst = bad[np.argmax(np.nan_to_num(diff[bad], nan=np.inf))]
    return (f"{what}: {bad.size} of {out.size} values out of tolerance (abs {abs_tol:g}, rel {rel_tol:g}); "
            f"worst at {worst}: {out[worst]!r}, expected {ref[worst]!r}")


def optional_numba():
    """numba, or None where it is not installed (its peers print n/a)."""
    try:
        import numba  # noqa: F401
    except Exception:  # noqa: BLE001 - any import failure means no numba peer
        return None
    return numba


def optional_numba_cuda():
    """numba.cuda when a CUDA device is usable, else None."""
    numba = optional_numba()
    if numba is None:
        return None
    if not hasattr(np, "row_stack"):
        # numba-cuda 0.30 calls np.row_stack, which NumPy 2.5 removed (vstack is the same function)
        np.row_stack = np.vstack
    try:
        from numba import cuda
        if not cuda.is_available():
            return None
    except Exception:  # noqa: BLE001
        return None
    return cuda
