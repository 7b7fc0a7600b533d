"""Adversarial tests of the memory tracker under mixed placements (docs/placement.md, "Moving
data"; docs/language.md, "Memory"): one buffer bound to several parameters of one leaf, replays
and rebinds of device graphs, streams, and a seeded state machine of launches, requests,
host writes, (un)tracking and cleanups whose results are held to NumPy and whose copy counts are
held to the minimum the valid bits allow.

Without a GPU the gpu target runs on fake devices (fake:0, fake:1) through Triton's interpreter."""
from __future__ import annotations

import random
import warnings

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py import In, InOut, Out, Ptr, f32, i64
from hpvm_py.backends import registry
from hpvm_py.errors import HPVMWarning, LaunchError
from test_placement import copies

needs_fake = pytest.mark.skipif(not registry.available("gpu") or registry.available("nvptx"),
                                reason="fake devices stand in only where there is no CUDA GPU (CI)")
pytestmark = needs_fake

N = 8


# -- leaves -------------------------------------------------------------------------------------


@hpvm.leaf
def adv_scale(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64):
    i = hpvm.instance_id(0)
    y[i] = x[i] * 2.0 + 1.0


@hpvm.leaf
def adv_acc(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64):
    i = hpvm.instance_id(0)
    y[i] = y[i] + x[i]


@hpvm.leaf
def adv_half(y: InOut[Ptr[f32]], y_bytes: i64):
    i = hpvm.instance_id(0)
    y[i] = y[i] * 0.5 + 1.0


@hpvm.leaf
def adv_out_first(y: Out[Ptr[f32]], y_bytes: i64, x: In[Ptr[f32]], x_bytes: i64):
    """Its Out parameter comes before its In one: bound to one buffer, the In one must still see
    the buffer's data on the device."""
    i = hpvm.instance_id(0)
    y[i] = x[i] - 3.0


@hpvm.leaf
def adv_partial(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64):
    i = hpvm.instance_id(0)
    if i % 2 == 0:
        y[i] = x[i] + 5.0


@hpvm.leaf
def adv_mix(x: In[Ptr[f32]], x_bytes: i64, y: In[Ptr[f32]], y_bytes: i64, z: Out[Ptr[f32]],
            z_bytes: i64):
    i = hpvm.instance_id(0)
    z[i] = x[i] - y[i]


@hpvm.leaf
def adv_prod(x: In[Ptr[f32]], x_bytes: i64) -> f32:
    i = hpvm.instance_id(0)
    return x[i] * 3.0


@hpvm.leaf
def adv_cons(v: f32, y: InOut[Ptr[f32]], y_bytes: i64):
    i = hpvm.instance_id(0)
    y[i] = y[i] + v


@hpvm.leaf
def adv_rscale(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, m: i64):
    p = hpvm.get_node_instance_id_x(hpvm.get_parent_node(hpvm.get_node()))
    i = p * m + hpvm.instance_id(0)
    y[i] = x[i] + 7.0


@hpvm.graph
def adv_rinner(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, m: i64):
    hpvm.node(adv_rscale, grid=m, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes, m=m)


@hpvm.graph
def adv_rinner_cpu(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, m: i64):
    hpvm.node(adv_rscale, grid=m, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes, m=m, hint="cpu")


@hpvm.leaf(target="cpu")
def adv_host_fill(y: Out[Ptr[f32]], y_bytes: i64):
    y[hpvm.instance_id(0)] = 100.0


# -- one buffer bound to an Out parameter before an In parameter ---------------------------------


def out_first_graph(hint: str | None):
    @hpvm.graph
    def adv_out_first_root(y: Out[Ptr[f32]], y_bytes: i64, x: In[Ptr[f32]], x_bytes: i64, n: i64):
        hpvm.node(adv_out_first, grid=n, y=y, y_bytes=y_bytes, x=x, x_bytes=x_bytes, hint=hint)

    return adv_out_first_root


