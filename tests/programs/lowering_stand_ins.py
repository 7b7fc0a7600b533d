"""Stand-ins for the tests of rt/lowering_choice.py (tests/test_lowering_choice.py), so that a
process without a GPU decides as one with a GPU would: kernels that count their runs and add one
to their InOut buffer, a clock that reads each stand-in's time, and the setup that puts them in
place. Run as a program, it decides one size class and prints what was kept and the counters:
python lowering_stand_ins.py GPU_SECONDS NVPTX_SECONDS (a time of "fail": that clock must not run)."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import hpvm_py as hpvm  # noqa: E402
from hpvm_py import In, InOut, Ptr, i32, i64  # noqa: E402
from hpvm_py.backends import registry  # noqa: E402
from hpvm_py.backends.base import BufferArg, LeafKernel, NodeContext  # noqa: E402
from hpvm_py.errors import CompileError  # noqa: E402
from hpvm_py.rt import lowering_choice as C  # noqa: E402
from hpvm_py.rt import lowering_trial  # noqa: E402
from hpvm_py.support import stats  # noqa: E402


@hpvm.leaf
def bump(x: InOut[Ptr[i32]], x_bytes: i64, y: In[Ptr[i32]], y_bytes: i64):
    i = hpvm.instance_id(0)
    x[i] = x[i] + y[i]


@hpvm.leaf
def bump_rows(x: InOut[Ptr[i32]], x_bytes: i64, y: In[Ptr[i32]], y_bytes: i64):
    """bump over 32 columns per instance: a loop nvptx may share between threads (lanes)."""
    row = hpvm.instance_id(0)
    for col in range(32):
        x[row * 32 + col] = y[row * 32 + col] + 1


@hpvm.leaf
def sum_rows(x: InOut[Ptr[i32]], x_bytes: i64, y: In[Ptr[i32]], y_bytes: i64):
    """A row's sum per instance: a loop whose iterations carry a value (no lanes), like the
    pipeline's one block reducing a whole image."""
    row = hpvm.instance_id(0)
    total = 0
    for col in range(32):
        total += y[row * 32 + col]
    x[row * 32] = total


CTX = NodeContext(level_dims=(1,), input_modes=("buffer", "uniform", "buffer", "uniform"),
                  output_modes=())


class StandInLaunch:
    def __init__(self, kernel: "StandInKernel", args: list[Any]):
        self.kernel = kernel
        self.args = args

    def run(self) -> None:
        """Note what the InOut buffer held, then write it (as the leaf's real kernels would)."""
        x = self.args[0].obj
        self.kernel.found.append(x.copy())
        x += 1


class StandInKernel(LeafKernel):
    """A lowering's kernel: `seconds` per run on the stand-in clock; `error` raised by prepare()
    (a lowering that cannot run the launch)."""

    def __init__(self, target: str, checked: bool, seconds: float, error: Exception | None = None):
        self.target = target
        self.checked = checked
        self.seconds = seconds
        self.error = error
        self.found: list[np.ndarray] = []  # the InOut buffer as each run found it
        self.prepared: list[list[Any]] = []  # the arguments of each prepare()

    def prepare(self, args: list[Any], outputs: list[np.ndarray | None],
                extents: list[tuple[int, ...]]) -> StandInLaunch:
        if self.error is not None:
            raise self.error
        self.prepared.append(args)
        return StandInLaunch(self, args)


class StandIns:
    """One stand-in kernel per (target, checked); `uncompilable`: targets whose compile fails."""

    def __init__(self, seconds: dict[str, float], uncompilable: frozenset[str] = frozenset(),
                 errors: dict[str, Exception] | None = None):
        self.kernels = {(t, checked): StandInKernel(t, checked, s, (errors or {}).get(t))
                        for t, s in seconds.items() for checked in (False, True)}
        self.uncompilable = uncompilable
        self.compiled: list[tuple[str, bool]] = []
        self.clocked: list[str] = []  # the target of each timed launch

    def own(self, target: str = "gpu", checked: bool = False) -> StandInKernel:
        return self.kernels[(target, checked)]

    def compile(self, leaf: Any, ctx: NodeContext, target: str, checked: bool) -> LeafKernel:
        if target in self.uncompilable:
            raise CompileError(f"{leaf.name}: the {target} stand-in does not compile", leaf.loc)
        self.compiled.append((target, checked))
        return self.kernels[(target, checked)]

    def clock(self, prepared: StandInLaunch, restore: Callable[[], None]) -> float:
        """Two runs (the first one compiles, on a GPU), the copies put back before each."""
        for _ in range(2):
            restore()
            prepared.run()
        self.clocked.append(prepared.kernel.target)
        if np.isnan(prepared.kernel.seconds):
            raise AssertionError(f"the {prepared.kernel.target} lowering was timed again")
        return prepared.kernel.seconds


def install(stand_ins: StandIns, set_attr: Callable[[Any, str, Any], None]) -> None:
    """Both GPU targets can run here, on a CUDA device named "stand-in GPU", timed by the
    stand-in clock; `set_attr` is setattr (a program) or pytest's monkeypatch.setattr."""
    set_attr(lowering_trial, "cuda_timer", stand_ins.clock)
    set_attr(C, "device_name", lambda device: "stand-in GPU")
    set_attr(registry, "available", lambda target: True)


def buffer(array: np.ndarray) -> BufferArg:
    return BufferArg(array, array.ctypes.data, array.nbytes, None)


def launch_args(n: int) -> tuple[list[Any], np.ndarray]:
    """The arguments of a launch of bump over n instances, and its InOut buffer x."""
    x, y = np.arange(n, dtype=np.int32), np.ones(n, dtype=np.int32)
    return [buffer(x), np.int64(x.nbytes), buffer(y), np.int64(y.nbytes)], x


def main() -> None:
    seconds = {t: float("nan") if s == "fail" else float(s) for t, s in zip(("gpu", "nvptx"), sys.argv[1:3])}
    stand_ins = StandIns(seconds)
    install(stand_ins, setattr)
    choice = C.LoweringChoice(bump.ir, CTX, "gpu", stand_ins.compile)
    call, _ = launch_args(C.MIN_INSTANCES)
    kernel = choice.kernel_for(stand_ins.own(), False, call, [], [(C.MIN_INSTANCES,)], "cuda:0")
    counts = stats.snapshot()
    print(json.dumps({"kept": kernel.target, "clocked": stand_ins.clocked,
                      **{k: v for k, v in counts.items() if k.startswith("lowering_")}}))


if __name__ == "__main__":
    main()
