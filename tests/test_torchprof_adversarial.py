"""hpvm.torch.op and hpvm.profile under adversarial use: tensor layouts torch has but a launch
cannot take (sparse), seeded random layouts and dtypes against torch with a profile open and
without, the `replayed` flag of launch events while other
threads replay, traces that `hpvmc viz --profile` cannot read, and rank 0's wait for the other
ranks' parts."""
from __future__ import annotations

import collections
import json
import threading
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import hpvm_py as hpvm  # noqa: E402
from hpvm_py import In, InOut, Out, Ptr, f32, f64, i32, i64  # noqa: E402
from hpvm_py.cli import main as hpvmc  # noqa: E402
from hpvm_py.errors import HPVMError, LaunchError  # noqa: E402
from hpvm_py.support import profile as P  # noqa: E402
from hpvm_py.support import world  # noqa: E402

HERE = __file__


@hpvm.leaf
def tp_scale_leaf(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, alpha: f32):
    i = hpvm.instance_id(0)
    y[i] = alpha * x[i]


@hpvm.graph
def tp_scale(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, alpha: f32, n: i64):
    hpvm.node(tp_scale_leaf, grid=n, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes, alpha=alpha)


@hpvm.leaf
def tp_axpy_leaf(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, alpha: f32):
    i = hpvm.instance_id(0)
    y[i] = alpha * x[i] + y[i]


@hpvm.graph
def tp_axpy(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, alpha: f32, n: i64):
    hpvm.node(tp_axpy_leaf, grid=n, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes, alpha=alpha)


@hpvm.leaf
def tp_mix_leaf(a: In[Ptr[f64]], a_bytes: i64, b: In[Ptr[i32]], b_bytes: i64,
                y: Out[Ptr[f64]], y_bytes: i64, s: f64) -> f64:
    i = hpvm.instance_id(0)
    y[i] = a[i] * s + f64(b[i])
    return s


@hpvm.graph
def tp_mix(a: In[Ptr[f64]], a_bytes: i64, b: In[Ptr[i32]], b_bytes: i64,
           y: Out[Ptr[f64]], y_bytes: i64, s: f64, n: i64) -> f64:
    k = hpvm.node(tp_mix_leaf, grid=n, a=a, a_bytes=a_bytes, b=b, b_bytes=b_bytes, y=y,
                  y_bytes=y_bytes, s=s)
    return k.out[0]


_OPS: dict[tuple[str, str], object] = {}  # torch ops cannot be removed: one per graph and target


def _op(kind: str, target: str):
    key = (kind, target)
    if key not in _OPS:
        if kind == "mix":
            _OPS[key] = hpvm.torch.op(tp_mix, name=f"hpvm_tp::mix_{target}", shapes={"y": "a", "b": "a"},
                                      scalars={"n": lambda a: a.numel()}, target=target)
        else:
            graph = {"scale": tp_scale, "axpy": tp_axpy}[kind]
            _OPS[key] = hpvm.torch.op(graph, name=f"hpvm_tp::{kind}_{target}", shapes={"y": "x"},
                                      scalars={"n": lambda x: x.numel()}, target=target)
    return _OPS[key]


def _at_this_file(exc: HPVMError) -> None:
    assert exc.loc is not None and exc.loc.file == HERE, (exc.loc, str(exc))


# -- torch: layouts ---------------------------------------------------------------------------


def _layout(kind: str, gen, shape: tuple[int, ...], dtype) -> torch.Tensor:
    """A tensor of `shape` in one of the layouts users hand to ops."""
    def rand(*s: int) -> torch.Tensor:
        if dtype.is_floating_point:
            return torch.randn(*s, generator=gen, dtype=dtype)
        return torch.randint(-50, 50, s, generator=gen, dtype=dtype)
    if kind == "plain":
        return rand(*shape)
    if kind == "transposed":
        return rand(*reversed(shape)).permute(*reversed(range(len(shape))))
    if kind == "offset":
        return rand(int(np.prod(shape)) + 3)[3:].view(shape)
    if kind == "strided":
        return rand(*shape[:-1], 2 * shape[-1])[..., ::2]
    if kind == "expanded":
        return rand(*shape[:-1], 1).expand(shape)
    if kind == "sparse":
        return rand(*shape).to_sparse()
    raise AssertionError(kind)