@pytest.mark.parametrize("runtime_target,hint", [("cpu", "gpu:0"), ("cpu", "gpu:1"), ("gpu", None)])
@pytest.mark.parametrize("tracked", [False, True])
def test_one_buffer_as_out_then_in_is_copied_in(runtime_target, hint, tracked) -> None:
    root = out_first_graph(hint)
    with hpvm.runtime(runtime_target):
        a = np.arange(1, N + 1, dtype=np.float32)
        if tracked:
            hpvm.track_memory(a)
        before = hpvm.stats()
        hpvm.wait(hpvm.launch(root, a, a.nbytes, a, a.nbytes, N))
        if tracked:
            hpvm.request_memory(a)
        assert copies(before, hpvm.stats()) == (1, 1, 0)  # in once (read), home once (written)
    np.testing.assert_array_equal(a, np.arange(1, N + 1, dtype=np.float32) - 3)


def test_a_replay_of_out_then_in_copies_in_what_the_host_wrote() -> None:
    """The replay acquires the recorded buffers in the order the executor does: the read first."""
    root = out_first_graph(None)

    @hpvm.graph
    def adv_host_root(y: Out[Ptr[f32]], y_bytes: i64, n: i64):
        hpvm.node(adv_host_fill, grid=n, y=y, y_bytes=y_bytes)

    with hpvm.runtime("gpu"):
        a = np.zeros(N, np.float32)
        hpvm.track_memory(a)
        for _ in range(2):
            hpvm.wait(hpvm.launch(root, a, a.nbytes, a, a.nbytes, N))
        hpvm.wait(hpvm.launch(adv_host_root, a, a.nbytes, N))  # only the host copy is valid
        replays = hpvm.stats()["replayed_launches"]
        hpvm.wait(hpvm.launch(root, a, a.nbytes, a, a.nbytes, N))
        assert hpvm.stats()["replayed_launches"] == replays + 1
        hpvm.request_memory(a)
    np.testing.assert_array_equal(a, np.full(N, 97, np.float32))


@pytest.mark.parametrize("hint", ["gpu", "cpu"])
def test_a_stream_stage_with_one_buffer_as_out_then_in(hint) -> None:
    st = hpvm.streaming

    @hpvm.leaf
    def adv_stage_out_first(t: i64, y: Out[Ptr[f32]], y_bytes: i64, x: In[Ptr[f32]], x_bytes: i64) -> i64:
        i = hpvm.instance_id(0)
        y[i] = x[i] - 3.0
        return t

    @hpvm.graph
    def adv_stream_root(a: InOut[Ptr[f32]], a_bytes: i64, n: i64) -> i64:
        s = hpvm.node(adv_stage_out_first, grid=n, t=st(n), y=st(a), y_bytes=st(a_bytes), x=st(a),
                      x_bytes=st(a_bytes), hint=hint)
        h = hpvm.node(adv_stage_out_first, grid=n, t=st(hpvm.all_to_all(s.out[0])), y=st(a),
                      y_bytes=st(a_bytes), x=st(a), x_bytes=st(a_bytes), hint="gpu:1")
        return h.out[0]

    with hpvm.runtime("gpu"):
        items = [np.arange(N, dtype=np.float32) * (k + 1) for k in range(3)]
        h = hpvm.launch(adv_stream_root, stream=True, depth=2)
        for a in items:
            hpvm.push(h, a, a.nbytes, N)
        for _ in items:
            hpvm.pop(h)
        hpvm.wait(h)
    for k, a in enumerate(items):
        np.testing.assert_array_equal(a, np.arange(N, dtype=np.float32) * (k + 1) - 6)


# -- rebinding a recording whose CUDA-graph capture found no graph ------------------------------


