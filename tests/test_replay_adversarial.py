"""A launch repeated on arguments the host changed in place must compute, or refuse, exactly what a
launch on a cold runtime does: the replay key (rt/recording.py, Recording.matches), the checks
remembered on a tracked buffer (rt/args.py, `checked_for`, `_bind_again`), the scalars a replay
leaves packed (`same_scalar`) and the host views cached on a tracked buffer (rt/executor.py) all
compare what the host passes with what it passed before. Here the host changes a 0-d array's value,
a buffer's dtype or layout, its writability, in place; passes bad scalars to a replay; and a
generated sequence of launches interleaves all that with tracking calls, views of one buffer,
torch tensors sharing a NumPy array's memory and replaced arrays (ids and addresses reused)."""
from __future__ import annotations

import gc
import warnings

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py.errors import LaunchError, MemoryTrackingError
from programs import replay_adversarial as g

torch = pytest.importorskip("torch")

TARGETS = __import__("conftest").TARGETS
COMPILED = [t for t in TARGETS if t != "python"]


@pytest.fixture(params=["python", *COMPILED] if "python" in TARGETS else COMPILED)
def any_target(request: pytest.FixtureRequest) -> str:
    return request.param


def _nbytes(buf) -> int:
    return buf.nbytes if isinstance(buf, np.ndarray) else buf.numel() * buf.element_size()


def _track_all(target: str, *bufs) -> None:
    """On a GPU target an untracked host buffer goes home after each launch and is not replayed."""
    if target in ("gpu", "nvptx"):
        for buf in bufs:
            hpvm.track_memory(buf)


def _home(target: str, *bufs) -> None:
    if target in ("gpu", "nvptx"):
        for buf in bufs:
            hpvm.request_memory(buf)


def _refusal(fn) -> str | None:
    try:
        fn()
    except LaunchError as exc:
        return str(exc).splitlines()[0].split("error: ", 1)[1]
    return None


# -- 0-d arrays and tensors as scalars ------------------------------------------------------------

@pytest.mark.parametrize("box", ["numpy", "torch"])
def test_a_0d_scalar_changed_in_place_is_read_again(any_target: str, box: str) -> None:
    """A 0-d array (or tensor) is a number to launch(): one object whose value the host changes
    between launches must be read at every launch, as a float the kernel takes (once kept packed
    by the replay: same_scalar saw the same object) and as an integer of the recording's key (once
    equal to itself whatever it held)."""
    make = (lambda v, t: np.array(v, t)) if box == "numpy" else \
        (lambda v, t: torch.tensor(v, dtype=torch.float32 if t is np.float32 else torch.int32))
    k = make(1.0, np.float32)
    mode = make(0, np.int32)
    x = np.arange(8, dtype=np.float32)
    y = np.zeros(8, np.float32)
    with hpvm.runtime(any_target):
        _track_all(any_target, x, y)
        for step, (kv, mv) in enumerate([(1.0, 0), (2.0, 0), (3.0, 0), (-0.5, -1), (4.0, -1),
                                         (4.0, 0), (5.0, 0), (5.0, 0)]):
            k[...] = kv
            mode[...] = mv
            hpvm.wait(hpvm.launch(g.steered, x, x.nbytes, y, y.nbytes, 8, mode, False, k))
            _home(any_target, y)
            want = x * np.float32(kv) if mv == 0 else x + np.float32(kv)
            np.testing.assert_array_equal(y, want, err_msg=f"launch {step}: k={kv} mode={mv}")
            hpvm.wait(hpvm.launch(g.fill, y, y.nbytes, 8, k))
            _home(any_target, y)
            np.testing.assert_array_equal(y, np.full(8, kv, np.float32), err_msg=f"fill {step}")


# -- scalars a replay must refuse before it runs anything ------------------------------------------

