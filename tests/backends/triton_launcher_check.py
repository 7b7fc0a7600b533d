"""On a GPU: graphs of the gpu target launched again and again (replays: prepared launches with
patched scalars and buffers, CUDA graphs) through the own launcher (HPVM_TRITON_LAUNCHER=own,
backends/triton/launcher.py) and through Triton's (=triton), on the same random inputs. The
results must be the same bytes (and right, where a reference is cheap), and each mode must have
used only its own launcher.

usage: python tests/backends/triton_launcher_check.py   (test_triton_launcher.py runs it on a GPU)
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[2]
for path in (ROOT, ROOT / "examples", ROOT / "tests"):
    sys.path.insert(0, str(path))
os.environ["HPVM_AUTOTUNE"] = "0"  # the same block shapes in both modes

import numpy as np  # noqa: E402
import torch  # noqa: E402

import hpvm_py as hpvm  # noqa: E402
from hpvm_py.backends.triton import launcher as L  # noqa: E402
from programs import gpu_replay_graphs as g  # noqa: E402
from programs import launch_params as lp  # noqa: E402
import histogram  # noqa: E402
import sgemm  # noqa: E402
import stencil  # noqa: E402

STEPS = 8


@dataclass
class Case:
    name: str
    graph: Any
    buffers: Callable[[], list]  # torch CUDA tensors, made once: the same buffers every launch
    fill: Callable[[list, np.random.Generator], None]  # new random data, in place
    args: Callable[[list, int], list]  # the launch's arguments at a step (scalars change)
    outputs: Callable[[list], list]  # what to compare


def _cuda(*shape: int, dtype: Any = torch.float32) -> Any:
    return torch.zeros(*shape, dtype=dtype, device="cuda")


def _uniform(*tensors: Any, rng: np.random.Generator) -> None:
    for t in tensors:
        t.copy_(torch.from_numpy(rng.random(t.numel(), dtype=np.float32).reshape(t.shape)))


def _first_random(b: list, rng: np.random.Generator) -> None:
    _uniform(b[0], rng=rng)


def _all_random(b: list, rng: np.random.Generator) -> None:
    _uniform(*b, rng=rng)


def _stencil_fill(b: list, rng: np.random.Generator) -> None:
    _uniform(b[0], rng=rng)
    b[1].copy_(b[0])


def _histogram_fill(b: list, rng: np.random.Generator) -> None:
    b[0].copy_(torch.from_numpy(rng.integers(-10**6, 10**6, b[0].numel(), dtype=np.int32)))
    b[1].zero_()


def _nbytes(t: Any) -> int:
    return t.numel() * t.element_size()


N = 70_000
CHAIN_SCALARS = [(2.0, 1.0), (2.0, 1.0), (2.0, 1.0), (3.0, 0.5), (1.0, 0.0), (1.0, 0.0),
                 (-4.0, 16.0), (2.0, 1.0)]
M, K, NC = 256, 160, 192  # sgemm: (M x K) @ (K x NC)

CASES = [
    Case("chain (per-instance edges)", g.chain, lambda: [_cuda(N), _cuda(N)], _first_random,
         lambda b, s: [b[0], N * 4, b[1], N * 4, N, *CHAIN_SCALARS[s]], lambda b: [b[1]]),
    Case("broadcast (uniform edge, root output)", g.broadcast, lambda: [_cuda(N), _cuda(N)],
         _first_random, lambda b, s: [b[0], N * 4, b[1], N * 4, N, 0.5 + s % 3], lambda b: [b[1]]),
    Case("scalars of every specialisation class", lp.root, lambda: [_cuda(N), _cuda(N)],
         _first_random, lambda b, s: [b[0], N * 4, b[1], N * 4, N, *lp.SCALARS[s % 2 if s < 4 else 0]],
         lambda b: [b[1]]),
    Case("sgemm (tl.dot, shared memory)", sgemm.root,
         lambda: [_cuda(M, K), _cuda(K, NC), _cuda(M, NC)], _all_random,
         lambda b, s: [b[0], _nbytes(b[0]), b[1], _nbytes(b[1]), b[2], _nbytes(b[2]), M, NC, K, 1.5,
                       0.5 * (s % 2)], lambda b: [b[2]]),
    Case("stencil (InOut)", stencil.root, lambda: [_cuda(32, 96, 128), _cuda(32, 96, 128)],
         _stencil_fill, lambda b, s: [b[0], _nbytes(b[0]), b[1], _nbytes(b[1]), 128, 96, 32, 1 / 6,
                                      1 / 36], lambda b: [b[1]]),
    Case("histogram (atomics)", histogram.root,
         lambda: [_cuda(N, dtype=torch.int32), _cuda(256, dtype=torch.int32)], _histogram_fill,
         lambda b, s: [b[0], N * 4, b[1], 256 * 4, 256 if s < 5 else 100, N], lambda b: [b[1]]),
]


def run(case: Case, mode: str) -> list[np.ndarray]:
    """The case's outputs after each of STEPS launches, under HPVM_TRITON_LAUNCHER=mode."""
    os.environ["HPVM_TRITON_LAUNCHER"] = mode
    rng = np.random.default_rng(20261127)
    results = []
    with hpvm.runtime("gpu"):
        buffers = case.buffers()
        for step in range(STEPS):
            case.fill(buffers, rng)
            returned = hpvm.wait(hpvm.launch(case.graph, *case.args(buffers, step)))
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            results += [t.cpu().numpy().copy() for t in case.outputs(buffers)]
            results.append(np.asarray(returned, dtype=object))
    return results


