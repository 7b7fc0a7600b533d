"""Adversarial tests of placements through hierarchies (docs/placement.md): a hint on an internal
node places only the children that inherit it, so one whose children all hint elsewhere adds no
device to the launch (no copies, no `buffer-overlap` refusal, no check of a GPU or target that no
kernel uses); errors of an inherited placement point at the hint. A seeded generator of graphs
with internal nodes, one-to-one and all-to-all edges, leaf targets and hints on cpu, gpu:0, gpu:1
and python is held to the python target and to the copies the valid bits require.

Without a GPU the gpu target runs on fake devices (fake:0, fake:1) through Triton's interpreter."""
from __future__ import annotations

import random
import warnings

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py import In, InOut, Ptr, f32, i64
from hpvm_py.backends import registry
from hpvm_py.errors import CompileError, HPVMWarning, LaunchError
from hpvm_py.rt.launch_devices import launch_devices
from test_placement import copies

pytestmark = pytest.mark.skipif(not registry.available("gpu") or registry.available("nvptx"),
                                reason="fake devices stand in only where there is no CUDA GPU (CI)")

N = 8
# placements that no kernel may use here: a GPU number that is not there, a target that cannot run
UNUSABLE = ["gpu:5"] + (["nvptx", "nvptx:3"] if registry.compilable("nvptx") else [])


@hpvm.leaf
def ph_half(y: InOut[Ptr[f32]], y_bytes: i64):
    i = hpvm.instance_id(0)
    y[i] = y[i] * 0.5 + 1.0


@hpvm.leaf
def ph_acc(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64):
    i = hpvm.instance_id(0)
    y[i] = y[i] + x[i]


@hpvm.leaf
def ph_prod(x: In[Ptr[f32]], x_bytes: i64) -> f32:
    return x[hpvm.instance_id(0)] * 3.0 - 1.0


@hpvm.leaf
def ph_cons(v: f32, y: InOut[Ptr[f32]], y_bytes: i64) -> f32:
    i = hpvm.instance_id(0)
    y[i] = y[i] + v
    return v + 0.25


@hpvm.leaf(target="gpu:1")
def ph_half_g1(y: InOut[Ptr[f32]], y_bytes: i64):
    i = hpvm.instance_id(0)
    y[i] = y[i] * 0.5 + 1.0


@hpvm.leaf(target="cpu")
def ph_acc_cpu(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64):
    i = hpvm.instance_id(0)
    y[i] = y[i] + x[i]


@hpvm.leaf
def ph_rprod(x: In[Ptr[f32]], x_bytes: i64, m: i64) -> f32:
    p = hpvm.get_node_instance_id_x(hpvm.get_parent_node(hpvm.get_node()))
    return x[p * m + hpvm.instance_id(0)] * 3.0 - 1.0


@hpvm.leaf
def ph_rcons(v: f32, y: InOut[Ptr[f32]], y_bytes: i64, m: i64) -> f32:
    p = hpvm.get_node_instance_id_x(hpvm.get_parent_node(hpvm.get_node()))
    i = p * m + hpvm.instance_id(0)
    y[i] = y[i] + v
    return v + 0.25


def pair(h_prod: str | None, h_cons: str | None):
    """An internal node's graph: prod -> cons over a one-to-one edge."""

    @hpvm.graph
    def ph_pair(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, n: i64) -> f32:
        p = hpvm.node(ph_prod, grid=n, x=x, x_bytes=x_bytes, hint=h_prod)
        c = hpvm.node(ph_cons, grid=n, v=p.out[0], y=y, y_bytes=y_bytes, hint=h_cons)
        return c.out[0]

    return ph_pair


def rpair(h_prod: str | None, h_cons: str | None):
    """The same, replicated: each of its instances works on its own m elements."""

    @hpvm.graph
    def ph_rpair(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, m: i64) -> f32:
        p = hpvm.node(ph_rprod, grid=m, x=x, x_bytes=x_bytes, m=m, hint=h_prod)
        c = hpvm.node(ph_rcons, grid=m, v=p.out[0], y=y, y_bytes=y_bytes, m=m, hint=h_cons)
        return c.out[0]

    return ph_rpair


