"""The nvptx target without a GPU: every example leaf and every fuzzer program becomes PTX that
ptxas assembles for sm_90, and the PTX has the structure the SIMT mapping promises."""
from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from cpu_harness import leaves_from_source
from differential import data
from differential.generator import programs
from hypothesis import HealthCheck, given, settings
from programs import semantic_kernels

from hpvm_py.backends import registry
from hpvm_py.backends.base import NodeContext
from hpvm_py.backends.cpu.codegen import uniform_divisors
from hpvm_py.backends.nvptx import NvptxBackend, device, toolchain
from hpvm_py.errors import CompileError
from hpvm_py.frontend.decorators import GraphDef
from hpvm_py.ir import kernel as K
from hpvm_py.rt.compiler import compile_graph
from hpvm_py.support import stats
from hpvm_py.support.loc import Loc
from hpvm_py.types import PtrType, f32, i64, u8

ROOT = Path(__file__).resolve().parents[2]
# every example that defines graphs (demo.py only runs the others)
EXAMPLES = sorted(p.stem for p in (ROOT / "examples").glob("*.py")
                  if not p.stem.startswith("_") and "@hpvm.graph" in p.read_text())

pytestmark = pytest.mark.skipif(toolchain.ptxas_path() is None,
                                reason="ptxas is not installed (it comes with the triton wheel)")


def roots_of(module) -> list[GraphDef]:
    graphs = [v for v in vars(module).values()
              if isinstance(v, GraphDef) and v.pyfunc.__module__ == module.__name__]
    children = {id(c) for g in graphs for c in g.children().values()}
    return [g for g in graphs if id(g) not in children]


def assemble_all(root: GraphDef) -> list[str]:
    """Compile every leaf of the graph for nvptx, unchecked and checked (ptxas runs on each)."""
    names = []
    for leaf, ctx, kernel in compile_graph(root, "nvptx").leaf_kernels():
        checked = NvptxBackend().compile_leaf(leaf, ctx, checked=True)
        assert kernel.cubin and checked.cubin and checked.checked
        names.append(leaf.name)
    return names


@pytest.mark.parametrize("name", EXAMPLES)
def test_every_example_leaf_assembles(name: str) -> None:
    module = importlib.import_module(name)
    leaves: list[str] = []
    for root in roots_of(module):  # communication nodes compile too (they run as collectives)
        leaves += assemble_all(root)
    assert leaves


@settings(max_examples=30, deadline=None, derandomize=False,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.filter_too_much])
@given(program=programs())
def test_fuzzer_programs_assemble(program) -> None:
    module = data.load(program.source)
    assert assemble_all(module.root)


# -- structure of the PTX -----------------------------------------------------------------------