@pytest.mark.parametrize("bad", ["2.0", True, None, np.zeros(2)], ids=["str", "bool", "None", "array"])
@pytest.mark.parametrize("where", ["m", "unused"])
def test_a_bad_float_is_refused_before_a_replay_runs_anything(any_target: str, bad, where: str) -> None:
    """The first kernel of a replay once ran (and wrote its buffer) before the second one's float
    was converted and refused; a float no node reads was never looked at, and the replay ran.
    A cold launch refuses both before anything runs: so must a warm one, word for word."""
    def launch(y, z, m, unused):
        hpvm.wait(hpvm.launch(g.two_steps, y, y.nbytes, z, z.nbytes, 8, 1.0, m, unused))

    bad_args = {"m": (bad, 0.0), "unused": (1.0, bad)}[where]
    messages = []
    for warm in (False, True):
        y, z = np.zeros(8, np.float32), np.ones(8, np.float32)
        with hpvm.runtime(any_target):
            _track_all(any_target, y, z)
            if warm:
                for _ in range(2):  # recorded, then replayed
                    launch(y, z, 1.0, 0.0)
            _home(any_target, y, z)
            before = (y.copy(), z.copy())
            messages.append(_refusal(lambda: launch(y, z, *bad_args)))
            _home(any_target, y, z)
            np.testing.assert_array_equal(y, before[0])
            np.testing.assert_array_equal(z, before[1])
    assert messages[0] is not None and messages[1] == messages[0]


# -- buffers changed in place ----------------------------------------------------------------------

def _numpy_dtype(y):
    y.dtype = np.int32
    return y