def host_children_under(hint: str):
    @hpvm.graph
    def ph_outer(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, n: i64) -> f32:
        r = hpvm.node(pair("cpu", "python"), x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes, n=n,
                      hint=hint)
        return r.out[0]

    return ph_outer


def run(graph, target: str, *arrays: np.ndarray, n: int = N):
    args = [x for a in arrays for x in (a, a.nbytes)]
    with hpvm.runtime(target):
        before = hpvm.stats()
        out = hpvm.wait(hpvm.launch(graph, *args, n))
        return out, copies(before, hpvm.stats())


# -- an internal node whose children all hint elsewhere ------------------------------------------


@pytest.mark.parametrize("hint", UNUSABLE + ["gpu:1", "gpu"])
@pytest.mark.parametrize("target", ["cpu", "gpu"])
def test_an_internal_node_whose_children_all_hint_the_host_runs_on_the_host(hint, target) -> None:
    """Its own placement named a GPU or a target that no kernel uses: the launch was refused (no
    GPU 5, nvptx cannot run here) or counted that GPU among its devices."""
    graph = host_children_under(hint)
    x, y = np.arange(N, dtype=np.float32), np.ones(N, np.float32)
    want_y = y.copy()
    want, _ = run(graph, "python", x, want_y)
    assert launch_devices(hpvm.compile(graph, target=target).plan) == {"host"}
    got, moved = run(graph, target, x, y)
    assert got == want and moved == (0, 0, 0)
    np.testing.assert_array_equal(y, want_y)


@pytest.mark.parametrize("target", ["cpu", "gpu"])
def test_written_views_used_only_on_the_host_under_a_gpu_hint_are_accepted(target) -> None:
    """`buffer-overlap` is for nodes away from the buffers' home; here every leaf runs on the
    host, the internal node's gpu:1 hint being overridden by both children."""

    @hpvm.graph
    def ph_views_inner(whole: In[Ptr[f32]], whole_bytes: i64, part: InOut[Ptr[f32]],
                       part_bytes: i64, n: i64):
        hpvm.node(ph_half, grid=n, y=part, y_bytes=part_bytes, hint="cpu")
        hpvm.node(ph_acc, grid=n, x=whole, x_bytes=whole_bytes, y=part, y_bytes=part_bytes,
                  hint="python")

    @hpvm.graph
    def ph_views(whole: In[Ptr[f32]], whole_bytes: i64, part: InOut[Ptr[f32]], part_bytes: i64,
                 n: i64):
        hpvm.node(ph_views_inner, whole=whole, whole_bytes=whole_bytes, part=part,
                  part_bytes=part_bytes, n=n, hint="gpu:1")

    results = {}
    for where in ("python", target):
        a = np.arange(N, dtype=np.float32)
        run(ph_views, where, a, a[2:6], n=4)
        results[where] = a
    np.testing.assert_array_equal(results[target], results["python"])


def test_a_missing_gpu_inherited_from_an_internal_node_points_at_its_hint() -> None:
    graph = host_children_under("gpu:5")
    inner = pair(None, "cpu")  # prod inherits gpu:5

    @hpvm.graph
    def ph_inherits(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, n: i64) -> f32:
        r = hpvm.node(inner, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes, n=n, hint="gpu:5")
        return r.out[0]

    x, y = np.arange(N, dtype=np.float32), np.ones(N, np.float32)
    run(graph, "cpu", x, y)
    with pytest.raises(LaunchError) as info:
        run(ph_inherits, "cpu", x, y)
    error = info.value
    assert "node ph_prod is placed on 'gpu:5' (by hint 'gpu:5' on node ph_pair" in error.message
    assert error.rule == "target-available" and error.loc.file == __file__
    assert "hint=\"gpu:5\"" in error.loc.snippet()  # the internal node's line, not ph_pair's


def test_an_internal_node_hinted_to_a_target_that_cannot_compile(monkeypatch) -> None:
    """Only the children that inherit the hint need its target: the error is theirs, at the
    hint's line."""
    monkeypatch.setattr(registry, "compilable", lambda target: target != "gpu")
    hpvm.compile(host_children_under("gpu"), target="cpu")  # nothing compiles for gpu
    inner = pair("cpu", None)

    @hpvm.graph
    def ph_compiles(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, n: i64) -> f32:
        r = hpvm.node(inner, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes, n=n, hint="gpu")
        return r.out[0]

    with pytest.raises(CompileError) as info:
        hpvm.compile(ph_compiles, target="cpu")
    error = info.value
    assert "node ph_cons is placed on 'gpu' by hint 'gpu' on node ph_pair" in error.message
    assert error.rule == "target-available" and "hint=\"gpu\"" in error.loc.snippet()


