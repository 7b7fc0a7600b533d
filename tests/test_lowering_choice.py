"""The choice between the gpu (Triton) and nvptx lowerings of a GPU leaf (rt/lowering_choice.py,
rt/lowering_trial.py): which one a size class keeps, the disk cache, HPVM_GPU_LOWERING, pinned
placements, failing lowerings, and timing that leaves the launch's buffers alone. Without a GPU,
the stand-ins of tests/programs/lowering_stand_ins.py decide (a clock and counting kernels), and
the gpu target's real kernels run through Triton's interpreter; on a GPU, the last test keeps
whichever lowering is faster and checks the answers against numpy."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py import In, InOut, Ptr, f32, i32, i64
from hpvm_py.backends import registry
from hpvm_py.backends.base import LeafKernel
from hpvm_py.errors import CompileError, ExecutionError, HPVMWarning, LaunchError
from hpvm_py.rt import compiler
from hpvm_py.rt import lowering_choice as C
from hpvm_py.rt import lowering_trial
from hpvm_py.support import stats
from programs import lowering_stand_ins as S

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """An empty disk cache and no decision or warning yet in this process; HPVM_GPU_LOWERING unset."""
    monkeypatch.setenv("HPVM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("HPVM_NO_CACHE", raising=False)
    monkeypatch.delenv("HPVM_GPU_LOWERING", raising=False)
    monkeypatch.setattr(C, "_kept", {})
    monkeypatch.setattr(C, "_warned", set())
    stats.reset()


def standing_in(monkeypatch, **seconds: float) -> S.StandIns:
    stand_ins = S.StandIns(seconds)
    S.install(stand_ins, monkeypatch.setattr)
    return stand_ins


def choose(stand_ins: S.StandIns, n: int = C.MIN_INSTANCES, target: str = "gpu",
           device: str = "cuda:0", leaf=S.bump) -> S.StandInKernel:
    choice = C.LoweringChoice(leaf.ir, S.CTX, target, stand_ins.compile)
    call, _ = S.launch_args(n)
    return choice.kernel_for(stand_ins.own(target), False, call, [], [(n,)], device)


def test_the_faster_lowering_is_kept_once_per_size_class(fresh, monkeypatch) -> None:
    stand_ins = standing_in(monkeypatch, gpu=2e-3, nvptx=1e-3)
    choice = C.LoweringChoice(S.bump.ir, S.CTX, "gpu", stand_ins.compile)
    own = stand_ins.own()

    def launch(n: int) -> LeafKernel:
        call, _ = S.launch_args(n)
        return choice.kernel_for(own, False, call, [], [(n,)], "cuda:0")

    assert launch(C.MIN_INSTANCES + 1000) is stand_ins.own("nvptx")
    assert stand_ins.clocked == ["gpu", "nvptx"]
    assert launch(2 * C.MIN_INSTANCES) is stand_ins.own("nvptx")  # the same class: not timed
    assert len(stand_ins.clocked) == 2
    assert launch(C.MIN_INSTANCES) is stand_ins.own("nvptx") and len(stand_ins.clocked) == 4
    counts = stats.snapshot()
    assert counts["lowering_timed"] == 2 and counts["lowering_kept_nvptx"] == 2
    assert "lowering_kept_triton" not in counts


def test_the_other_lowering_must_be_faster_by_the_margin(fresh, monkeypatch) -> None:
    assert choose(standing_in(monkeypatch, gpu=1.0, nvptx=0.97)).target == "gpu"
    assert stats.count("lowering_kept_triton") == 1
    assert choose(standing_in(monkeypatch, gpu=1.0, nvptx=0.9), 2 * C.MIN_INSTANCES).target == "nvptx"


def test_an_nvptx_graph_may_keep_the_triton_lowering(fresh, monkeypatch) -> None:
    stand_ins = standing_in(monkeypatch, gpu=1e-3, nvptx=3e-3)
    assert choose(stand_ins, target="nvptx") is stand_ins.own("gpu")


def test_size_classes_are_powers_of_two_of_instances_and_buffers() -> None:
    call, _ = S.launch_args(1000)
    assert C.size_class(1, 1000, call) == "10/10/12.12"
    assert C.size_class(3, 1000, call) == "10/12/12.12"
    assert C.size_class(1, 1024, call) == C.size_class(1, 1000, call)
    assert C.size_class(1, 1025, call) != C.size_class(1, 1024, call)


def test_small_launches_and_the_fake_device_keep_their_target(fresh, monkeypatch) -> None:
    stand_ins = standing_in(monkeypatch, gpu=2.0, nvptx=1.0)
    assert choose(stand_ins, n=1000) is stand_ins.own()
    assert choose(stand_ins, device="fake:0") is stand_ins.own()
    assert stand_ins.compiled == [] and stand_ins.clocked == []  # not even compiled
    monkeypatch.setattr(C, "MIN_BYTES", 4096)  # few instances, but buffers large enough
    assert choose(stand_ins, n=1024) is stand_ins.own("nvptx")


@pytest.mark.parametrize("leaf", ["bump_rows", "sum_rows"])
def test_a_leaf_with_a_loop_is_timed_at_any_size(fresh, monkeypatch, leaf: str) -> None:
    """Few instances, small buffers: bump is left alone; a leaf with a loop (bump_rows: one nvptx
    may share between the threads of each instance; sum_rows: a reduction) is timed and keeps
    the faster lowering."""
    stand_ins = standing_in(monkeypatch, gpu=2.0, nvptx=1.0)
    assert choose(stand_ins, n=1000) is stand_ins.own()
    assert choose(stand_ins, n=1000, leaf=getattr(S, leaf)) is stand_ins.own("nvptx")
    assert choose(stand_ins, n=1000, leaf=getattr(S, leaf), device="fake:0") is stand_ins.own()


def test_timing_runs_on_copies_put_back_before_each_run(fresh, monkeypatch) -> None:
    stand_ins = standing_in(monkeypatch, gpu=2.0, nvptx=1.0)
    choice = C.LoweringChoice(S.bump.ir, S.CTX, "gpu", stand_ins.compile)
    call, x = S.launch_args(C.MIN_INSTANCES)
    before = x.copy()
    kept = choice.kernel_for(stand_ins.own(), False, call, [], [(C.MIN_INSTANCES,)], "cuda:0")
    np.testing.assert_array_equal(x, before)  # four runs, and the launch's buffer is untouched
    runs = stand_ins.own("gpu").found + kept.found
    assert len(runs) == 4 and all(np.array_equal(found, before) for found in runs)
    for kernel in (stand_ins.own("gpu"), kept):
        args, = kernel.prepared
        assert args[0].obj is not x and args[2] is call[2]  # only the written buffer is copied


def test_buffers_that_overlap_are_not_timed(fresh, monkeypatch) -> None:
    stand_ins = standing_in(monkeypatch, gpu=2.0, nvptx=1.0)
    choice = C.LoweringChoice(S.bump.ir, S.CTX, "gpu", stand_ins.compile)
    memory = np.zeros(C.MIN_INSTANCES + 16, dtype=np.int32)
    x, y = memory[:C.MIN_INSTANCES], memory[16:]  # the launch reads what it writes
    call = [S.buffer(x), np.int64(x.nbytes), S.buffer(y), np.int64(y.nbytes)]
    assert lowering_trial.overlapping(S.bump.ir, call)
    assert choice.kernel_for(stand_ins.own(), False, call, [], [(C.MIN_INSTANCES,)], "cuda:0") \
        is stand_ins.own() and stand_ins.clocked == []
    apart = [S.buffer(memory[:16]), np.int64(64), S.buffer(memory[16:32]), np.int64(64)]
    assert not lowering_trial.overlapping(S.bump.ir, apart)


def test_a_decision_is_read_back_by_another_process(fresh, tmp_path) -> None:
    env = {**os.environ, "HPVM_CACHE_DIR": str(tmp_path / "shared-cache"), "PYTHONPATH": str(ROOT)}
    env.pop("HPVM_GPU_LOWERING", None)
    program = str(ROOT / "tests" / "programs" / "lowering_stand_ins.py")

    def run(gpu: str, nvptx: str) -> dict:
        done = subprocess.run([sys.executable, program, gpu, nvptx], capture_output=True, text=True,
                              env=env, timeout=300)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.splitlines()[-1])

    first = run("2.0", "1.0")
    assert first["kept"] == "nvptx" and first["clocked"] == ["gpu", "nvptx"]
    assert first["lowering_timed"] == 1 and "lowering_disk_hits" not in first
    second = run("fail", "fail")  # its clock fails if it runs: the disk answers
    assert second["kept"] == "nvptx" and second["clocked"] == []
    assert second["lowering_disk_hits"] == 1 and second["lowering_kept_nvptx"] == 1
    env["HPVM_NO_CACHE"] = "1"
    assert run("1.0", "2.0")["kept"] == "gpu"


def test_a_damaged_disk_entry_is_timed_again(fresh, monkeypatch, tmp_path) -> None:
    stand_ins = standing_in(monkeypatch, gpu=2.0, nvptx=1.0)
    choose(stand_ins)
    entry, = (tmp_path / "cache").rglob(f"*{C.SUFFIX}")
    assert json.loads(entry.read_text())["kept"] == "nvptx"
    monkeypatch.setattr(C, "_kept", {})
    assert C._stored(entry.name[:-len(C.SUFFIX)]) == "nvptx"
    entry.write_text('{"kept": "cpu"}')  # its checksum no longer matches: a miss
    monkeypatch.setattr(C, "_kept", {})
    assert choose(stand_ins).target == "nvptx" and len(stand_ins.clocked) == 4


def test_the_setting_turns_the_choice_off_or_forces_a_lowering(fresh, monkeypatch) -> None:
    stand_ins = standing_in(monkeypatch, gpu=2.0, nvptx=1.0)
    monkeypatch.setenv("HPVM_GPU_LOWERING", "off")
    assert choose(stand_ins) is stand_ins.own()
    monkeypatch.setenv("HPVM_GPU_LOWERING", "triton")
    assert choose(stand_ins) is stand_ins.own() and choose(stand_ins, target="nvptx") is stand_ins.own("gpu")
    monkeypatch.setenv("HPVM_GPU_LOWERING", "nvptx")  # any launch, any device, untimed
    assert choose(stand_ins, n=10, device="fake:0") is stand_ins.own("nvptx")
    assert stand_ins.clocked == []
    monkeypatch.setenv("HPVM_GPU_LOWERING", "fastest")
    with pytest.raises(LaunchError, match="HPVM_GPU_LOWERING='fastest': expected auto, off, triton, nvptx"):
        choose(stand_ins)


def test_a_forced_lowering_that_cannot_run_here_warns_once(fresh, monkeypatch) -> None:
    stand_ins = standing_in(monkeypatch, gpu=2.0, nvptx=1.0)
    monkeypatch.setattr(registry, "available", lambda target: target == "gpu")
    monkeypatch.setenv("HPVM_GPU_LOWERING", "nvptx")
    with pytest.warns(HPVMWarning, match="HPVM_GPU_LOWERING=nvptx: target 'nvptx' cannot run here"):
        assert choose(stand_ins) is stand_ins.own()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert choose(stand_ins) is stand_ins.own()
    monkeypatch.delenv("HPVM_GPU_LOWERING")
    assert choose(stand_ins) is stand_ins.own() and stand_ins.compiled == []  # auto: not timed


def test_a_lowering_that_does_not_compile_is_not_kept(fresh, monkeypatch) -> None:
    stand_ins = S.StandIns({"gpu": 2.0, "nvptx": 1.0}, uncompilable=frozenset({"nvptx"}))
    S.install(stand_ins, monkeypatch.setattr)
    with pytest.warns(HPVMWarning, match=r"leaf bump\w*: its nvptx lowering failed \(.*does not compile\)"):
        assert choose(stand_ins) is stand_ins.own()
    assert stats.count("lowering_fallbacks") == 1 and stats.count("lowering_timed") == 0
    assert not list(Path(os.environ["HPVM_CACHE_DIR"]).rglob(f"*{C.SUFFIX}"))  # not stored


@pytest.mark.parametrize("failing, kept", [("gpu", "nvptx"), ("nvptx", "gpu")])
def test_a_lowering_that_cannot_run_the_launch_falls_back_to_the_other(fresh, monkeypatch, failing,
                                                                        kept) -> None:
    errors = {failing: LaunchError(f"the {failing} stand-in cannot launch this")}
    stand_ins = S.StandIns({"gpu": 1.0, "nvptx": 2.0}, errors=errors)
    S.install(stand_ins, monkeypatch.setattr)
    with pytest.warns(HPVMWarning, match=f"its {failing} lowering failed .*cannot launch this.* run "
                                         f"the {kept} lowering instead"):
        assert choose(stand_ins).target == kept
    assert stats.count("lowering_fallbacks") == 1


def test_when_neither_lowering_runs_the_targets_own_error_is_raised(fresh, monkeypatch) -> None:
    errors = {t: LaunchError(f"{t} cannot") for t in ("gpu", "nvptx")}
    stand_ins = S.StandIns({"gpu": 1.0, "nvptx": 2.0}, errors=errors)
    S.install(stand_ins, monkeypatch.setattr)
    with pytest.raises(LaunchError, match="gpu cannot"):
        choose(stand_ins)


def test_a_fault_while_timing_reaches_the_launch(fresh, monkeypatch) -> None:
    stand_ins = S.StandIns({"gpu": 1.0, "nvptx": 2.0},
                           errors={"nvptx": ExecutionError("leaf bump: out-of-bounds access")})
    S.install(stand_ins, monkeypatch.setattr)
    with pytest.raises(ExecutionError, match="out-of-bounds"):
        choose(stand_ins)


# -- graphs, the gpu target's real kernels through Triton's interpreter ------------------------

gpu_here = pytest.mark.skipif(not registry.available("gpu"), reason="the gpu target is not here")


@hpvm.leaf
def count(data: In[Ptr[i32]], data_bytes: i64, bins: InOut[Ptr[i32]], bins_bytes: i64, nbins: i32):
    hpvm.atomic_add(bins, data[hpvm.instance_id(0)] % nbins, 1)


@hpvm.leaf(target="gpu")
def count_on_gpu(data: In[Ptr[i32]], data_bytes: i64, bins: InOut[Ptr[i32]], bins_bytes: i64,
                 nbins: i32):
    hpvm.atomic_add(bins, data[hpvm.instance_id(0)] % nbins, 1)


def histogram_of(leaf, hint: str | None = None):
    @hpvm.graph
    def root(data: In[Ptr[i32]], data_bytes: i64, bins: InOut[Ptr[i32]], bins_bytes: i64,
             nbins: i32, n: i64):
        hpvm.node(leaf, grid=n, data=data, data_bytes=data_bytes, bins=bins, bins_bytes=bins_bytes,
                  nbins=nbins, hint=hint)
    return root


class Counted(LeafKernel):
    """The stand-in for the nvptx lowering: the gpu target's checked kernel (other code, the
    same answers), counting its prepared launches."""

    def __init__(self, kernel: LeafKernel):
        self.kernel = kernel
        self.prepares = 0

    def prepare(self, args, outputs, extents):
        self.prepares += 1
        return self.kernel.prepare(args, outputs, extents)


@pytest.fixture
def interpreted_choice(fresh, monkeypatch):
    """Graphs compiled from here on choose between the gpu target's kernel and a stand-in for
    nvptx's (Counted), on a clock that favours the stand-in; any launch is large enough."""
    made: list[Counted] = []
    real = compiler._compile_leaf

    def compile_leaf(leaf, ctx, target, checked):
        if target != "nvptx":
            return real(leaf, ctx, target, checked)
        made.append(Counted(real(leaf, ctx, "gpu", True)))
        return made[-1]

    def clock(prepared, restore):
        restore()
        prepared.run()  # for real, on the copies
        return 1.0 if prepared.source.checked else 2.0

    monkeypatch.setattr(compiler, "_compile_leaf", compile_leaf)
    monkeypatch.setattr(lowering_trial, "cuda_timer", clock)
    monkeypatch.setattr(C, "measurable", lambda device: True)
    monkeypatch.setattr(C, "device_name", lambda device: "interpreter")
    monkeypatch.setattr(registry, "available", lambda target, real=registry.available:
                        target == "nvptx" or real(target))
    monkeypatch.setattr(C, "MIN_INSTANCES", 1)
    return made