def test_rebinding_a_replayed_recording_with_side_streams_on_a_device_without_graphs() -> None:
    """Two independent kernels run on two streams; the third launch tries a CUDA graph (the fake
    device has none: graph_device is cleared), and the fourth rebinds that recording."""

    @hpvm.graph
    def adv_two_streams(a: InOut[Ptr[f32]], a_bytes: i64, b: InOut[Ptr[f32]], b_bytes: i64,
                        c: InOut[Ptr[f32]], c_bytes: i64, n: i64):
        hpvm.node(adv_scale, grid=n, x=a, x_bytes=a_bytes, y=b, y_bytes=b_bytes)
        hpvm.node(adv_half, grid=n, y=c, y_bytes=c_bytes)

    with hpvm.runtime("gpu"):
        arrs = [np.arange(N, dtype=np.float32) + k for k in range(6)]
        for a in arrs:
            hpvm.track_memory(a)
        for bufs in [(0, 1, 2)] * 3 + [(3, 4, 5)] * 2:
            hpvm.wait(hpvm.launch(adv_two_streams, *[arrs[i] for i in bufs], N))
        assert hpvm.stats()["rebound_launches"] >= 1
        for a in arrs:
            hpvm.request_memory(a)
    base = [np.arange(N, dtype=np.float32) + k for k in range(6)]
    np.testing.assert_array_equal(arrs[1], base[0] * 2 + 1)
    np.testing.assert_array_equal(arrs[4], base[3] * 2 + 1)
    half = lambda v: v * 0.5 + 1  # noqa: E731
    np.testing.assert_array_equal(arrs[2], half(half(half(base[2]))))
    np.testing.assert_array_equal(arrs[5], half(half(base[5])))


# -- views of one array as two arguments ---------------------------------------------------------


def views_graph(hint: str | None, written: bool):
    if written:
        @hpvm.graph
        def adv_views(whole: In[Ptr[f32]], whole_bytes: i64, part: InOut[Ptr[f32]],
                      part_bytes: i64, out: Out[Ptr[f32]], out_bytes: i64, n: i64, m: i64):
            hpvm.node(adv_half, grid=m, y=part, y_bytes=part_bytes, hint=hint)
            hpvm.node(adv_scale, grid=n, x=whole, x_bytes=whole_bytes, y=out, y_bytes=out_bytes)
    else:
        @hpvm.graph
        def adv_views(whole: In[Ptr[f32]], whole_bytes: i64, part: In[Ptr[f32]],
                      part_bytes: i64, out: Out[Ptr[f32]], out_bytes: i64, n: i64, m: i64):
            hpvm.node(adv_mix, grid=m, x=whole, x_bytes=whole_bytes, y=part, y_bytes=part_bytes,
                      z=out, z_bytes=out_bytes, hint=hint)
    return adv_views


def _views_launch(graph, target: str):
    a = np.arange(N, dtype=np.float32)
    part = a[2:6]
    out = np.zeros(N, np.float32)
    with hpvm.runtime(target), warnings.catch_warnings():
        warnings.simplefilter("ignore", HPVMWarning)
        hpvm.wait(hpvm.launch(graph, a, a.nbytes, part, part.nbytes, out, out.nbytes, N, 4))
        hpvm.request_memory(out)
    return a, out


@pytest.mark.parametrize("runtime_target,hint", [("gpu", None), ("cpu", "gpu:1")])
def test_written_views_of_one_array_copied_to_a_device_are_refused(runtime_target, hint) -> None:
    """Each view would get its own device copy; the other would not see the writes (the python
    target writes the array itself): refused, naming both arguments and the rule."""
    with pytest.raises(LaunchError, match=r"'whole' and 'part' of adv_views\w* share memory") as info:
        _views_launch(views_graph(hint, written=True), runtime_target)
    assert info.value.rule == "buffer-overlap" and info.value.loc.file == __file__
    a, out = _views_launch(views_graph("cpu", written=True), "cpu")  # on the host: the same memory
    expected = np.arange(N, dtype=np.float32)
    expected[2:6] = expected[2:6] * 0.5 + 1
    np.testing.assert_array_equal(a, expected)
    np.testing.assert_array_equal(out, expected * 2 + 1)


@pytest.mark.parametrize("runtime_target,hint", [("gpu", None), ("cpu", "gpu:1"), ("cpu", None)])
def test_views_of_one_array_that_are_only_read_are_accepted(runtime_target, hint) -> None:
    a, out = _views_launch(views_graph(hint, written=False), runtime_target)
    base = np.arange(N, dtype=np.float32)
    np.testing.assert_array_equal(out[:4], base[:4] - base[2:6])
    assert not out[4:].any()


