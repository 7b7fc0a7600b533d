"""Placement: per-node targets, several GPUs in one process, graphs that mix cpu, gpu and nvptx.

Without a GPU the gpu target runs on fake devices (host arrays standing in for device memory,
every copy counted as on a GPU; HPVM_FAKE_DEVICES of them, default 2) through Triton's
interpreter, so the copy counts below are exact on CI. nvptx needs a real GPU: on CI it is checked
compile-only, and its runs happen on the GPU machines (the tests marked `real_gpu` below).
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py import In, InOut, Out, Ptr, f32, i8, i64
from hpvm_py.backends import registry
from hpvm_py.errors import CompileError, FrontendError, LaunchError, VerificationError
from hpvm_py.rt import placement as P
from conftest import child_pythonpath

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).name

GPU = registry.available("gpu")
NVPTX = registry.available("nvptx")
CUDA_GPUS = 0
if NVPTX:
    import torch

    CUDA_GPUS = torch.cuda.device_count()

needs_gpu_target = pytest.mark.skipif(not GPU, reason="the gpu target is unavailable (conftest sets "
                                      "TRITON_INTERPRET=1 without a GPU: only without triton)")
needs_fake = pytest.mark.skipif(not GPU or NVPTX, reason="fake devices stand in only where there "
                                "is no CUDA GPU (CI)")
real_gpu = pytest.mark.skipif(not NVPTX, reason="needs a CUDA GPU (runs on the GPU machines)")
two_real_gpus = pytest.mark.skipif(CUDA_GPUS < 2, reason="needs two CUDA GPUs (nvidia-h200-x2)")


# -- leaves and graphs ------------------------------------------------------------------------


@hpvm.leaf
def moved_doubled(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64):
    i = hpvm.instance_id(0)
    y[i] = 2.0 * x[i]


@hpvm.leaf
def moved_added(x: In[Ptr[f32]], x_bytes: i64, y: In[Ptr[f32]], y_bytes: i64, z: Out[Ptr[f32]], z_bytes: i64):
    i = hpvm.instance_id(0)
    z[i] = x[i] + y[i]


@hpvm.leaf
def moved_squared(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64):
    i = hpvm.instance_id(0)
    y[i] = x[i] * x[i]


@hpvm.leaf(target="gpu")
def moved_gpu_doubled(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64):
    i = hpvm.instance_id(0)
    y[i] = 2.0 * x[i]


@hpvm.leaf
def moved_byte_counts(x: In[Ptr[i64]], x_bytes: i64, bins: InOut[Ptr[i8]], bins_bytes: i64):
    i = hpvm.instance_id(0)
    hpvm.atomic_add(bins, x[i] % 4, 1)  # atomics on bytes: Triton cannot express them, nvptx can


def three_stage(first: str, second: str, third: str):
    """a -> doubled (first) -> t; t + b -> added (second) -> u; u -> squared (third) -> c.
    The stages share buffers, not edges: siblings run in creation order (a valid schedule)."""

    @hpvm.graph
    def root(a: In[Ptr[f32]], a_bytes: i64, b: In[Ptr[f32]], b_bytes: i64, t: InOut[Ptr[f32]],
             t_bytes: i64, u: InOut[Ptr[f32]], u_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64, n: i64):
        hpvm.node(moved_doubled, grid=n, x=a, x_bytes=a_bytes, y=t, y_bytes=t_bytes, hint=first)
        hpvm.node(moved_added, grid=n, x=t, x_bytes=t_bytes, y=b, y_bytes=b_bytes, z=u, z_bytes=u_bytes,
                  hint=second)
        hpvm.node(moved_squared, grid=n, x=u, x_bytes=u_bytes, y=c, y_bytes=c_bytes, hint=third)

    return root


@hpvm.graph
def policy_root(a: In[Ptr[f32]], a_bytes: i64, b: InOut[Ptr[f32]], b_bytes: i64, n: i64):
    hpvm.node(moved_doubled, grid=n, x=a, x_bytes=a_bytes, y=b, y_bytes=b_bytes, name="plain")
    hpvm.node(moved_gpu_doubled, grid=n, x=a, x_bytes=a_bytes, y=b, y_bytes=b_bytes, name="marked")
    hpvm.node(moved_gpu_doubled, grid=n, x=a, x_bytes=a_bytes, y=b, y_bytes=b_bytes, name="overridden",
              hint="cpu")
    hpvm.node(moved_gpu_doubled, grid=n, x=a, x_bytes=a_bytes, y=b, y_bytes=b_bytes, name="no_preference",
              hint="any")
    hpvm.node(moved_doubled, grid=n, x=a, x_bytes=a_bytes, y=b, y_bytes=b_bytes, name="simt", hint="nvptx")
    second = hpvm.node(moved_doubled, grid=n, x=a, x_bytes=a_bytes, y=b, y_bytes=b_bytes, name="second")
    hpvm.hint(second, "gpu:1")


def counts_graph(hint: str | None = None):
    """A fresh graph each time (compiled graphs are cached per graph object)."""

    @hpvm.graph
    def counts_root(x: In[Ptr[i64]], x_bytes: i64, bins: InOut[Ptr[i8]], bins_bytes: i64, n: i64):
        hpvm.node(moved_byte_counts, grid=n, x=x, x_bytes=x_bytes, bins=bins, bins_bytes=bins_bytes, hint=hint)

    return counts_root


def copies(before: dict, after: dict) -> tuple[int, int, int]:
    return tuple(after[f"{d}_copies"] - before[f"{d}_copies"] for d in ("h2d", "d2h", "d2d"))


def placements(root, target: str) -> dict[str, tuple[str, int | None, str]]:
    compiled = hpvm.compile(root, target=target)
    return {n.name: (n.target, n.placement.index, n.placement.origin) for n in compiled.plan.nodes}


def run_three_stage(root, rng, n: int = 300, launches: int = 1):
    a, b = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    t, u, c = (np.zeros(n, np.float32) for _ in range(3))
    bufs = (a, b, t, u, c)
    for buf in bufs:
        hpvm.track_memory(buf)
    before = hpvm.stats()
    per_launch = []
    for _ in range(launches):
        start = hpvm.stats()
        hpvm.wait(hpvm.launch(root, a, a.nbytes, b, b.nbytes, t, t.nbytes, u, u.nbytes, c, c.nbytes, n))
        hpvm.request_memory(c)
        per_launch.append(copies(start, hpvm.stats()))
    after = hpvm.stats()
    np.testing.assert_allclose(c, (2 * a + b) ** 2, rtol=1e-6)
    return copies(before, after), per_launch, bufs


def tracked_copies(buf) -> set[str]:
    """The devices that hold a copy of a tracked buffer (the runtime's memory tracker)."""
    from hpvm_py.api import host as api

    return set(api._runtime.tracker.lookup(buf).copy_devices())


# -- the policy (compile only: runs everywhere) -----------------------------------------------


@pytest.mark.skipif(not registry.compilable("gpu") or not registry.compilable("nvptx"),
                    reason="needs the gpu and nvptx compilers (triton and its ptxas)")
@pytest.mark.parametrize("runtime_target", ["cpu", "gpu"])
def test_hint_beats_leaf_target_beats_runtime_target(runtime_target: str) -> None:
    got = placements(policy_root, runtime_target)
    assert got == {
        "plain": (runtime_target, None, P.RUNTIME),
        "marked": ("gpu", None, P.LEAF),
        "overridden": ("cpu", None, P.HINT),
        "no_preference": ("gpu", None, P.LEAF),  # "any" states no preference: the leaf's target
        "simt": ("nvptx", None, P.HINT),
        "second": ("gpu", 1, P.HINT),
    }


@hpvm.graph
def inner_pair(a: In[Ptr[f32]], a_bytes: i64, t: InOut[Ptr[f32]], t_bytes: i64, u: InOut[Ptr[f32]],
               u_bytes: i64, n: i64):
    hpvm.node(moved_doubled, grid=n, x=a, x_bytes=a_bytes, y=t, y_bytes=t_bytes, name="follows")
    hpvm.node(moved_squared, grid=n, x=t, x_bytes=t_bytes, y=u, y_bytes=u_bytes, name="own", hint="cpu")


@hpvm.graph
def outer_hinted(a: In[Ptr[f32]], a_bytes: i64, t: InOut[Ptr[f32]], t_bytes: i64, u: InOut[Ptr[f32]],
                 u_bytes: i64, n: i64):
    hpvm.node(inner_pair, a=a, a_bytes=a_bytes, t=t, t_bytes=t_bytes, u=u, u_bytes=u_bytes, n=n,
              name="pair", hint="gpu:1")


@pytest.mark.skipif(not registry.compilable("gpu"), reason="needs triton")
def test_a_hint_on_an_internal_node_places_its_children_without_their_own() -> None:
    pair = hpvm.compile(outer_hinted, target="cpu").plan.nodes[0]
    got = {n.name: (n.target, n.placement.index, n.placement.origin, n.placement.hinted_by)
           for n in pair.child.nodes}
    assert got == {"follows": ("gpu", 1, P.HINT, "pair"), "own": ("cpu", None, P.HINT, "own")}


@needs_fake
def test_an_internal_node_hinted_to_a_gpu_runs_there(rng) -> None:
    n = 100
    a = rng.random(n, dtype=np.float32)
    t, u = np.zeros(n, np.float32), np.zeros(n, np.float32)
    with hpvm.runtime("cpu"):
        for buf in (a, t, u):
            hpvm.track_memory(buf)
        before = hpvm.stats()
        hpvm.wait(hpvm.launch(outer_hinted, a, a.nbytes, t, t.nbytes, u, u.nbytes, n))
        assert copies(before, hpvm.stats()) == (1, 1, 0)  # a in to fake:1, t back for the cpu child
        assert tracked_copies(t) == {"host", "fake:1"}
    np.testing.assert_allclose(u, (2 * a) ** 2, rtol=1e-6)


def test_the_python_target_runs_every_node_as_python() -> None:
    got = placements(policy_root, "python")
    assert {v for v in got.values()} == {("python", None, P.RUNTIME)}


def test_placements_survive_the_textual_ir() -> None:
    text = hpvm.to_text(policy_root)
    assert "hint(gpu:1)" in text and "hint(nvptx)" in text and "target(gpu)" in text
    again = hpvm.from_text(text)
    assert hpvm.to_text(again) == text
    if registry.compilable("gpu") and registry.compilable("nvptx"):
        assert placements(again, "cpu") == placements(policy_root, "cpu")


def test_leaf_target_with_a_device_index_is_kept() -> None:
    @hpvm.leaf(target="gpu:01")
    def moved_on_second(x: In[Ptr[f32]], x_bytes: i64):
        pass

    assert moved_on_second.target == "gpu:1"


@pytest.mark.skipif(not registry.compilable("nvptx"), reason="needs llvmlite and ptxas")
def test_gpu_falls_back_to_nvptx_for_a_leaf_triton_cannot_express(monkeypatch) -> None:
    if not NVPTX:  # compile-only here: pretend nvptx runs, as it does on the GPU machines
        available = registry.available
        monkeypatch.setattr(registry, "available", lambda t: True if t == "nvptx" else available(t))
    got = placements(counts_graph(), "gpu")
    assert got == {"moved_byte_counts": ("nvptx", None, P.FALLBACK)}


@pytest.mark.skipif(not registry.compilable("gpu"), reason="needs triton")
@pytest.mark.parametrize("hint,nvptx_runs", [(None, False), ("gpu", True), ("gpu", False)])
def test_no_fallback_when_nvptx_cannot_run_here_or_gpu_was_asked_for(hint, nvptx_runs,
                                                                     monkeypatch) -> None:
    available = registry.available
    monkeypatch.setattr(registry, "available", lambda t: nvptx_runs if t == "nvptx" else available(t))
    with pytest.raises(CompileError) as info:
        hpvm.compile(counts_graph(hint), target="gpu")
    assert "atomic_add on a i8 buffer" in info.value.message and info.value.rule == "gpu-supported"


# -- bad placements ----------------------------------------------------------------------------


@pytest.mark.parametrize("spec,words", [
    ("tpu", "'tpu' is not a target"),
    ("cpu:1", "only the GPU targets"),
    ("gpu:x", "only the GPU targets"),
    ("gpu:-1", "only the GPU targets"),
    ("gpu:", "only the GPU targets"),
    (3, "a target is a string"),
])
def test_a_hint_naming_no_target_is_a_located_error(spec, words) -> None:
    @hpvm.graph
    def root(a: In[Ptr[f32]], a_bytes: i64, b: Out[Ptr[f32]], b_bytes: i64):
        s = hpvm.node(moved_doubled, x=a, x_bytes=a_bytes, y=b, y_bytes=b_bytes)
        hpvm.hint(s, spec)  # the line the error names

    with pytest.raises(VerificationError) as info:
        hpvm.to_text(root)
    line = root.pyfunc.__code__.co_firstlineno + 3
    assert info.value.loc.file.endswith(HERE) and info.value.loc.line == line
    assert words in info.value.message and info.value.rule == "hint-target"


@pytest.mark.parametrize("spec", ["fpga", "python", "cpu:0", "nvptx:a"])
def test_a_leaf_target_naming_no_target_is_a_located_error(spec) -> None:
    with pytest.raises(FrontendError) as info:
        @hpvm.leaf(target=spec)
        def moved_bad_target(x: In[Ptr[f32]], x_bytes: i64):
            pass
    assert info.value.loc.file.endswith(HERE) and info.value.rule == "hint-target"


def test_text_ir_rejects_a_bad_device_index() -> None:
    text = hpvm.to_text(policy_root).replace("hint(gpu:1)", "hint(cpu:1)")
    with pytest.raises(hpvm.errors.ParseError) as info:
        hpvm.from_text(text)
    assert "only the GPU targets" in info.value.message


@needs_fake
def test_a_gpu_that_is_not_there_is_a_located_launch_error(rng, monkeypatch) -> None:
    root = three_stage("gpu:0", "gpu:2", "gpu:0")
    with hpvm.runtime("cpu"):
        with pytest.raises(LaunchError) as info:
            run_three_stage(root, rng)
    error = info.value
    assert "no GPU number 2" in error.message and "fake:0, fake:1" in error.message
    assert "HPVM_FAKE_DEVICES" in error.message and error.rule == "target-available"
    assert error.loc.file.endswith(HERE)  # the node's line inside three_stage
    monkeypatch.setenv("HPVM_FAKE_DEVICES", "3")
    with hpvm.runtime("cpu"):  # with a third fake GPU the same graph runs
        run_three_stage(root, rng)


@pytest.mark.skipif(NVPTX or not registry.compilable("nvptx"),
                    reason="checks a machine where nvptx compiles but cannot run")
def test_a_node_on_a_target_that_cannot_run_here_says_what_to_do(rng) -> None:
    root = three_stage("cpu", "nvptx", "cpu")
    with hpvm.runtime("cpu"):
        with pytest.raises(LaunchError) as info:
            run_three_stage(root, rng)
    error = info.value
    assert "node moved_added runs on target 'nvptx'" in error.message and "hint 'nvptx'" in error.message
    assert "hint 'cpu'" in error.message and error.rule == "target-available"
    assert error.loc.file.endswith(HERE)


def test_a_hint_naming_a_target_missing_here_fails_at_launch_with_what_to_do(tmp_path: Path) -> None:
    """Without a GPU (and without the interpreter) the hinted gpu leaf's Triton source is still
    generated, but its launch cannot compile its kernels: a CompileError at the hint's line that
    says why, what to do and which targets run here (docs/placement.md)."""
    program = tmp_path / "prog.py"
    program.write_text(textwrap.dedent("""
        import numpy as np
        import hpvm_py as hpvm
        from hpvm_py import In, Out, Ptr, f32, i64

        @hpvm.leaf
        def moved_doubled(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64):
            y[hpvm.instance_id(0)] = 2.0 * x[hpvm.instance_id(0)]

        @hpvm.graph
        def root(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, n: i64):
            hpvm.node(moved_doubled, grid=n, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes, hint="gpu")

        a = np.ones(4, np.float32)
        try:
            with hpvm.runtime("cpu"):
                hpvm.wait(hpvm.launch(root, a, 16, a, 16, 4))
        except hpvm.errors.HPVMError as e:
            print("ERROR", type(e).__name__, e)
    """))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(CUDA_VISIBLE_DEVICES="", PYTHONPATH=child_pythonpath(ROOT))
    result = subprocess.run([sys.executable, str(program)], capture_output=True, text=True,
                            timeout=300, env=env)
    out = result.stdout
    assert "ERROR CompileError" in out, out + result.stderr
    assert f"{program}:12:" in out and "[rule: target-available]" in out
    assert "node moved_doubled runs on target 'gpu' (placed there by hint 'gpu' on node " \
        "moved_doubled), which cannot run here" in out
    assert "TRITON_INTERPRET=1" in out and "hint 'cpu'" in out and "available here: cpu, python" in out


# -- mixed cpu + gpu graphs on one tracker (fake device on CI, cuda:0 on a GPU machine) ---------


@needs_gpu_target
@pytest.mark.parametrize("runtime_target", ["cpu", "gpu"])
def test_cpu_gpu_cpu_chain_moves_only_what_crosses(runtime_target: str, rng) -> None:
    root = three_stage("cpu", "gpu", "cpu")
    with hpvm.runtime(runtime_target):
        total, per_launch, (a, b, t, u, c) = run_three_stage(root, rng, launches=3)
        # t (written on the host) and b go in; u (written on the GPU) comes back for the cpu node
        assert per_launch[0] == (2, 1, 0)
        # b is still valid on the GPU; t was rewritten on the host, u on the GPU
        assert per_launch[1:] == [(1, 1, 0), (1, 1, 0)]
        np.testing.assert_allclose(u, 2 * a + b, rtol=1e-6)


@needs_gpu_target
def test_untracked_buffers_of_a_mixed_graph_come_home_once(rng) -> None:
    root = three_stage("gpu", "cpu", "gpu")
    n = 200
    a, b = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    t, u, c = (np.zeros(n, np.float32) for _ in range(3))
    with hpvm.runtime("cpu"):
        before = hpvm.stats()
        hpvm.wait(hpvm.launch(root, a, a.nbytes, b, b.nbytes, t, t.nbytes, u, u.nbytes, c, c.nbytes, n))
        after = hpvm.stats()
    # a in, t back for the cpu node, u in for the last gpu node, c home after the launch
    assert copies(before, after) == (2, 2, 0)
    assert after["h2d_bytes"] - before["h2d_bytes"] == 2 * a.nbytes
    np.testing.assert_allclose(t, 2 * a, rtol=1e-6)
    np.testing.assert_allclose(c, (2 * a + b) ** 2, rtol=1e-6)


# -- several GPUs in one process ---------------------------------------------------------------


@needs_fake
def test_two_fake_gpus_move_an_edge_device_to_device(rng) -> None:
    root = three_stage("gpu:0", "gpu:1", "gpu:1")
    with hpvm.runtime("cpu"):
        total, per_launch, (a, b, t, u, c) = run_three_stage(root, rng, launches=2)
        # a and b in, t fake:0 -> fake:1, c back on request
        assert per_launch[0] == (2, 1, 1)
        # everything is valid where it is read: only t moves again, and c comes back
        assert per_launch[1] == (0, 1, 1)
        assert tracked_copies(t) == {"host", "fake:0", "fake:1"}
        assert tracked_copies(u) == {"host", "fake:1"}
        before = hpvm.stats()
        hpvm.request_memory(t)
        assert copies(before, hpvm.stats()) == (0, 1, 0)
    np.testing.assert_allclose(t, 2 * a, rtol=1e-6)


@needs_fake
def test_default_gpu_follows_hpvm_gpu_device(rng, monkeypatch) -> None:
    monkeypatch.setenv("HPVM_GPU_DEVICE", "fake:1")
    root = three_stage("gpu", "gpu:0", "cpu")
    with hpvm.runtime("cpu"):
        _, per_launch, (a, b, t, u, c) = run_three_stage(root, rng)
        assert per_launch[0] == (2, 1, 1)
        assert tracked_copies(t) == {"host", "fake:0", "fake:1"}


@needs_fake
def test_a_replay_follows_a_changed_hpvm_gpu_device(monkeypatch) -> None:
    """HPVM_GPU_DEVICE is read per launch: a launch that repeats a recorded one (a replay, or its
    launches pointed at other buffers) after the setting changed runs on the device it names now,
    not on the one it was recorded on."""
    root = three_stage("gpu", "gpu", "gpu")
    monkeypatch.setenv("HPVM_GPU_DEVICE", "fake:0")
    n = 8
    with hpvm.runtime("gpu"):
        a = hpvm.track_memory(np.arange(n, dtype=np.float32))
        b = hpvm.track_memory(np.ones(n, np.float32))
        t, u, c = (hpvm.track_memory(np.zeros(n, np.float32)) for _ in range(3))
        for _ in range(3):  # recorded, then replayed
            hpvm.wait(hpvm.launch(root, a, b, t, u, c, n))
        assert tracked_copies(c) == {"host", "fake:0"}
        monkeypatch.setenv("HPVM_GPU_DEVICE", "fake:1")
        for _ in range(2):
            hpvm.wait(hpvm.launch(root, a, b, t, u, c, n))
        assert "fake:1" in tracked_copies(c)
        fresh = np.zeros(n, np.float32)  # other buffers of the recorded sizes (a rebind)
        hpvm.wait(hpvm.launch(root, a, b, t, u, fresh, n))
        hpvm.request_memory(c)
        np.testing.assert_array_equal(fresh, c)


# -- real GPUs (the nvidia-h200-x2 run; skipped on CI) ----------------------------------------


@real_gpu
def test_cpu_gpu_nvptx_mix_on_one_gpu(rng) -> None:
    root = three_stage("cpu", "gpu", "nvptx")
    with hpvm.runtime("gpu"):
        total, per_launch, (a, b, t, u, c) = run_three_stage(root, rng, n=1 << 16, launches=2)
        # t and b in; u stays on cuda:0 between the gpu and nvptx nodes; c back on request
        assert per_launch == [(2, 1, 0), (1, 1, 0)]
        assert tracked_copies(u) == {"host", "cuda:0"}


@real_gpu
def test_fallback_to_nvptx_runs(rng) -> None:
    x = rng.integers(0, 1 << 20, 5000).astype(np.int64)
    bins = np.zeros(4, np.int8)
    with hpvm.runtime("gpu"):
        hpvm.wait(hpvm.launch(counts_graph(), x, x.nbytes, bins, bins.nbytes, 32))
    assert bins.tolist() == np.bincount(x[:32] % 4, minlength=4).tolist()


@two_real_gpus
def test_two_cuda_gpus_move_an_edge_peer_to_peer(rng) -> None:
    root = three_stage("gpu:0", "nvptx:1", "gpu:1")
    with hpvm.runtime("gpu"):
        total, per_launch, (a, b, t, u, c) = run_three_stage(root, rng, n=1 << 20, launches=2)
        assert per_launch == [(2, 1, 1), (0, 1, 1)]
        assert tracked_copies(t) == {"host", "cuda:0", "cuda:1"}


@two_real_gpus
def test_a_cuda_tensor_on_a_gpu_no_node_uses_is_refused(rng) -> None:
    import torch

    n = 1024
    a = torch.rand(n, device="cuda:1")
    b = torch.zeros(n, device="cuda:0")

    @hpvm.graph
    def root(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, n: i64):
        hpvm.node(moved_doubled, grid=n, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes, hint="gpu:0")

    with hpvm.runtime("gpu"):
        with pytest.raises(LaunchError) as info:
            hpvm.wait(hpvm.launch(root, a, a.nbytes, b, b.nbytes, n))
    error = info.value
    assert "lives on cuda:1" in error.message and "tensor.to('cuda:0')" in error.message
    assert "hint 'gpu:1'" in error.message and error.loc.file.endswith(HERE)


@two_real_gpus
def test_a_cuda_tensor_on_another_gpu_of_the_graph_moves_device_to_device(rng) -> None:
    import torch

    n = 1 << 16
    a = torch.rand(n, device="cuda:1")
    b = torch.zeros(n, device="cuda:1")
    t = torch.zeros(n, device="cuda:0")

    @hpvm.graph
    def root(x: In[Ptr[f32]], x_bytes: i64, t: InOut[Ptr[f32]], t_bytes: i64, y: Out[Ptr[f32]],
             y_bytes: i64, n: i64):
        hpvm.node(moved_doubled, grid=n, x=x, x_bytes=x_bytes, y=t, y_bytes=t_bytes, hint="gpu:0")
        hpvm.node(moved_squared, grid=n, x=t, x_bytes=t_bytes, y=y, y_bytes=y_bytes, hint="gpu:1")

    with hpvm.runtime("gpu"):
        before = hpvm.stats()
        hpvm.wait(hpvm.launch(root, a, a.nbytes, t, t.nbytes, b, b.nbytes, n))
        after = hpvm.stats()
    # a cuda:1 -> cuda:0, t cuda:0 -> cuda:1; nothing touches the host
    assert copies(before, after) == (0, 0, 2)
    torch.testing.assert_close(b, (2 * a) ** 2)


# -- streaming ----------------------------------------------------------------------------------


def _stream_graph():
    from programs import stream_graphs as g

    @hpvm.graph
    def placed_stages(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, k: f32,
                      n: i64) -> f32:
        st = hpvm.streaming
        s = hpvm.node(g.scale, grid=n, x=st(x), x_bytes=st(x_bytes), y=st(y), y_bytes=st(y_bytes),
                      k=st(k), hint="gpu:1")
        a = hpvm.node(g.add_one, count=st(hpvm.all_to_all(s.out[0])), y=st(y), y_bytes=st(y_bytes),
                      hint="cpu")
        return a.out[0]

    return placed_stages


@needs_fake
def test_a_stream_whose_stages_run_on_a_gpu_and_the_host(rng) -> None:
    items = []
    for i in range(4):
        x = rng.random(40 + i, dtype=np.float32)
        items.append((x, np.zeros_like(x), 0.5 + i))
    with hpvm.runtime("cpu"):
        h = hpvm.launch(_stream_graph(), stream=True, depth=2)
        before = hpvm.stats()
        for x, y, k in items:
            hpvm.push(h, x, x.nbytes, y, y.nbytes, k, x.size)
        totals = [hpvm.pop(h)[0] for _ in items]
        hpvm.wait(h)
        after = hpvm.stats()
    # per item: x into fake:1 for the gpu stage, y back for the cpu stage
    assert copies(before, after) == (len(items), len(items), 0)
    for (x, y, k), total in zip(items, totals):
        expected = x * np.float32(k) + np.float32(1)
        np.testing.assert_array_equal(y, expected)
        assert total == pytest.approx(float(expected.sum(dtype=np.float64)), rel=1e-5)