def _numpy_strides(y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # (NumPy 2.4 deprecates it)
        y.shape = (2, 4)
        y.strides = (4, 8)
    return y


def _torch_dtype(y):
    y.data = y.view(torch.int32)
    return y


def _torch_strides(y):
    return y.as_strided_((2, 4), (1, 2))


CHANGES = {"numpy_dtype": (np.zeros, _numpy_dtype), "numpy_strides": (np.zeros, _numpy_strides),
           "torch_dtype": (torch.zeros, _torch_dtype), "torch_strides": (torch.zeros, _torch_strides)}


@pytest.mark.parametrize("change", list(CHANGES))
@pytest.mark.parametrize("position", ["x", "y"])
def test_a_buffer_whose_dtype_or_layout_changed_in_place_is_refused(any_target: str, change: str,
                                                                    position: str) -> None:
    """Same object, same memory, same size, but another dtype (`a.dtype = np.int32`,
    `t.data = t.view(torch.int32)`) or no longer contiguous: once written as f32 by a replay (and by
    the python target, whose checks the tracked object remembered), now refused as on a cold
    runtime, in either position, word for word; passed back as it was, it is replayed again."""
    make, mutate = CHANGES[change]

    def launch(x, y):
        hpvm.wait(hpvm.launch(g.update, x, _nbytes(x), y, _nbytes(y), 8, 2.0))

    def fresh():
        x, y = make(8, dtype=np.float32 if make is np.zeros else torch.float32), \
            make(8, dtype=np.float32 if make is np.zeros else torch.float32)
        x[:] = 1.0
        return x, y

    with hpvm.runtime(any_target):
        x, y = fresh()
        if position == "x":
            x = mutate(x)
        else:
            y = mutate(y)
        cold = _refusal(lambda: launch(x, y))
    assert cold is not None
    with hpvm.runtime(any_target):
        x, y = fresh()
        launch(x, y)
        launch(x, y)  # recorded, replayed
        if position == "x":
            x = mutate(x)
        else:
            y = mutate(y)
        for _ in range(2):
            assert _refusal(lambda: launch(x, y)) == cold
        if change == "numpy_dtype":  # its dtype back: launched (and replayed) again
            (x if position == "x" else y).dtype = np.float32
            launch(x, y)
            launch(x, y)
            _home(any_target, y)
            np.testing.assert_array_equal(y, np.full(8, 8.0, np.float32))


def test_a_stream_refuses_a_pushed_buffer_whose_dtype_changed_since_the_last_push(any_target: str) -> None:
    """A push binds the very objects of the last push without checking them again: not one whose
    dtype changed in place since."""
    x = np.arange(8, dtype=np.float32)
    y = np.zeros(8, np.float32)
    with hpvm.runtime(any_target):
        handle = hpvm.launch(g.scale_stream, stream=True)
        hpvm.push(handle, x, x.nbytes, y, y.nbytes, 8, 2.0)
        hpvm.pop(handle)
        y.dtype = np.int32
        with pytest.raises(LaunchError, match="must hold f32 elements, got i32"):
            hpvm.push(handle, x, x.nbytes, y, y.nbytes, 8, 3.0)
        y.dtype = np.float32  # (a refused push leaves the stream as it was)
        hpvm.push(handle, x, x.nbytes, y, y.nbytes, 8, 3.0)
        hpvm.pop(handle)
        hpvm.wait(handle)
    np.testing.assert_array_equal(y, x * 3)


def test_a_buffer_read_while_read_only_can_be_written_once_writable_again(any_target: str) -> None:
    """The host view cached on a tracked array (rt/executor.py, buffer_arg) was made while it was
    read-only, which a NumPy view keeps: the python target then wrote through it and failed inside
    the leaf ('assignment destination is read-only') though the launch's checks passed."""
    a = np.ones(8, np.float32)
    b = np.ones(8, np.float32)
    with hpvm.runtime(any_target):
        a.flags.writeable = False
        hpvm.wait(hpvm.launch(g.update, a, a.nbytes, b, b.nbytes, 8, 1.0))  # a is only read
        a.flags.writeable = True
        hpvm.wait(hpvm.launch(g.update, b, b.nbytes, a, a.nbytes, 8, 1.0))  # now a is written
        _home(any_target, a, b)
    np.testing.assert_array_equal(b, np.full(8, 2.0, np.float32))
    np.testing.assert_array_equal(a, np.full(8, 3.0, np.float32))


@pytest.mark.skipif(not [t for t in TARGETS if t in ("gpu", "nvptx")], reason="no GPU target here")
def test_a_tracked_array_made_read_only_with_its_data_on_a_device() -> None:
    """Its newest data cannot come home: request_memory, untrack_memory and cleanup say so with a
    MemoryTrackingError (once an InternalError from a NumPy assignment), and cleanup still brings
    every other tracked buffer home (it once stopped at the read-only one, and the others kept
    their old contents)."""
    target = next(t for t in TARGETS if t in ("gpu", "nvptx"))
    ro, other = np.zeros(8, np.float32), np.zeros(8, np.float32)
    with pytest.raises(MemoryTrackingError, match="made read-only"):
        with hpvm.runtime(target):
            hpvm.track_memory(ro)
            hpvm.track_memory(other)
            hpvm.wait(hpvm.launch(g.fill, ro, ro.nbytes, 8, 1.0))
            hpvm.wait(hpvm.launch(g.fill, other, other.nbytes, 8, 2.0))
            ro.flags.writeable = False
            for call in (hpvm.request_memory, hpvm.untrack_memory):
                with pytest.raises(MemoryTrackingError, match="made read-only"):
                    call(ro)
    np.testing.assert_array_equal(other, np.full(8, 2.0, np.float32))
    ro.flags.writeable = True
    with hpvm.runtime(target):  # a new runtime starts clean
        hpvm.wait(hpvm.launch(g.fill, ro, ro.nbytes, 8, 3.0))
    np.testing.assert_array_equal(ro, np.full(8, 3.0, np.float32))


# -- generated sequences ---------------------------------------------------------------------------

SIZES = (32, 32, 32, 24)


def _generated(target: str, seed: int, steps: int) -> tuple[int, int]:
    """Random launches of four graphs over four arrays, each passed as itself, a kept view, a fresh
    slice or a torch tensor sharing its memory (one array for two parameters included), with
    scalars as Python, NumPy and 0-d boxes changed in place; between them the arrays are changed,
    tracked, untracked, requested, replaced by new ones (ids and addresses reused) and made
    read-only and writable again. Every result is NumPy's; a refusal happens exactly when a cold
    launch refuses (a read-only output). Returns the replayed and launched counts."""
    rng = np.random.default_rng(seed)
    gpu = target in ("gpu", "nvptx")
    bases = [rng.standard_normal(s).astype(np.float32) for s in SIZES]
    mirror = [b.copy() for b in bases]
    views = [b[:] for b in bases]
    tens = [torch.from_numpy(b) for b in bases]
    tracked: dict[int, object] = {}
    kbox, mbox = np.array(0.0, np.float32), np.array(0, np.int32)
    log: list[str] = []

    def ref(b: int):
        if gpu:  # (on a GPU, objects sharing memory have copies of their own: one object each)
            return bases[b]
        return (bases[b], views[b], bases[b][:], tens[b])[rng.integers(4)]

    def writable(obj) -> bool:
        return bool(obj.flags.writeable) if isinstance(obj, np.ndarray) else not obj.requires_grad

    def scalar():
        v = float(rng.choice([0.0, -0.0, 1.5, -2.0, 0.25, 3.0]))
        form = rng.integers(6)
        if form == 0:
            return np.float32(v)
        if form == 1:
            return int(v)
        if form == 2:
            return np.float64(v)
        if form == 3:
            kbox[...] = v
            return kbox
        return v

    def integer(m: int):
        form = rng.integers(5)
        if form == 4:
            mbox[...] = m
            return mbox
        return (m, np.int32(m), np.int64(m), int(m))[form]

    def check(where) -> None:
        if gpu:
            for obj in tracked.values():
                hpvm.request_memory(obj)
        for b, (got, want) in enumerate(zip(bases, mirror)):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=(
                f"seed {seed}, {target}, step {where}, array {b}; last steps:\n" + "\n".join(log[-8:])))

    def launch(graph, args, expect: bool, apply) -> None:
        try:
            hpvm.wait(hpvm.launch(graph, *args))
        except LaunchError:
            assert not expect, f"seed {seed}: refused, as no cold launch would\n" + "\n".join(log[-8:])
            return
        assert expect, f"seed {seed}: accepted, where a cold launch refuses\n" + "\n".join(log[-8:])
        apply()

    def untrack_memory_of(b: int) -> None:
        for key in [key for key, obj in tracked.items() if obj is bases[b] or obj is views[b] or
                    obj is tens[b]]:
            hpvm.untrack_memory(tracked.pop(key))

    with hpvm.runtime(target):
        if gpu:
            for b in bases:
                hpvm.track_memory(b)
                tracked[id(b)] = b
        start = hpvm.stats()
        for step in range(steps):
            op = rng.random()
            if op < 0.35:
                bx, by = (int(v) for v in rng.integers(len(bases), size=2))
                x, y = ref(bx), ref(by)
                n = int(min(bases[bx].size, bases[by].size) - 8 * rng.integers(2))
                k = scalar()
                kf = np.float32(float(k))
                log.append(f"update x={bx} ({type(x).__name__}) y={by} ({type(y).__name__}) n={n} k={k!r}")

                def apply(bx=bx, by=by, n=n, kf=kf):
                    xv = mirror[bx][:n].copy()
                    mirror[by][:n] = mirror[by][:n] + xv * kf
                launch(g.update, (x, _nbytes(x), y, _nbytes(y), n if rng.random() < 0.7 else
                                  np.int64(n), k), writable(y), apply)
            elif op < 0.45:
                by = int(rng.integers(len(bases)))
                y = ref(by)
                n = int(bases[by].size - 8 * rng.integers(2))
                k = scalar()
                kf = np.float32(float(k))
                log.append(f"fill y={by} ({type(y).__name__}) n={n} k={k!r}")

                def apply(by=by, n=n, kf=kf):
                    mirror[by][:n] = kf
                launch(g.fill, (y, _nbytes(y), n, k), writable(y), apply)
            elif op < 0.57:
                bx, by = (int(v) for v in rng.integers(len(bases), size=2))
                x, y = ref(bx), ref(by)
                n = int(min(bases[bx].size, bases[by].size))
                m = int(rng.choice([0, -1, 1, 2**31 - 1, -2**31]))
                f = bool(rng.integers(2))
                k = scalar()
                kf = np.float32(float(k))
                mode, flag = integer(m), (f, np.bool_(f), int(f))[rng.integers(3)]
                log.append(f"steered x={bx} y={by} n={n} mode={mode!r} flag={flag!r} k={k!r}")

                def apply(bx=bx, by=by, n=n, m=m, f=f, kf=kf):
                    xv, yv = mirror[bx][:n].copy(), mirror[by][:n]
                    r = xv * kf if m == 0 else xv + kf if m < 0 else yv - xv
                    mirror[by][:n] = r * np.float32(2) if f else r
                launch(g.steered, (x, _nbytes(x), y, _nbytes(y), n, mode, flag, k), writable(y), apply)
            elif op < 0.65:
                by, bz = (int(v) for v in rng.choice(len(bases), 2, replace=False))
                y, z = ref(by), ref(bz)
                n = int(min(bases[by].size, bases[bz].size))
                k, m = scalar(), scalar()
                kf, mf = np.float32(float(k)), np.float32(float(m))  # (k and m may be one box)
                log.append(f"two_steps y={by} z={bz} n={n} k={k!r} m={m!r}")

                def apply(by=by, bz=bz, n=n, kf=kf, mf=mf):
                    mirror[by][:n] += kf
                    mirror[bz][:n] *= mf
                launch(g.two_steps, (y, _nbytes(y), z, _nbytes(z), n, k, m, 0.0),
                       writable(y) and writable(z), apply)
            elif op < 0.75:
                b = int(rng.integers(len(bases)))
                if not bases[b].flags.writeable:
                    continue
                if gpu:  # (the host's writes to a tracked buffer are not the runtime's)
                    untrack_memory_of(b)
                i, v = int(rng.integers(bases[b].size)), np.float32(rng.standard_normal())
                log.append(f"change array {b}[{i}] = {v}")
                bases[b][i] = mirror[b][i] = v
                if gpu and rng.random() < 0.7:
                    hpvm.track_memory(bases[b])
                    tracked[id(bases[b])] = bases[b]
            elif op < 0.82:
                b = int(rng.integers(len(bases)))
                obj = bases[b] if gpu else (bases[b], views[b], tens[b])[rng.integers(3)]
                if tracked.get(id(obj)) is obj:
                    if rng.random() < 0.5:
                        log.append(f"untrack {b} ({type(obj).__name__})")
                        hpvm.untrack_memory(tracked.pop(id(obj)))
                    else:
                        log.append(f"request {b}")
                        hpvm.request_memory(obj)
                else:
                    log.append(f"track {b} ({type(obj).__name__})")
                    hpvm.track_memory(obj)
                    tracked[id(obj)] = obj
            elif op < 0.88:
                b = int(rng.integers(len(bases)))
                untrack_memory_of(b)
                size = bases[b].size
                bases[b] = views[b] = tens[b] = None
                gc.collect()  # (the new array may take the old one's id and address)
                bases[b] = rng.standard_normal(size).astype(np.float32)
                views[b], tens[b], mirror[b] = bases[b][:], torch.from_numpy(bases[b]), bases[b].copy()
                if gpu:
                    hpvm.track_memory(bases[b])
                    tracked[id(bases[b])] = bases[b]
                log.append(f"replace array {b}")
            elif op < 0.93:
                b = int(rng.integers(len(bases)))
                writeable = not bases[b].flags.writeable
                if writeable:
                    bases[b].flags.writeable = views[b].flags.writeable = True
                else:
                    if gpu and tracked.get(id(bases[b])) is bases[b]:
                        hpvm.request_memory(bases[b])  # (its data home: it could not take it later)
                    views[b].flags.writeable = False
                    bases[b].flags.writeable = False
                log.append(f"array {b} writeable = {writeable}")
            else:
                check(step)
        check("end")
        end = hpvm.stats()
    return end["replayed_launches"] - start["replayed_launches"], end["launches"] - start["launches"]


@pytest.mark.parametrize("seed", range(4))
def test_generated_sequences_compute_what_numpy_computes(seed: int) -> None:
    for target in COMPILED:
        steps = 300 if target == "cpu" else 80  # (Triton's interpreter is slow)
        replayed, launched = _generated(target, 4100 + seed, steps)
        if target == "cpu":
            assert replayed >= steps // 20  # (not vacuous: the fast paths ran)
    if "python" in TARGETS and seed == 0:
        _generated("python", 4100, 200)