def test_a_tracked_buffer_changed_on_the_host_is_untracked_and_tracked_again() -> None:
    """docs/language.md, "Memory": after request_memory the device copy stays valid (a relaunch
    copies nothing in); the documented way to hand the runtime new host data is untrack, write,
    track again: the next launch copies it in and sees it."""

    @hpvm.graph
    def adv_twice(x: InOut[Ptr[f32]], x_bytes: i64, n: i64):
        hpvm.node(adv_half, grid=n, y=x, y_bytes=x_bytes)

    with hpvm.runtime("gpu"):
        a = np.full(N, 4.0, np.float32)
        hpvm.track_memory(a)
        hpvm.wait(hpvm.launch(adv_twice, a, a.nbytes, N))
        hpvm.request_memory(a)
        np.testing.assert_array_equal(a, 3.0)
        before = hpvm.stats()
        hpvm.wait(hpvm.launch(adv_twice, a, a.nbytes, N))  # the device copy is valid: no copy in
        assert copies(before, hpvm.stats())[0] == 0
        hpvm.untrack_memory(a)  # brings 2.5 home
        np.testing.assert_array_equal(a, 2.5)
        a[:] = 10.0
        hpvm.track_memory(a)
        before = hpvm.stats()
        hpvm.wait(hpvm.launch(adv_twice, a, a.nbytes, N))
        hpvm.request_memory(a)
        assert copies(before, hpvm.stats())[:2] == (1, 1)
    np.testing.assert_array_equal(a, 6.0)


# -- a seeded state machine ----------------------------------------------------------------------

# kind -> (leaf or graph, pointer parameters with their directions)
LEAVES = {
    "scale": (adv_scale, [("x", "in"), ("y", "out")]),
    "acc": (adv_acc, [("x", "in"), ("y", "inout")]),
    "half": (adv_half, [("y", "inout")]),
    "out_first": (adv_out_first, [("y", "out"), ("x", "in")]),
    "partial": (adv_partial, [("x", "in"), ("y", "partial")]),
    "mix": (adv_mix, [("x", "in"), ("y", "in"), ("z", "out")]),
    "rinner": (adv_rinner, [("x", "in"), ("y", "out")]),
    "rinner_cpu": (adv_rinner_cpu, [("x", "in"), ("y", "out")]),
    "prodcons": (None, [("x", "in"), ("y", "inout")]),
}
HINTS = [None, "cpu", "gpu", "gpu:0", "gpu:1", "python"]