LOC = Loc("test_nvptx_codegen.py", 1, 0)
LEAVES = leaves_from_source('''
@hpvm.leaf
def shared_hist(data: In[Ptr[u32]], data_bytes: i64, bins: InOut[Ptr[u32]], bins_bytes: i64):
    local = hpvm.malloc(64 * 4, u32)
    me = hpvm.get_node()
    t = hpvm.get_node_instance_id_x(me)
    blk = hpvm.get_node_instance_id_x(hpvm.get_parent_node(me))
    hpvm.atomic_add(local, i64(data[blk * 64 + t]) % 64, u32(1))
    hpvm.barrier()
    hpvm.atomic_add(bins, t, local[t])


@hpvm.leaf
def sized_by_parameter(x: InOut[Ptr[f32]], x_bytes: i64, count: i64):
    s = hpvm.malloc(count * 4, f32)
    t = hpvm.instance_id(0)
    s[t] = x[t]
    hpvm.barrier()
    x[t] = s[count - 1 - t]


@hpvm.leaf
def sine(x: InOut[Ptr[f32]], x_bytes: i64):
    i = hpvm.instance_id(0)
    x[i] = math.sin(x[i]) + math.fmod(x[i], 0.75)


@hpvm.leaf
def zero_ties(x: InOut[Ptr[f64]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64):
    i = hpvm.instance_id(0)
    x[i] = max(f64(u8(i64(x[i]))), f64(-0.0))
    y[i] = min(f32(u8(i64(y[i]))) * f32(-1.0), f32(0.0))


@hpvm.leaf
def rounded_zero_tie(x: InOut[Ptr[f16]], x_bytes: i64):
    i = hpvm.instance_id(0)
    x[i] = math.copysign(x[i + 1], min(f16(0.0), x[i]))


@hpvm.leaf
def shifts_by_data(x: InOut[Ptr[i64]], x_bytes: i64, y: InOut[Ptr[u64]], y_bytes: i64):
    i = hpvm.instance_id(0)
    x[i] = (x[i] << x[i]) + (x[i] >> x[i + 1])
    y[i] = y[i] >> x[i]


@hpvm.leaf
def strided_bins(data: In[Ptr[i32]], data_bytes: i64, bins: InOut[Ptr[i32]], bins_bytes: i64,
                 nbins: i32, n: i64):
    for j in range(hpvm.instance_id(0), n, 1024):
        hpvm.atomic_add(bins, data[j] % nbins, 1)


@hpvm.leaf
def one_bin(data: In[Ptr[i32]], data_bytes: i64, bins: InOut[Ptr[i32]], bins_bytes: i64,
            nbins: i32):
    hpvm.atomic_add(bins, data[hpvm.instance_id(0)] % nbins, 1)


@hpvm.leaf
def negated_in_min(a: In[Ptr[i32]], a_bytes: i64, out: Out[Ptr[i32]], out_bytes: i64, s: i32,
                   t: i32):
    i = hpvm.instance_id(0)
    out[i] = min(min(s * t, -a[i]), t)


@hpvm.leaf
def abs_unsigned(a: In[Ptr[i32]], a_bytes: i64, w: In[Ptr[i64]], w_bytes: i64, out: Out[Ptr[f32]],
                 out_bytes: i64):
    i = hpvm.instance_id(0)
    out[i] = f32(u32(abs(a[i]))) + f32(u64(abs(w[i])))


@hpvm.leaf
def divisors(x: InOut[Ptr[i64]], x_bytes: i64, width: i64, step: i64, scale: f32, rows: i64,
             cols: i64):
    i = hpvm.instance_id(0)
    step = step + 1
    x[i] = i // width + i % step + i % x[0] + i64(f32(i) % scale) + i // 4 + rows
    x[i] += i % (width * 2) + i // (width + x[1]) + i % (rows + i)
    for cols in range(1, 3):
        x[i] += i % cols
''')


def context(leaf, dims: tuple[int, ...]) -> NodeContext:
    modes = tuple("buffer" if isinstance(p.type, PtrType) else "uniform" for p in leaf.params)
    return NodeContext(level_dims=dims, input_modes=modes,
                       output_modes=tuple("unused" for _ in leaf.outputs))


def ptx(leaf, dims: tuple[int, ...], checked: bool = False) -> str:
    return NvptxBackend().ptx(leaf.ir, context(leaf.ir, dims), checked=checked)


def test_float_min_max_keep_the_languages_zero_ties() -> None:
    """max(+0.0, -0.0) is -0.0 (the second operand on a tie): NVPTX would turn the compare and
    select of two operands that are never NaN into max.f64 / min.f32, which may pick +0.0 (a
    mismatch the GPU differential runner found)."""
    text = ptx(LEAVES.zero_ties, (1,))
    assert not re.search(r"\b(max|min)\.f(32|64)\b", text), text
    assert re.search(r"selp\.(b|f)64", text)