LAYOUTS = ("plain", "transposed", "offset", "strided", "expanded", "sparse")


@pytest.mark.parametrize("target", ["cpu", "python"])
def test_random_layouts_match_torch_with_and_without_a_profile(target: str) -> None:
    """Seeded shapes (0, 1, odd sizes) and layouts of an f64 and an i32 input: the op's result and
    graph output equal torch's, the inputs are untouched, and a profile around the same calls
    changes nothing and records one launch per call; a sparse input is the torch-op error."""
    op = _op("mix", target)
    rng = np.random.default_rng(7)
    gen = torch.Generator().manual_seed(7)
    for case in range(16):
        shape = tuple(int(d) for d in rng.choice([0, 1, 2, 3, 5, 7], size=int(rng.integers(1, 3))))
        a = _layout(str(rng.choice(LAYOUTS)), gen, shape, torch.float64)
        b = _layout(str(rng.choice(LAYOUTS)), gen, shape, torch.int32)
        s = float(rng.choice([0.5, -2.0, -0.0, 1e300]))
        if a.layout != torch.strided or b.layout != torch.strided:
            with pytest.raises(LaunchError, match="sparse") as info:
                op(a, b, s)
            _at_this_file(info.value)
            continue
        a0, b0 = a.clone(), b.clone()
        y, out = op(a, b, s)
        with hpvm.profile() as prof:
            y2, out2 = op(a, b, s)
        expected = a0 * s + b0.to(torch.float64)
        torch.testing.assert_close(y, expected, equal_nan=True)
        given = s if a.numel() else 0.0  # an empty grid's output is 0 (docs/language.md)
        assert torch.equal(y, y2) and out.item() == out2.item() == given and out.dtype == torch.float64
        assert torch.equal(a, a0) and torch.equal(b, b0), case
        assert [e["cat"] for e in prof.events].count("launch") == 1


@pytest.mark.parametrize("layout", [lambda t: t.to_sparse(), lambda t: t.to_sparse_csr()],
                         ids=["coo", "csr"])
def test_sparse_tensors_are_refused_at_the_call(layout) -> None:
    """Not torch's "unsupported memory format option Contiguous" (or "Sparse CSR tensors do not
    have is_contiguous") from inside the op, and not "must be contiguous" for an InOut one: the
    torch-op error at the user's line, also from the overload (what compiled graphs call)."""
    sparse = layout(torch.eye(3))
    with pytest.raises(LaunchError, match="sparse.*dense") as info:
        _op("scale", "cpu")(sparse, 2.0)
    _at_this_file(info.value)
    with pytest.raises(LaunchError, match="sparse.*dense") as info:
        _op("axpy", "cpu")(torch.ones(3, 3), sparse, 2.0)
    _at_this_file(info.value)
    with pytest.raises(LaunchError, match="sparse.*dense") as info:  # as compiled code calls it
        _op("scale", "cpu").overload(sparse, 2.0)
    _at_this_file(info.value)


# -- profile: counts, the replayed flag ------------------------------------------------------


def test_launch_marked_replayed_only_by_its_own_replay() -> None:
    """The launch event's `replayed` compared the process's replay counter before and after the
    launch: a replay by another thread meanwhile marked a launch that ran normally. Here another
    thread replays a recorded launch while this one's (of new sizes, never replayed) runs."""
    with hpvm.runtime("cpu"):
        xr, yr = np.ones(16, np.float32), np.zeros(16, np.float32)
        hpvm.wait(hpvm.launch(tp_axpy, x=xr, y=yr, alpha=1.0, n=16))  # recorded
        executor = hpvm.api.host._active().executor
        run = executor.run

        def run_while_another_thread_replays(*args, **kwargs):
            other = threading.Thread(target=lambda: hpvm.wait(
                hpvm.launch(tp_axpy, x=xr, y=yr, alpha=1.0, n=16)), name="replayer")
            other.start()
            other.join()
            return run(*args, **kwargs)

        executor.run = run_while_another_thread_replays
        try:
            with hpvm.profile() as prof:
                for n in (5, 6, 7):
                    x = np.arange(n, dtype=np.float32)
                    y = np.zeros(n, np.float32)
                    hpvm.wait(hpvm.launch(tp_scale, x=x, y=y, alpha=2.0, n=n))
                    assert np.array_equal(y, 2 * x)
        finally:
            executor.run = run
    names = {tid: name for name, tid in prof.tracks.items()}
    flags = collections.defaultdict(list)
    for e in prof.events:
        if e["cat"] == "launch":
            flags[names[e["tid"]]].append(e["args"]["replayed"])
    assert flags["MainThread"] == [False, False, False]
    assert flags["replayer"] == [True, True, True]