def run_histogram(root, n: int = 3000, nbins: int = 37) -> tuple[np.ndarray, np.ndarray]:
    data = np.random.default_rng(7).integers(-10**6, 10**6, n, dtype=np.int32)
    bins = np.zeros(64, dtype=np.int32)
    with hpvm.runtime("gpu"):
        hpvm.wait(hpvm.launch(root, data, data.nbytes, bins, bins.nbytes, nbins, n))
        hpvm.request_memory(bins)
    want = np.zeros(64, dtype=np.int32)
    want[:nbins] = np.bincount(data % nbins, minlength=nbins)
    return bins, want


@gpu_here
def test_the_kept_lowering_runs_the_launch_once_on_its_buffers(interpreted_choice) -> None:
    root = histogram_of(count)
    bins, want = run_histogram(root)
    np.testing.assert_array_equal(bins, want)  # the atomics of the timed runs went to copies
    stand_in, = interpreted_choice
    assert stand_in.prepares == 2  # timed once, then the launch itself
    assert stats.count("lowering_kept_nvptx") == 1
    bins, want = run_histogram(root)  # decided: not timed again (a fresh runtime's counters)
    np.testing.assert_array_equal(bins, want)
    assert stand_in.prepares == 3 and stats.count("lowering_timed") == 0