def test_min_of_zero_keeps_a_negative_zero_through_rounding() -> None:
    """min(0.0, x) is x when x is -0.0; rounded to f16 and used as a sign (a mismatch the GPU
    differential runner found, tests/differential/reproducers/pingpong-1141411632.json): LLVM's
    InstCombine turned the select on bits back into a float select and its `x > 0` into
    `x >= 0`, which gives +0.0. The compare stays strict and the select on opaque bits."""
    text = ptx(LEAVES.rounded_zero_tie, (1,))
    assert re.search(r"setp\.gtu?\.f(16|32)", text), text  # (gtu and a NaN test: spelled out)
    assert not re.search(r"setp\.geu?\.f(16|32)", text), text
    assert re.search(r"selp\.b32", text), text


def test_shift_counts_from_data_are_masked_before_ptx_truncates_them() -> None:
    """A 64-bit shift count of 2**32 + 63 shifted by 63 (a mismatch the GPU differential runner
    found, tests/differential/reproducers/pingpong-1652447988.json): NVPTX folded the select of
    an in-range shift into one shl.b64, whose count it truncates to 32 bits. Every shift's count
    is masked to the width now, and the out-of-range result still comes from a select."""
    text = ptx(LEAVES.shifts_by_data, (1,))
    shifts = re.findall(r"\b(shl|shr)\.[bsu]64\s+%rd\d+, %rd\d+, (%r\d+);", text)
    assert len(shifts) == 3, text
    for _, count in shifts:  # masked, or truncated from a count that min.u64 bounded
        masked = re.search(rf"and\.b32\s+{count}, %r\d+, 63;", text)
        source = re.search(rf"cvt\.u32\.u64\s+{count}, (%rd\d+);", text)
        bounded = source and re.search(rf"min\.u64\s+{source.group(1)}, %rd\d+, 63;", text)
        assert masked or bounded, (count, text)
    assert len(re.findall(r"setp\.lt\.u64", text)) >= 2, text  # shl and shr.u: 0 out of range


# the disassembler beside the triton wheel's ptxas (the machine-code tests need it)
CUOBJDUMP = toolchain.ptxas_path().with_name("cuobjdump") if toolchain.ptxas_path() else None
needs_cuobjdump = pytest.mark.skipif(CUOBJDUMP is None or not CUOBJDUMP.exists(),
                                     reason="cuobjdump is not beside ptxas")


def _sass(ptx_text: str) -> list[str]:
    """The instructions ptxas makes of a PTX module for sm_90 (cuobjdump of the triton wheel)."""
    cubin = toolchain.assemble(ptx_text, "sm_90", "k", LOC)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "k.cubin"
        path.write_bytes(cubin)
        listing = subprocess.run([str(CUOBJDUMP), "-sass", str(path)], capture_output=True,
                                 text=True, check=True).stdout
    return re.findall(r"/\*[0-9a-f]{4}\*/\s+([^;]+);", listing)


@needs_cuobjdump
def test_negations_reach_ptxas_as_not_and_add() -> None:
    """min(min(s * t, -x), t): ptxas folds a `neg.s32` into the three-way VIMNMX3 and drops its
    sign, making the same machine code as min(min(s * t, x), t) (a mismatch the GPU differential
    runner found, tests/differential/reproducers/plain-1820096542.json). The PTX negates as
    `not` and `add 1`, and the machine code differs from the unnegated one's."""
    text = ptx(LEAVES.negated_in_min, (1,))
    assert not re.search(r"\bneg\.s(16|32)\b", text), text
    spelled = re.search(r"not\.b32\s+(%r\d+), (%r\d+);\s*add\.s32\s+\1, \1, 1;", text)
    assert spelled, text
    unnegated = text.replace(spelled.group(0), f"mov.b32 {spelled[1]}, {spelled[2]};")
    assert _sass(text) != _sass(unnegated)