def reference(kind: str, bufs: list[np.ndarray], n: int) -> None:
    v = [b[:n] for b in bufs]
    if kind == "scale":
        v[1][:] = v[0] * 2 + 1
    elif kind == "acc":
        v[1][:] = v[1] + v[0]
    elif kind == "half":
        v[0][:] = v[0] * 0.5 + 1
    elif kind == "out_first":
        v[0][:] = v[1] - 3
    elif kind == "partial":
        v[1][::2] = v[0][::2] + 5
    elif kind == "mix":
        v[2][:] = v[0] - v[1]
    elif kind in ("rinner", "rinner_cpu"):
        m = 2 * (n // 2)
        bufs[1][:m] = bufs[0][:m] + 7
    elif kind == "prodcons":
        v[1][:] = v[1] + v[0] * 3


def build(spec):
    @hpvm.graph
    def adv_fuzz_root(b0: InOut[Ptr[f32]], b0_bytes: i64, b1: InOut[Ptr[f32]], b1_bytes: i64,
                      b2: InOut[Ptr[f32]], b2_bytes: i64, b3: InOut[Ptr[f32]], b3_bytes: i64, n: i64):
        bs = [(b0, b0_bytes), (b1, b1_bytes), (b2, b2_bytes), (b3, b3_bytes)]
        for kind, ptrs, hint, hint2 in spec:
            func, params = LEAVES[kind]
            kw = {}
            for (name, _), k in zip(params, ptrs):
                kw[name], kw[name + "_bytes"] = bs[k]
            if kind.startswith("rinner"):
                hpvm.node(func, grid=2, m=n // 2, hint=hint, **kw)
            elif kind == "prodcons":
                p = hpvm.node(adv_prod, grid=n, x=kw["x"], x_bytes=kw["x_bytes"], hint=hint)
                hpvm.node(adv_cons, grid=n, v=p.out[0], y=kw["y"], y_bytes=kw["y_bytes"], hint=hint2)
            else:
                hpvm.node(func, grid=n, hint=hint, **kw)

    return adv_fuzz_root


def device(hint: str | None, runtime_target: str) -> str:
    return {"cpu": "host", "python": "host", "gpu": "fake:0", "gpu:0": "fake:0",
            "gpu:1": "fake:1"}[hint or runtime_target]


def accesses(spec, runtime_target: str, n: int):
    """Per leaf run: its device and, per root parameter, whether it reads and writes it."""
    runs = []
    for kind, ptrs, hint, hint2 in spec:
        if kind == "prodcons":
            runs.append((device(hint, runtime_target), {ptrs[0]: (True, False)}))
            runs.append((device(hint2, runtime_target), {ptrs[1]: (True, True)}))
            continue
        uses: dict[int, tuple[bool, bool]] = {}
        for (_, direction), k in zip(LEAVES[kind][1], ptrs):
            whole = 2 * (n // 2) if kind.startswith("rinner") else n
            reads = direction in ("in", "inout", "partial") or (direction == "out" and whole < N)
            writes = direction != "in"
            r, w = uses.get(k, (False, False))
            uses[k] = (r or reads, w or writes)
        runs.append((device("cpu" if kind == "rinner_cpu" else hint, runtime_target), uses))
    return runs


class Model:
    """The copies the valid bits require (docs/placement.md, "Moving data")."""

    def __init__(self) -> None:
        self.objects: dict[int, dict] = {}
        self.counts = {"h2d": 0, "d2h": 0, "d2d": 0}

    def copy_to(self, obj: dict, dev: str) -> None:
        src = sorted(obj["valid"], key=lambda d: d == "host")[0]
        self.counts["h2d" if src == "host" else "d2h" if dev == "host" else "d2d"] += 1
        obj["valid"].add(dev)

    def acquire(self, obj: dict, dev: str, reads: bool, writes: bool) -> None:
        if reads and dev not in obj["valid"]:
            self.copy_to(obj, dev)
        if writes:
            obj["valid"] = {dev}

    def home(self, obj: dict) -> None:
        if "host" not in obj["valid"]:
            self.copy_to(obj, "host")


def run_machine(seed: int, runtime_target: str) -> None:
    rng = random.Random(seed)
    specs = []
    for _ in range(rng.randint(1, 2)):
        plain, spec = rng.random() < 0.4, []
        for _ in range(rng.randint(2, 5)):
            kind = rng.choice(list(LEAVES))
            ptrs = [rng.randrange(4) for _ in LEAVES[kind][1]]
            spec.append((kind, ptrs, *((None, None) if plain else (rng.choice(HINTS), rng.choice(HINTS)))))
        specs.append(spec)
    graphs = [build(s) for s in specs]
    count = 5
    arrays = [np.array([rng.randint(-4, 4) for _ in range(N)], np.float32) for _ in range(count)]
    expected = [a.copy() for a in arrays]
    model, tracked, log = Model(), [False] * count, []

    def where(op: str) -> str:
        return f"seed {seed} on {runtime_target}, {op}; specs {specs}; ops {log}"

    def check_all(op: str) -> None:
        for i in range(count):
            if tracked[i]:
                hpvm.request_memory(arrays[i])
                model.home(model.objects[i])
            np.testing.assert_array_equal(arrays[i], expected[i], err_msg=where(op))

    def stats() -> dict:
        return dict(zip(("h2d", "d2h", "d2d"), copies({"h2d_copies": 0, "d2h_copies": 0,
                                                        "d2d_copies": 0}, hpvm.stats())))

    hpvm.init(runtime_target)
    try:
        hpvm.stats(reset=True)
        for i in range(count):
            if rng.random() < 0.5:
                hpvm.track_memory(arrays[i])
                tracked[i] = True
                model.objects[i] = {"valid": {"host"}, "implicit": False}
        last = None
        for _ in range(rng.randint(4, 20)):
            op = rng.choice(["launch"] * 5 + ["again"] * 3 + ["rebind"] * 3 +
                            ["request", "check", "write", "track", "untrack", "cleanup"])
            if op in ("again", "rebind"):
                if last is None:
                    continue
                g, perm, n = last
                if op == "rebind":  # other buffers, aliased alike
                    sigma = list(range(count))
                    rng.shuffle(sigma)
                    perm = [sigma[i] for i in perm]
                op = "launch"
            elif op == "launch":
                g, perm, n = rng.randrange(len(specs)), [rng.randrange(count) for _ in range(4)], \
                    rng.choice([N, N, N, 6, 7])
            before, want = stats(), dict(model.counts)
            if op == "launch":
                last = (g, perm, n)
                log.append(("launch", g, perm, n))
                args = [x for i in perm for x in (arrays[i], arrays[i].nbytes)]
                hpvm.wait(hpvm.launch(graphs[g], *args, n))
                for kind, ptrs, _, _ in specs[g]:
                    reference(kind, [expected[perm[k]] for k in ptrs], n)
                on_device = set()
                for dev, uses in accesses(specs[g], runtime_target, n):
                    merged: dict[int, tuple[bool, bool]] = {}
                    for k, (r, w) in uses.items():
                        mr, mw = merged.get(perm[k], (False, False))
                        merged[perm[k]] = (mr or r, mw or w)
                    for i, (r, w) in merged.items():
                        obj = model.objects.setdefault(i, {"valid": {"host"}, "implicit": True})
                        model.acquire(obj, dev, r, w)
                        if dev != "host":
                            on_device.add(i)
                for i in on_device:  # untracked buffers come home after the launch
                    obj = model.objects[i]
                    if obj["implicit"]:
                        model.home(obj)
                        obj["valid"] = {"host"}
            elif op == "request":
                i = rng.randrange(count)
                log.append(("request", i))
                if i in model.objects:
                    hpvm.request_memory(arrays[i])
                    model.home(model.objects[i])
            elif op == "check":
                log.append(("check",))
                check_all("check")
            elif op == "write":  # the host writes a buffer: a tracked one is untracked first
                i = rng.randrange(count)
                log.append(("write", i))
                if tracked[i]:
                    hpvm.untrack_memory(arrays[i])
                    model.home(model.objects.pop(i))
                    tracked[i] = False
                arrays[i] += 1
                expected[i] += 1
                if i in model.objects:
                    assert model.objects[i]["valid"] == {"host"}, where("write")
                if rng.random() < 0.5 and not tracked[i]:
                    hpvm.track_memory(arrays[i])
                    tracked[i] = True
                    model.objects.setdefault(i, {"valid": {"host"}, "implicit": False})["implicit"] = False
            elif op == "track":
                i = rng.randrange(count)
                log.append(("track", i))
                hpvm.track_memory(arrays[i])
                tracked[i] = True
                model.objects.setdefault(i, {"valid": {"host"}, "implicit": True})["implicit"] = False
            elif op == "untrack":
                i = rng.randrange(count)
                log.append(("untrack", i))
                if i in model.objects:
                    hpvm.untrack_memory(arrays[i])
                    model.home(model.objects.pop(i))
                    tracked[i] = False
            elif op == "cleanup":  # brings every buffer home
                log.append(("cleanup",))
                hpvm.cleanup()
                for i in range(count):
                    np.testing.assert_array_equal(arrays[i], expected[i], err_msg=where("cleanup"))
                model, tracked = Model(), [False] * count
                hpvm.init(runtime_target)
                hpvm.stats(reset=True)
                continue
            got = stats()
            delta = {k: got[k] - before[k] for k in got}
            need = {k: model.counts[k] - want[k] for k in want}
            assert delta == need, where(f"copies {delta}, the valid bits need {need}")
        check_all("end")
    finally:
        hpvm.cleanup()


@pytest.mark.parametrize("runtime_target", ["cpu", "gpu"])
def test_state_machine_of_mixed_placements(runtime_target) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", HPVMWarning)  # partial Out buffers
        for seed in range(40):
            run_machine(seed, runtime_target)