@gpu_here
@pytest.mark.parametrize("leaf, hint", [(count, "gpu"), (count_on_gpu, None)])
def test_pinned_leaves_keep_their_target(interpreted_choice, monkeypatch, leaf, hint) -> None:
    root = histogram_of(leaf, hint)
    node, = compiler.compile_graph(root, "gpu").plan.nodes
    assert node.lowering is None and node.placement.origin in ("hint", "leaf")
    monkeypatch.setenv("HPVM_GPU_LOWERING", "nvptx")
    bins, want = run_histogram(root)
    np.testing.assert_array_equal(bins, want)
    assert interpreted_choice == []  # the other lowering was never compiled


@gpu_here
def test_a_leaf_whose_other_lowering_fails_runs_its_own(interpreted_choice, monkeypatch) -> None:
    def uncompilable(leaf, ctx, target, checked, real=compiler._compile_leaf):
        if target == "nvptx":
            raise CompileError("nvptx stand-in: not this leaf", leaf.loc)
        return real(leaf, ctx, target, checked)

    monkeypatch.setattr(compiler, "_compile_leaf", uncompilable)
    with pytest.warns(HPVMWarning, match="its nvptx lowering failed"):
        bins, want = run_histogram(histogram_of(count))
    np.testing.assert_array_equal(bins, want)