@needs_cuobjdump
def test_abs_reaches_ptxas_as_a_select() -> None:
    """ptxas takes an `abs.s32` result to be non-negative, which abs(INT_MIN) (INT_MIN: abs wraps)
    is not: converting it as a u32 to a float became the signed I2FP, so f16(u32(abs(x))) of
    INT_MIN gave -inf where the language gives inf (found by test_nvptx_agrees_with_cpu on an
    H200). The PTX has no integer abs, and the conversion of the 32-bit one stays unsigned."""
    text = ptx(LEAVES.abs_unsigned, (1,))
    assert not re.search(r"\babs\.s(16|32|64)\b", text), text
    assert re.search(r"selp\.b32 %r\d+, %hpvm_a1, %r\d+, %hpvm_ap;", text), text
    assert re.search(r"selp\.b64 %rd\d+, %hpvm_a1, %rd\d+, %hpvm_ap;", text), text
    sass = _sass(text)
    assert any("I2FP.F32.U32" in line for line in sass), sass
    assert not any("I2FP.F32.S32" in line or "IABS" in line for line in sass), sass
    unspelled = text.replace("%hpvm_a", "%hpvm_x")  # (the check sees the bug as it was)
    spelled_back = re.sub(r"\{ \.reg \.b32 %hpvm_x<2>; .*?selp\.b32 (%r\d+), %hpvm_x1, (%r\d+), "
                          r"%hpvm_xp; \}", r"abs.s32 \1, \2;", unspelled)
    assert any("I2FP.F32.S32" in line for line in _sass(spelled_back))


@needs_cuobjdump
def test_narrow_min_max_reach_ptxas_in_32_bits() -> None:
    """A 16-bit min/max compared with one of its operands became one VIMNMX.U16x2 whose two
    predicates ptxas wrote to one register (`1 // d` of a u8 gave 1 for d = 80: a mismatch the
    GPU differential runner found, tests/differential/reproducers/plain-2409086397.json). The
    PTX computes 16-bit min/max in 32 bits; a 16-bit immediate, which LLVM prints signed, is
    widened as the operation's sign says (a first version took -7931 of a max.u16 as a 32-bit
    -7931, not 57605: reproducers/partial-3010963633.json)."""
    text = "\tmax.u16 \t%rs2, %rs1, -7931;\n\tmin.s16 \t%rs3, %rs1, -7931;\n"
    widened = toolchain.in_ptxas_safe_forms(text)
    assert "mov.b32 %hpvm_w1, 57605;" in widened and "max.u32" in widened
    assert "mov.b32 %hpvm_w1, -7931;" in widened and "min.s32" in widened
    assert not re.search(r"\b(min|max)\.[us]16\b", widened)
    graph = semantic_kernels.make_narrow_guards(u8)
    leaf, ctx, _ = compile_graph(graph, "cpu").leaf_kernels()[0]
    sass = _sass(NvptxBackend().ptx(leaf, ctx))
    assert any("MNMX" in line for line in sass)
    assert not [line for line in sass if re.match(r"VIMNMX\.[US]16x2 R\d+, P\d+", line)], sass


def _blocks(text: str) -> list[str]:
    return re.split(r"\n\$L__BB\d+_\d+:", text)


def test_a_loop_by_a_launch_wide_divisor_runs_without_the_division() -> None:
    """`data[j] % nbins` with nbins the same for the whole launch: the body is emitted twice,
    behind one test of nbins; the power-of-two version's loop has a mask, the other multiplies
    by nbins' reciprocal (mul.hi.u32), made once before the loop. A division's branches and tens
    of instructions kept the loads from being issued ahead: the 64M histogram took 0.171 ms by
    the division, 0.137 by a mask behind a branch, on an H100."""
    text = ptx(LEAVES.strided_bins, (1,))
    loops = [b for b in _blocks(text) if "ld.global" in b and "atom.global.add" in b]
    assert not any(re.search(r"\b(rem|div)\.", b) for b in loops), text
    assert any("and.b32" in b and "mul.hi" not in b for b in loops), text
    assert any(b.count("mul.hi.u32") >= 2 and "bra" not in b.split("atom.global.add")[0]
               for b in loops), text
    assert text.count("div.u64") == 1, text  # the reciprocal, once
    assert "nbins.pow2" in NvptxBackend().llvm_ir(LEAVES.strided_bins.ir,
                                                        context(LEAVES.strided_bins.ir, (1,)))