def counting() -> dict[str, int]:
    """Counts of the launches through each launcher (their __call__ wrapped)."""
    counts = {"own": 0, "triton": 0}
    for cls, key in ((L.OwnLauncher, "own"), (L.TritonRunner, "triton")):
        original = cls.__call__

        def wrapped(self: Any, stream: int, _original: Any = original, _key: str = key) -> None:
            counts[_key] += 1
            _original(self, stream)

        cls.__call__ = wrapped
    return counts


def main() -> None:
    import triton  # noqa: PLC0415

    print(torch.cuda.get_device_name(), "torch", torch.__version__, "triton", triton.__version__)
    counts = counting()
    failures = []
    for case in CASES:
        before = dict(counts)
        theirs = run(case, "triton")
        after_triton = dict(counts)
        ours = run(case, "own")
        own = counts["own"] - after_triton["own"]
        used = (after_triton["triton"] - before["triton"], after_triton["own"] - before["own"],
                own, counts["triton"] - after_triton["triton"])
        same = len(ours) == len(theirs) and all(
            a.dtype == b.dtype and (a.tobytes() == b.tobytes() if a.dtype != object else
                                    a.tolist() == b.tolist()) for a, b in zip(ours, theirs))
        print(f"{case.name}: {'same' if same else 'DIFFERENT'} results; relaunches through Triton's "
              f"launcher {used[0]} (own {used[1]}), through the own {used[2]} (Triton's {used[3]})")
        if not same or used[1] or used[3] or own == 0:
            failures.append(case.name)
    x = torch.rand(N, device="cuda")
    y = torch.zeros(N, device="cuda")
    os.environ["HPVM_TRITON_LAUNCHER"] = "own"
    with hpvm.runtime("gpu"):
        for s in range(3):
            hpvm.wait(hpvm.launch(lp.root, x, N * 4, y, N * 4, N, *lp.SCALARS[s % 2]))
            expected = lp.reference(x.cpu().numpy(), *lp.SCALARS[s % 2])
            if not np.allclose(y.cpu().numpy(), expected, rtol=1e-6):
                failures.append("launch_params against its reference")
    if failures:
        print("FAILED:", ", ".join(failures))
        sys.exit(1)
    print("own launcher: same results as Triton's on every case")


if __name__ == "__main__":
    main()
