"""`hpvmc run` with f16, bf16 and other typed values: what the narrow-floats hunt found.

- `hpvmc run --set s=K` for a float parameter read the integer K with float(), rounding it to f64
  before the parameter's type (twice, where a launch argument rounds once: docs/language.md,
  "Integer to float rounds to nearest even, once, wherever the integer comes from"), and refused
  an integer in 0x notation, which docs/cli.md says a scalar takes.
- `hpvmc run` of a root with one output (`-> f16`, not a tuple) failed with an internal TypeError
  (it iterated the bare value wait() returns), and printed nothing when that output was 0.
- `hpvmc run` printed a bf16 output as its bits (`output 0: 16320` for 1.5), where it summarises a
  bf16 buffer by its values.
- `hpvmc run --set x=FILE.npy` converted floats (f16 data too) into an integer buffer with
  NumPy's astype: NaN and out-of-range values went as C leaves them (NaN as INT_MIN, -1.5 as 255
  in a u8, 65504 as -32 in an i8), not by the language's saturating conversion (NaN gives 0).
"""
from __future__ import annotations

import contextlib
import io
import math
import random
import textwrap
from pathlib import Path

import numpy as np

import hpvm_py as hpvm
from hpvm_py import cli
from hpvm_py.types import bf16_from_bits


def bf16_of(x: float) -> float:
    """x rounded to f32, then to bf16 to nearest even (from the bits, NaN aside)."""
    bits = int(np.float32(x).view(np.uint32))
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
    return float(np.uint32(bits).view(np.float32))


PROGRAM = textwrap.dedent('''
    import hpvm_py as hpvm
    from hpvm_py import Out, Ptr, bf16, f32, i64

    @hpvm.leaf
    def put(h: Out[Ptr[bf16]], h_bytes: i64, w: Out[Ptr[f32]], w_bytes: i64, s: bf16, t: f32):
        h[0] = s
        w[0] = t

    @hpvm.graph
    def root(h: Out[Ptr[bf16]], h_bytes: i64, w: Out[Ptr[f32]], w_bytes: i64, s: bf16, t: f32):
        hpvm.node(put, h=h, h_bytes=h_bytes, w=w, w_bytes=w_bytes, s=s, t=t)
''')


def hpvmc(*args: str) -> tuple[int, str, str]:
    """hpvmc in this process: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        code = cli.main(list(args))
    return code, out.getvalue(), err.getvalue()


def nearest(k: int, digits: int) -> int:
    """The integer k rounded to `digits` significant bits, to nearest even (exact integer work)."""
    magnitude = abs(k)
    dropped = max(0, magnitude.bit_length() - digits)
    kept, rest = magnitude >> dropped, magnitude & ((1 << dropped) - 1)
    half = 1 << dropped >> 1
    if dropped and (rest > half or rest == half and kept & 1):
        kept += 1
    return (kept << dropped) * (1 if k >= 0 else -1)


def double_rounding_ints(rng: random.Random, ties: list[int], count: int) -> list[int]:
    """Integers just above a tie at each of `ties` bits (random bits above), the excess below
    f64's last bit: rounded to f64 first they land on the ties, which round to even."""
    out = []
    for _ in range(count):
        e = rng.randint(56, 62)
        k = (1 << e) + (rng.randrange(1 << (ties[0] - 1)) << (e - ties[0] + 1))
        k += sum(1 << (e - d) for d in ties) + rng.randint(1, (1 << (e - 53)) - 1)
        out.append(k if rng.random() < 0.5 else -k)
    return out


def test_run_set_rounds_an_integer_once_and_takes_hex(target: str, tmp_path: Path) -> None:
    program = tmp_path / "put.py"
    program.write_text(PROGRAM, encoding="utf-8")
    rng = random.Random()
    # bf16 from an integer rounds to f32 (once), then to bf16: tie cases of the bf16 rounding
    for k in double_rounding_ints(rng, [8, 24], 2) + [(1 << 60) + (1 << 52) + (1 << 36) + 1]:
        t = double_rounding_ints(rng, [24], 1)[0]
        out = tmp_path / f"out{k}"
        code, _, err = hpvmc("run", str(program), "--graph", "root", "--target", target, "--set",
                             "h=1", "--set", "w=1", "--set", f"s={k}", "--set", f"t={t}", "-o",
                             str(out))
        assert code == 0, err
        got_bf16 = float(bf16_from_bits(np.load(out / "h.npy"))[0])
        got_f32 = float(np.load(out / "w.npy")[0])
        assert got_bf16 == nearest(nearest(k, 24), 8) == float(hpvm.bf16(k)), (k, got_bf16)
        assert got_f32 == nearest(t, 24) == float(hpvm.f32(t)), (t, got_f32)
    value = rng.randint(1, 255)
    code, _, err = hpvmc("run", str(program), "--graph", "root", "--target", target, "--set", "h=1",
                         "--set", "w=1", "--set", f"s={value:#x}", "--set", f"t=-{value:#o}",
                         "-o", str(tmp_path / "hex"))
    assert code == 0, err
    assert float(bf16_from_bits(np.load(tmp_path / "hex" / "h.npy"))[0]) == float(hpvm.bf16(value))
    assert float(np.load(tmp_path / "hex" / "w.npy")[0]) == -value
    code, _, err = hpvmc("run", str(program), "--graph", "root", "--target", target, "--set", "h=1",
                         "--set", "w=1", "--set", "s=-0", "--set", "t=-0", "-o", str(tmp_path / "z"))
    assert code == 0, err
    assert np.load(tmp_path / "z" / "h.npy")[0] == 0x8000  # -0.0, as before
    assert np.signbit(np.load(tmp_path / "z" / "w.npy")[0])