def test_a_division_outside_loops_stays_a_division() -> None:
    """One division per instance: each thread would make the reciprocal (a 64-bit division) for
    one use, so the body divides as written where the divisor is not a power of two."""
    text = ptx(LEAVES.one_bin, (1,))
    assert "mul.hi.u32" not in text and "div.u64" not in text, text
    assert re.search(r"\brem\.s32", text), text


def test_only_launch_wide_integer_divisors_are_tested() -> None:
    """Divisors of parameters passed once per launch that the body never assigns (and constants):
    not a reassigned parameter, a loop's variable, a float, a divisor read from memory, one with
    an instance id, a constant alone, or a value per instance."""
    leaf = LEAVES.divisors.ir
    modes = context(leaf, (1,)).input_modes
    width = K.Var(type=i64, name="width")
    assert uniform_divisors(leaf, modes) == [width, K.BinOp(type=i64, op="mul", lhs=width,
                                                            rhs=K.Const(type=i64, value=2))]
    per_instance = tuple("per_instance" if p.name == "width" else m
                         for p, m in zip(leaf.params, modes))
    assert uniform_divisors(leaf, per_instance) == []


def test_barrier_and_static_shared_memory_of_a_group() -> None:
    text = ptx(LEAVES.shared_hist, (1, 1))
    assert "bar.sync" in text
    assert ".shared .align 16 .b8 hpvm_scratch[256]" in text


def test_atomics_on_the_right_address_space() -> None:
    text = ptx(LEAVES.shared_hist, (1, 1))
    assert "atom.shared.add.u32" in text  # the malloc scratch
    assert "atom.global.add.u32" in text  # the buffer
    assert ".sys" not in text  # relaxed, device-wide: not system-scope atomics


def test_dynamic_shared_memory_when_the_size_is_a_parameter() -> None:
    text = ptx(LEAVES.sized_by_parameter, (1,))
    assert ".extern .shared .align 16 .b8 hpvm_dynamic_scratch[]" in text
    assert "ld.shared" in text and "st.shared" in text


def test_malloc_size_that_differs_per_block_is_a_located_error() -> None:
    leaf = LEAVES.sized_by_parameter.ir
    # `count` from the parent node: one value per parent instance, so per block
    ctx = NodeContext(level_dims=(1, 1), input_modes=("buffer", "uniform", "per_parent"),
                      output_modes=())
    with pytest.raises(CompileError, match="known before the launch") as info:
        NvptxBackend().compile_leaf(leaf, ctx)
    assert info.value.loc.line == leaf.body[0].loc.line
    assert info.value.rule == "malloc-uniform"


def test_math_comes_from_libdevice() -> None:
    text = ptx(LEAVES.sine, (1,))
    assert "sin.approx" not in text  # LLVM's own lowering is an approximation
    assert ".extern .func" not in text  # libdevice is linked in, nothing left unresolved
    assert "div.rn.f32" not in text or "cvt.rzi" not in text  # fmod is not x - trunc(x/y)*y


def test_no_host_features_in_the_module() -> None:
    leaf = LEAVES.sine.ir
    ir_text = NvptxBackend().llvm_ir(leaf, context(leaf, (1,)))
    assert 'target triple = "nvptx64-nvidia-cuda"' in ir_text
    assert "x86" not in ir_text and "avx" not in ir_text.lower()
    text = ptx(LEAVES.sine, (1,))
    assert ".target sm_90" in text and ".address_size 64" in text


def test_checked_code_records_failures_and_unchecked_code_does_not() -> None:
    checked = ptx(LEAVES.sine, (1,), checked=True)
    unchecked = ptx(LEAVES.sine, (1,))
    # the first failure wins a compare-and-swap on the error slot
    assert "hpvm_$_out_of_bounds" in checked and ".cas.b64" in checked
    assert "out_of_bounds" not in unchecked and ".cas" not in unchecked