# -- on a GPU: the real lowerings ----------------------------------------------------------------

both_here = pytest.mark.skipif(
    not (registry.available("gpu") and registry.available("nvptx")) or
    os.environ.get("TRITON_INTERPRET") == "1", reason="needs a CUDA GPU that runs gpu and nvptx")


@hpvm.leaf
def axpy(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, a: f32):
    i = hpvm.instance_id(0)
    y[i] = a * x[i] + y[i]


@hpvm.graph
def axpy_root(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, a: f32, n: i64):
    hpvm.node(axpy, grid=n, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes, a=a)


@both_here
@pytest.mark.parametrize("how", ["auto", "triton", "nvptx"])
def test_on_a_gpu_every_lowering_gives_the_same_answers(fresh, monkeypatch, how) -> None:
    monkeypatch.setenv("HPVM_GPU_LOWERING", how)
    monkeypatch.setattr(C, "MIN_INSTANCES", 1)
    n, nbins = 1 << 16, 61
    rng = np.random.default_rng(3)
    data = rng.integers(-10**6, 10**6, n, dtype=np.int32)
    bins = np.zeros(nbins, dtype=np.int32)
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    expected = np.float32(1.5) * x + y
    with hpvm.runtime("gpu"):
        hpvm.wait(hpvm.launch(histogram_of(count), data, data.nbytes, bins, bins.nbytes, nbins, n))
        hpvm.wait(hpvm.launch(axpy_root, x, x.nbytes, y, y.nbytes, 1.5, n))
        hpvm.request_memory(bins)
        hpvm.request_memory(y)
        counts = stats.snapshot()
    np.testing.assert_array_equal(bins, np.bincount(data % nbins, minlength=nbins))
    np.testing.assert_array_equal(y, expected)
    if how == "auto":  # both leaves timed; each kept one lowering
        assert counts["lowering_timed"] == 2
        assert counts.get("lowering_kept_nvptx", 0) + counts.get("lowering_kept_triton", 0) == 2