def test_replayed_flags_of_concurrent_threads() -> None:
    """Seeded: threads that repeat one launch (replayed after the first) and threads that launch
    new sizes each time (never replayed), with a profile open: each launch event says which."""
    rng = np.random.default_rng(11)
    sizes = [int(s) for s in rng.permutation(np.arange(20, 80))[:24]]
    flags: dict[str, list[bool]] = {}
    with hpvm.runtime("cpu"):
        xr, yr = np.ones(8, np.float32), np.zeros(8, np.float32)
        hpvm.wait(hpvm.launch(tp_axpy, x=xr, y=yr, alpha=1.0, n=8))

        def repeat() -> None:
            for _ in range(60):
                hpvm.wait(hpvm.launch(tp_axpy, x=xr, y=yr, alpha=1.0, n=8))

        def fresh(part: list[int]) -> None:
            for n in part:
                hpvm.wait(hpvm.launch(tp_scale, x=np.ones(n, np.float32),
                                      y=np.zeros(n, np.float32), alpha=1.0, n=n))

        threads = [threading.Thread(target=repeat, name="repeat0"),
                   threading.Thread(target=fresh, args=(sizes[:12],), name="fresh0"),
                   threading.Thread(target=repeat, name="repeat1"),
                   threading.Thread(target=fresh, args=(sizes[12:],), name="fresh1")]
        with hpvm.profile() as prof:
            for t in threads:
                t.start()
            for t in threads:
                t.join()
    names = {tid: name for name, tid in prof.tracks.items()}
    for e in prof.events:
        if e["cat"] == "launch":
            flags.setdefault(names[e["tid"]].split(" (")[0], []).append(e["args"]["replayed"])
    assert flags["fresh0"] == flags["fresh1"] == [False] * 12
    assert flags["repeat0"] == flags["repeat1"] == [True] * 60


# -- profile: reading and writing traces -------------------------------------------------------


@pytest.mark.parametrize("bad", [float("inf"), float("-inf")])
def test_viz_profile_with_infinite_bytes_is_a_usage_error(bad: float, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """JSON's Infinity as an edge's bytes: an HPVMError naming the file, not "internal error in
    hpvmc: OverflowError"."""
    trace = tmp_path / "inf.json"
    trace.write_text(json.dumps({"traceEvents": [
        {"name": "tp_scale_leaf", "cat": "node", "ph": "X", "ts": 0, "dur": 1,
         "args": {"graph": "tp_scale", "edge_bytes": {"x": bad}}}]}))
    with pytest.raises(HPVMError, match="malformed"):
        P.load_summary(trace)
    code = hpvmc(["viz", HERE, "--graph", "tp_scale", "--profile", str(trace),
                  "-o", str(tmp_path / "out.svg")])
    err = capsys.readouterr().err
    assert code != 0 and "internal error" not in err and "malformed" in err, err


def test_rank0_waiting_in_vain_names_the_with_line(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank 0 of two waits for rank 1's part, which never comes: the HPVMError names the `with`
    line and the rule, as the profile's other errors do (it had neither)."""
    monkeypatch.setattr(world, "current", lambda: SimpleNamespace(rank=0, size=2))
    monkeypatch.setenv("HPVM_COMM_TIMEOUT", "0.2")
    with pytest.raises(HPVMError, match="waited") as info:
        with hpvm.profile(tmp_path / "ranks.json"):
            pass
    _at_this_file(info.value)
    assert info.value.rule == "profile"