def test_gpu_check_environment_forces_checked_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    leaf = LEAVES.sine.ir
    monkeypatch.setenv("HPVM_GPU_CHECK", "1")
    assert NvptxBackend().compile_leaf(leaf, context(leaf, (1,))).checked
    monkeypatch.setenv("HPVM_GPU_CHECK", "0")
    assert not NvptxBackend().compile_leaf(leaf, context(leaf, (1,))).checked


def test_cubins_are_cached_on_disk(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HPVM_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(NvptxBackend, "_memory", {})
    leaf = LEAVES.sine.ir
    before = stats.snapshot()
    first = NvptxBackend().compile_leaf(leaf, context(leaf, (2,)))
    monkeypatch.setattr(NvptxBackend, "_memory", {})
    second = NvptxBackend().compile_leaf(leaf, context(leaf, (2,)))
    after = stats.snapshot()
    assert first.cubin == second.cubin
    assert after.get("nvptx_assembles", 0) - before.get("nvptx_assembles", 0) == 1
    assert list(tmp_path.rglob("*.cubin")) and list(tmp_path.rglob("*.ptx"))


def test_unusable_without_a_gpu_says_why() -> None:
    reason = device.unusable_reason()
    if reason is None:
        assert registry.available("nvptx")
    else:
        assert not registry.available("nvptx")
        assert registry.why_unavailable("nvptx") == reason


def test_hpvmc_emits_ptx(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "hpvm_py.cli", "compile",
                             str(ROOT / "examples" / "sgemm.py"), "--emit", "ptx", "-o", str(tmp_path)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    text = (tmp_path / "sgemm_tile.ptx").read_text()
    assert ".visible .entry sgemm_tile(" in text and "bar.sync" in text


def test_hpvmc_emits_the_checked_ptx_where_every_kernel_is_checked(tmp_path: Path) -> None:
    """HPVM_GPU_CHECK=1 makes every nvptx kernel bounds-checked: `--emit ptx` shows that kernel,
    the one launches run (a checked kernel has the error word's parameter)."""
    texts = []
    for check in ("0", "1"):
        out = tmp_path / check
        result = subprocess.run([sys.executable, "-m", "hpvm_py.cli", "compile",
                                 str(ROOT / "examples" / "vadd.py"), "--emit", "ptx", "-o", str(out)],
                                capture_output=True, text=True, timeout=300,
                                env={**os.environ, "HPVM_GPU_CHECK": check})
        assert result.returncode == 0, result.stderr
        (ptx,) = out.glob("*.ptx")
        texts.append(ptx.read_text())
    unchecked, checked = texts
    assert checked != unchecked
    assert checked.count(".param") > unchecked.count(".param")


@needs_cuobjdump
def test_order_compares_keep_their_nan_test() -> None:
    """ptxas takes an abs.f32 result to be a number >= 0 and decided `abs(x) > -1.0` true without
    loading x: min(-1.0, abs(x)) of a NaN gave -1.0 (reproducers/tiles-947270095). The PTX's
    order compares are written as the unordered compare and a NaN test, which the machine code
    keeps; written back as the one ordered compare, the compare is gone."""
    graph = semantic_kernels.make_range_compares(f32)
    leaf, ctx, _ = compile_graph(graph, "cpu").leaf_kernels()[0]
    text = NvptxBackend().ptx(leaf, ctx)
    assert not re.search(r"\bsetp\.(lt|le|gt|ge)u?\.f32\s+%p", text), text
    assert any(re.match(r"FSETP\.NAN\.AND .*\|R\d+\|", line) for line in _sass(text))
    ordered = re.sub(r"\{ \.reg \.pred %hpvm_c<2>; setp\.(lt|le|gt|ge)u(\.f32) %hpvm_c0, ([^;]+); "
                     r"setp\.num\.f32 [^;]+; and\.pred (%p\d+), [^}]+\}", r"setp.\1\2 \4, \3;", text)
    assert ordered != text
    assert not any(re.match(r"FSETP\.\w+\.AND .*\|R\d+\|, -1", line) for line in _sass(ordered))