# -- seeded graphs ---------------------------------------------------------------------------

HINTS = [None, None, "cpu", "gpu", "gpu:0", "gpu:1", "python", "any"]
KINDS = {"acc": 2, "half": 1, "half_g1": 1, "acc_cpu": 2, "edge": 2, "edge_a2a": 2, "pair": 2,
         "rpair": 2}
LEAF_TARGET = {"half_g1": "gpu:1", "acc_cpu": "cpu"}
ACCESS = {"acc": [(0, False), (1, True)], "acc_cpu": [(0, False), (1, True)], "half": [(0, True)],
          "half_g1": [(0, True)], "prod": [(0, False)], "cons": [(1, True)]}  # (pointer, writes)


def generate(rng: random.Random):
    spec = []
    for _ in range(rng.randint(2, 5)):
        kind = rng.choice(list(KINDS))
        hints = [rng.choice(HINTS) for _ in range(3)]
        if kind in ("pair", "rpair") and hints[1] not in (None, "any") and \
                hints[2] not in (None, "any") and rng.random() < 0.5:
            hints[0] = rng.choice(UNUSABLE)  # both children hint elsewhere
        spec.append((kind, [rng.randrange(4) for _ in range(KINDS[kind])], hints))
    return spec


def build(spec):
    inner = {i: (pair if kind == "pair" else rpair)(h[1], h[2])
             for i, (kind, _, h) in enumerate(spec) if kind in ("pair", "rpair")}

    @hpvm.graph
    def ph_root(b0: InOut[Ptr[f32]], b0_bytes: i64, b1: InOut[Ptr[f32]], b1_bytes: i64,
                b2: InOut[Ptr[f32]], b2_bytes: i64, b3: InOut[Ptr[f32]], b3_bytes: i64, n: i64):
        bs = [(b0, b0_bytes), (b1, b1_bytes), (b2, b2_bytes), (b3, b3_bytes)]
        for k, (kind, ptrs, (h0, h1, h2)) in enumerate(spec):
            (x, xb), (y, yb) = bs[ptrs[0]], bs[ptrs[-1]]
            if kind in ("acc", "acc_cpu"):
                leaf = ph_acc if kind == "acc" else ph_acc_cpu
                hpvm.node(leaf, grid=n, x=x, x_bytes=xb, y=y, y_bytes=yb, hint=h0)
            elif kind in ("half", "half_g1"):
                hpvm.node(ph_half if kind == "half" else ph_half_g1, grid=n, y=y, y_bytes=yb, hint=h0)
            elif kind in ("edge", "edge_a2a"):
                p = hpvm.node(ph_prod, grid=n, x=x, x_bytes=xb, hint=h0)
                v = p.out[0] if kind == "edge" else hpvm.all_to_all(p.out[0])
                hpvm.node(ph_cons, grid=n, v=v, y=y, y_bytes=yb, hint=h1)
            elif kind == "pair":
                hpvm.node(inner[k], x=x, x_bytes=xb, y=y, y_bytes=yb, n=n, hint=h0)
            else:  # its instances' outputs, all-to-all to a leaf placed by its own hint
                r = hpvm.node(inner[k], grid=2, x=x, x_bytes=xb, y=y, y_bytes=yb, m=n // 2, hint=h0)
                hpvm.node(ph_cons, grid=n, v=hpvm.all_to_all(r.out[0]), y=y, y_bytes=yb, hint=h2)

    return ph_root


def leaf_runs(spec, target: str, n: int):
    """Per leaf run, in order: its device and, per root pointer, whether it reads and writes."""

    def device(place: str | None) -> str:
        place = place or target
        return {"cpu": "host", "python": "host", "gpu": "fake:0", "gpu:0": "fake:0",
                "gpu:1": "fake:1"}[place]

    def own(h: str | None) -> str | None:
        return None if h in (None, "any") else h

    runs = []
    for kind, ptrs, (h0, h1, h2) in spec:
        if kind in ("pair", "rpair"):  # the children without a hint inherit the internal node's
            leaves = [("prod", own(h1) or own(h0)), ("cons", own(h2) or own(h0))]
            leaves += [("cons", own(h2))] if kind == "rpair" else []
        elif kind.startswith("edge"):
            leaves = [("prod", own(h0)), ("cons", own(h1))]
        else:
            leaves = [(kind, own(h0) or LEAF_TARGET.get(kind))]
        for leaf, place in leaves:
            uses: dict[int, tuple[bool, bool]] = {}
            for k, writes in ACCESS[leaf]:
                slot = ptrs[min(k, len(ptrs) - 1)]
                r, w = uses.get(slot, (False, False))
                uses[slot] = (True, w or writes)
            runs.append((device(place), uses))
    return runs


def minimum_copies(spec, target: str, launches, tracked) -> tuple[int, int, int]:
    """What the valid bits require (docs/placement.md, "Moving data")."""
    counts = {"h2d": 0, "d2h": 0, "d2d": 0}
    valid: dict[int, set[str]] = {}

    def copy_to(obj: set[str], dev: str) -> None:
        src = sorted(obj, key=lambda d: d == "host")[0]
        counts["h2d" if src == "host" else "d2h" if dev == "host" else "d2d"] += 1
        obj.add(dev)

    for perm, n in launches:
        on_device = set()
        for dev, uses in leaf_runs(spec, target, n):
            merged: dict[int, tuple[bool, bool]] = {}
            for k, (r, w) in uses.items():
                mr, mw = merged.get(perm[k], (False, False))
                merged[perm[k]] = (mr or r, mw or w)
            for i, (r, w) in merged.items():
                obj = valid.setdefault(i, {"host"})
                if r and dev not in obj:
                    copy_to(obj, dev)
                if w:
                    obj.clear()
                    obj.add(dev)
                if dev != "host":
                    on_device.add(i)
        for i in on_device:  # untracked buffers come home after each launch
            if not tracked[i]:
                if "host" not in valid[i]:
                    copy_to(valid[i], "host")
                valid[i] = {"host"}
    for i, obj in valid.items():
        if tracked[i] and "host" not in obj:
            copy_to(obj, "host")  # request_memory at the end
    return counts["h2d"], counts["d2h"], counts["d2d"]


def launch_all(graph, target: str, arrays, launches, tracked):
    arrays = [a.copy() for a in arrays]
    outputs = []
    with hpvm.runtime(target):
        for a, t in zip(arrays, tracked):
            if t:
                hpvm.track_memory(a)
        before = hpvm.stats()
        for perm, n in launches:
            args = [x for i in perm for x in (arrays[i], arrays[i].nbytes)]
            outputs.append(hpvm.wait(hpvm.launch(graph, *args, n)))
        for a, t in zip(arrays, tracked):
            if t:
                hpvm.request_memory(a)
        moved = copies(before, hpvm.stats())
    return arrays, outputs, moved


@pytest.mark.parametrize("target", ["cpu", "gpu"])
def test_seeded_graphs_with_placed_hierarchies(target) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HPVMWarning)  # partial Out buffers
        for seed in range(25):
            rng = random.Random(seed)
            spec = generate(rng)
            graph = build(spec)
            arrays = [np.array([rng.randint(-4, 4) for _ in range(N)], np.float32) for _ in range(5)]
            launches = []
            for _ in range(rng.randint(1, 3)):
                repeat = launches and rng.random() < 0.5
                launches.append(launches[-1] if repeat else
                                ([rng.randrange(5) for _ in range(4)], rng.choice([N, N, 5, 1])))
            tracked = [rng.random() < 0.5 for _ in range(5)]
            where = f"seed {seed}: {spec}, launches {launches}, tracked {tracked}"
            want, _, _ = launch_all(graph, "python", arrays, launches, [False] * 5)
            got, _, moved = launch_all(graph, target, arrays, launches, tracked)
            for a, b in zip(got, want):
                np.testing.assert_array_equal(a, b, err_msg=where)
            assert moved == minimum_copies(spec, target, launches, tracked), where