ONE_OUTPUT = textwrap.dedent('''
    import hpvm_py as hpvm
    from hpvm_py import f16, f32

    @hpvm.leaf
    def scale(s: f16, k: f32) -> f16:
        return s * k

    @hpvm.graph
    def root(s: f16, k: f32) -> f16:
        return hpvm.node(scale, s=s, k=k).out[0]
''')


def test_run_prints_a_single_output(target: str, tmp_path: Path) -> None:
    program = tmp_path / "one.py"
    program.write_text(ONE_OUTPUT, encoding="utf-8")
    rng = np.random.default_rng()
    for s, k in [(float(rng.uniform(-100, 100)), float(rng.uniform(-4, 4))), (0.0, 1.0)]:
        code, out, err = hpvmc("run", str(program), "--graph", "root", "--target", target, "--set",
                               f"s={s!r}", "--set", f"k={k!r}")
        assert code == 0, err
        want = np.float16(np.float32(np.float16(s)) * np.float32(k))  # f16 computes in f32
        assert out.splitlines() == [f"output 0: {want}"], (out, s, k)


BF16_OUTPUTS = textwrap.dedent('''
    import hpvm_py as hpvm
    from hpvm_py import bf16, f32

    @hpvm.leaf
    def scale(s: bf16, k: f32) -> tuple[bf16, f32]:
        return s * k, k

    @hpvm.graph
    def root(s: bf16, k: f32) -> tuple[bf16, f32]:
        n = hpvm.node(scale, s=s, k=k)
        return n.out[0], n.out[1]
''')


def test_run_prints_a_bf16_output_as_its_value(target: str, tmp_path: Path) -> None:
    program = tmp_path / "bf.py"
    program.write_text(BF16_OUTPUTS, encoding="utf-8")
    rng = np.random.default_rng()
    s, k = float(rng.uniform(-100, 100)), float(np.float32(rng.uniform(-4, 4)))
    code, out, err = hpvmc("run", str(program), "--graph", "root", "--target", target, "--set",
                           f"s={s!r}", "--set", f"k={k!r}")
    assert code == 0, err
    want = bf16_of(bf16_of(s) * np.float32(k))  # bf16 computes in f32
    assert out.splitlines() == [f"output 0: {np.float32(want)}", f"output 1: {np.float32(k)}"], \
        (out, s, k)


COPY = textwrap.dedent('''
    import hpvm_py as hpvm
    from hpvm_py import In, Out, Ptr, i64, {t}

    @hpvm.leaf
    def copy(x: In[Ptr[{t}]], x_bytes: i64, y: Out[Ptr[{t}]], y_bytes: i64):
        i = hpvm.instance_id(0)
        y[i] = x[i]

    @hpvm.graph
    def root(x: In[Ptr[{t}]], x_bytes: i64, y: Out[Ptr[{t}]], y_bytes: i64, n: i64):
        hpvm.node(copy, grid=n, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes)
''')
INTS = {"i8": (-2**7, 2**7 - 1), "u8": (0, 2**8 - 1), "i16": (-2**15, 2**15 - 1),
        "u16": (0, 2**16 - 1), "i32": (-2**31, 2**31 - 1), "u64": (0, 2**64 - 1)}


def saturated(x: float, lo: int, hi: int) -> int:
    """Float to integer as the language converts: toward zero, clamped, NaN gives 0."""
    if math.isnan(x):
        return 0
    return hi if x >= hi else lo if x <= lo else math.trunc(x)


def test_run_npy_floats_convert_to_integers_as_the_language_does(target: str, tmp_path: Path) -> None:
    rng = np.random.default_rng()
    for t, (lo, hi) in INTS.items():
        program = tmp_path / f"copy_{t}.py"
        program.write_text(COPY.format(t=t), encoding="utf-8")
        for dtype in (np.float16, np.float64):
            values = np.concatenate([rng.uniform(-1.5 * hi - 2, 1.5 * hi + 2, 12),
                                     [np.nan, np.inf, -np.inf, -1.5, 65504.0, lo - 0.5, hi + 1.0]])
            with np.errstate(over="ignore"):  # beyond f16: inf, which saturates too
                data = values.astype(dtype)
            npy = tmp_path / f"x_{t}_{data.dtype}.npy"
            np.save(npy, data)
            out = tmp_path / f"out_{t}_{data.dtype}"
            code, _, err = hpvmc("run", str(program), "--graph", "root", "--target", target, "--set",
                                 f"x={npy}", "--set", f"y={data.size}", "--set", f"n={data.size}",
                                 "-o", str(out))
            assert code == 0, err
            got = [int(v) for v in np.load(out / "y.npy")]
            assert got == [saturated(float(v), lo, hi) for v in data], (t, data, got)
