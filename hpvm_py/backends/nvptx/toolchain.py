"""LLVM IR → PTX (llvmlite's NVPTX target, libdevice linked in) → cubin (ptxas from the triton
wheel). Nothing here needs a GPU: CI emits and assembles PTX on CPU machines."""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import re
import subprocess
import tempfile
import threading
from pathlib import Path

import llvmlite
import llvmlite.binding as llvm

from ...errors import CompileError
from ...support import settings
from ...support.loc import Loc

TRIPLE = "nvptx64-nvidia-cuda"
DEFAULT_ARCH = "sm_90"
PTX_FEATURES = "+ptx80"  # PTX ISA 8.0: what the CUDA 12 ptxas of the triton wheels accept for sm_90
PTXAS_TIMEOUT_S = 120

_lock = threading.Lock()  # LLVM's target registry and pass builder are not thread safe here


@functools.cache
def _initialised() -> bool:
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    return True


@functools.cache
def target_machine(arch: str) -> llvm.TargetMachine:
    _initialised()
    target = llvm.Target.from_triple(TRIPLE)
    return target.create_target_machine(cpu=arch, features=PTX_FEATURES, opt=3)


def data_layout(arch: str) -> str:
    return str(target_machine(arch).target_data)


def _triton_nvidia_dir() -> Path | None:
    spec = importlib.util.find_spec("triton")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(list(spec.submodule_search_locations)[0]) / "backends" / "nvidia"
    return folder if folder.is_dir() else None


def libdevice_path() -> Path | None:
    """libdevice.10.bc: $HPVM_LIBDEVICE, else the copy inside the triton wheel."""
    env = settings.LIBDEVICE.text()
    if env:
        return Path(env)
    folder = _triton_nvidia_dir()
    path = folder / "lib" / "libdevice.10.bc" if folder else None
    return path if path is not None and path.exists() else None


def ptxas_path() -> Path | None:
    """ptxas: $HPVM_PTXAS, else the one inside the triton wheel, else one on PATH."""
    env = settings.PTXAS.text()
    if env:
        return Path(env)
    folder = _triton_nvidia_dir()
    if folder is not None and (folder / "bin" / "ptxas").exists():
        return folder / "bin" / "ptxas"
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        candidate = Path(directory) / "ptxas"
        if candidate.exists():
            return candidate
    return None


def _libdevice_bitcode() -> bytes | None:
    """libdevice's bitcode, read once per path (HPVM_LIBDEVICE may change while a program runs)."""
    return _read_libdevice(libdevice_path())


@functools.cache
def _read_libdevice(path: Path | None) -> bytes | None:
    if path is None:
        return None
    try:
        return path.read_bytes()
    except OSError as exc:
        raise CompileError(f"{settings.LIBDEVICE.name}={str(path)!r}: libdevice could not be read "
                           f"({exc.strerror or exc})") from None


def _libdevice_digest() -> str:
    """A hash of the libdevice in use ("none" without one)."""
    bitcode = _libdevice_bitcode()
    return "none" if bitcode is None else _digest(bitcode)


@functools.cache
def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def to_ptx(module_text: str, kernels: tuple[str, ...], arch: str, loc: Loc) -> str:
    """Optimised PTX of an LLVM module whose kernels are `kernels`; `__nv_*` math functions are
    resolved from libdevice (NVVM reflection: no flush to zero, precise division and sqrt)."""
    with _lock:
        tm = target_machine(arch)
        module = llvm.parse_assembly(module_text)
        module.verify()
        if any(f.is_declaration and f.name.startswith("__nv_") for f in module.functions):
            bitcode = _libdevice_bitcode()
            if bitcode is None:
                raise CompileError("libdevice.10.bc was not found (install triton, or set "
                                   "HPVM_LIBDEVICE): the leaf calls math functions", loc)
            try:
                libdevice = llvm.parse_bitcode(bitcode)
            except RuntimeError as exc:  # not bitcode: a wrong HPVM_LIBDEVICE
                raise CompileError(f"libdevice ({libdevice_path()}) is not LLVM bitcode: {exc} "
                                   f"(check {settings.LIBDEVICE.name})", loc) from None
            libdevice.triple = TRIPLE
            libdevice.data_layout = module.data_layout
            module.link_in(libdevice)
            # Only the kernels are visible: unused library functions are dropped by the optimiser.
            for fn in module.functions:
                if not fn.is_declaration and fn.name not in kernels:
                    fn.linkage = "internal"
        options = llvm.create_pipeline_tuning_options(speed_level=3)
        builder = llvm.create_pass_builder(tm, options)
        builder.getModulePassManager().run(module, builder)
        return in_ptxas_safe_forms(tm.emit_assembly(module))


# ptxas (12.8 of triton 3.6's wheel, 12.9 of 3.9's) folds a 16- or 32-bit integer negation into
# an operand of a three-way VIMNMX3 min/max for sm_90 and drops the sign: min(min(s, -x), t)
# became min(s, x, t) (tests/differential/reproducers/plain-1820096542). Negating as ~x + 1
# keeps it out of that fold; ptxas then uses VIADDMNMX, which adds the 1.
_NEGATION = re.compile(r"^(\s*)neg\.s(16|32)\s+(%\w+),\s*(%\w+);", re.MULTILINE)


def spell_out_negations(ptx: str) -> str:
    """Every 16- and 32-bit integer `neg` of a PTX module rewritten as `not` and `add 1`."""
    return _NEGATION.sub(lambda m: f"{m[1]}not.b{m[2]} {m[3]}, {m[4]};\n"
                                   f"{m[1]}add.s{m[2]} {m[3]}, {m[3]}, 1;", ptx)


# ptxas takes the result of an integer `abs` to be non-negative, which abs(INT_MIN) (INT_MIN: the
# language's abs wraps) is not: `cvt.rn.f32.u32` of it became a signed I2FP, so u32(abs(x)) of
# INT_MIN gave -2**31 as a float where the language gives 2**31 (found by
# tests/backends/test_nvptx_differential.py on an H200: f16(u32(abs(i32 INT_MIN))) was -inf).
# A compare and select of x and ~x + 1 is no `abs` to it.
_ABS = re.compile(r"^(\s*)abs\.s(16|32|64)\s+(%\w+),\s*(%\w+);", re.MULTILINE)


def spell_out_abs(ptx: str) -> str:
    """Every integer `abs` of a PTX module rewritten as a compare, `not`, `add 1` and a select."""
    def spelled(m: re.Match) -> str:
        indent, bits, result, x = m.groups()
        return (f"{indent}{{ .reg .b{bits} %hpvm_a<2>; .reg .pred %hpvm_ap; "
                f"setp.lt.s{bits} %hpvm_ap, {x}, 0; not.b{bits} %hpvm_a0, {x}; "
                f"add.s{bits} %hpvm_a1, %hpvm_a0, 1; selp.b{bits} {result}, %hpvm_a1, {x}, %hpvm_ap; }}")

    return _ABS.sub(spelled, ptx)


# ptxas makes a 16-bit min/max whose result is compared with one of its operands (`max.u16 d, y,
# 1; setp.eq d, 1`, as LLVM makes `1 // y` with a zero divisor's guard) one VIMNMX.U16x2 that
# writes the predicates of both 16-bit halves to one register, and the compare came out wrong:
# `u8(1) // u8(80)` gave 1 (tests/differential/reproducers/plain-2409086397). In 32 bits it is
# a plain VIMNMX and a compare.
_NARROW_MIN_MAX = re.compile(r"^(\s*)(min|max)\.([us])16\s+(%\w+),\s*(%\w+|-?\w+),\s*(%\w+|-?\w+);",
                             re.MULTILINE)


def _widened_min_max(m: re.Match) -> str:
    indent, op, sign, result, x, y = m.groups()
    widen = f"cvt.{sign}32.{sign}16"
    operands = [f"{widen} %hpvm_w{k}, {v};" if v.startswith("%") else
                f"mov.b32 %hpvm_w{k}, {_widened_immediate(v, sign)};" for k, v in enumerate((x, y))]
    return (f"{indent}{{ .reg .b32 %hpvm_w<3>; {' '.join(operands)} {op}.{sign}32 %hpvm_w2, "
            f"%hpvm_w0, %hpvm_w1; cvt.u16.u32 {result}, %hpvm_w2; }}")


def _widened_immediate(text: str, sign: str) -> int:
    """A 16-bit operand's immediate as its 32-bit value: LLVM prints 16-bit constants signed
    (65535 as -1), so an unsigned one is taken modulo 2**16, a signed one sign-extended."""
    bits = int(text, 0) & 0xFFFF
    return bits - 0x10000 if sign == "s" and bits & 0x8000 else bits


# ptxas (12.8 and 12.9) takes the results of abs.f32, ex2.approx and sin/cos/tanh.approx to be
# numbers in a range, and decides an ordered compare that the range settles, forgetting the NaN
# that makes it false: `setp.gt.f32 p, |x|, -1.0` became true, so min(-1.0, abs(x)) of a NaN gave
# -1.0 (tests/differential/reproducers/tiles-947270095). Each order compare is spelled as its
# other-ordered form and an explicit NaN test (setp.num / setp.nan), which ptxas keeps.
_ORDER_COMPARE = re.compile(r"^(\s*)setp\.(lt|le|gt|ge)(u?)(\.ftz)?\.(f32|f64|f16|bf16)\s+(%p\d+),"
                            r"\s*([^,;]+),\s*([^,;]+);", re.MULTILINE)


def spell_out_float_compares(ptx: str) -> str:
    """Every float lt/le/gt/ge compare, ordered or not, rewritten as the compare of the other
    kind and a NaN test: `a > b` is `a >u b and num(a, b)`, `a >u b` is `a > b or nan(a, b)`."""
    def spelled(m: re.Match) -> str:
        indent, op, unordered, ftz, kind, result, a, b = m.groups()
        ftz = ftz or ""
        other, test, join = (op, "nan", "or") if unordered else (op + "u", "num", "and")
        return (f"{indent}{{ .reg .pred %hpvm_c<2>; setp.{other}{ftz}.{kind} %hpvm_c0, {a}, {b}; "
                f"setp.{test}{ftz}.{kind} %hpvm_c1, {a}, {b}; "
                f"{join}.pred {result}, %hpvm_c0, %hpvm_c1; }}")

    return _ORDER_COMPARE.sub(spelled, ptx)


def in_ptxas_safe_forms(ptx: str) -> str:
    """A PTX module with the instructions ptxas mishandles rewritten: integer negations
    (spell_out_negations), integer abs (spell_out_abs), 16-bit min/max, computed in 32 bits, and
    float order compares (spell_out_float_compares)."""
    safe = spell_out_float_compares(spell_out_abs(spell_out_negations(ptx)))
    return _NARROW_MIN_MAX.sub(_widened_min_max, safe)


def ptx_signature() -> str:
    """What PTX depends on besides the IR and the architecture (part of its disk cache key): the
    LLVM that made it and the libdevice linked in (another triton wheel's may differ)."""
    return f"llvmlite={llvmlite.__version__};llvm={llvm.llvm_version_info};" \
           f"libdevice={_libdevice_digest()}"


def ptx_problem(data: bytes, kernels: tuple[str, ...]) -> str | None:
    """What is wrong with PTX read back from the disk cache, or None: it must be text that
    defines every kernel the launcher looks up."""
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        return "not PTX text"
    missing = [name for name in kernels if not re.search(rf"\.entry\s+{re.escape(name)}\b", text)]
    return f"it lacks the kernel(s) {', '.join(missing)}" if missing else None


def cubin_problem(data: bytes) -> str | None:
    """What is wrong with a cubin read back from the disk cache, or None: an ELF file for CUDA
    (e_machine 190) is what the driver loads."""
    if len(data) < 20 or data[:4] != b"\x7fELF" or int.from_bytes(data[18:20], "little") != 190:
        return "not a CUDA ELF image"
    return None


def ptxas_version() -> str:
    """What the ptxas in use says its version is (part of a cubin's disk cache key)."""
    return _version_of(ptxas_path())


@functools.cache
def _version_of(path: Path | None) -> str:
    """Per path: HPVM_PTXAS may change while a program runs (to step around a ptxas bug), and
    the cubins of the first ptxas must not serve the next."""
    if path is None:
        return "none"
    try:
        result = subprocess.run([str(path), "--version"], capture_output=True, text=True,
                                timeout=PTXAS_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return "unusable"
    return result.stdout.strip().splitlines()[-1] if result.stdout.strip() else "unknown"


def assemble(ptx: str, arch: str, name: str, loc: Loc) -> bytes:
    """The cubin of a PTX module, from ptxas -arch=<arch>."""
    path = ptxas_path()
    if path is None:
        raise CompileError("ptxas was not found (install triton, or set HPVM_PTXAS): target "
                           "'nvptx' assembles PTX with it", loc)
    with tempfile.TemporaryDirectory(prefix="hpvm-ptxas-") as tmp:
        source = Path(tmp) / f"{name}.ptx"
        output = Path(tmp) / f"{name}.cubin"
        source.write_text(ptx)
        try:
            result = subprocess.run([str(path), f"-arch={arch}", str(source), "-o", str(output)],
                                    capture_output=True, text=True, timeout=PTXAS_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise CompileError(f"ptxas took more than {PTXAS_TIMEOUT_S} s on leaf {name}", loc) \
                from None
        except OSError as exc:
            raise CompileError(f"ptxas ({path}) could not run: {exc}{_ptxas_hint()}", loc) from None
        if result.returncode != 0:
            raise CompileError(f"internal: ptxas rejected the PTX of leaf {name}: "
                               f"{result.stderr.strip()[:2000]}{_ptxas_hint()}", loc)
        try:
            return output.read_bytes()
        except OSError:  # it ran and succeeded, but is no ptxas (HPVM_PTXAS=/bin/true)
            raise CompileError(f"ptxas ({path}) wrote no cubin for leaf {name}{_ptxas_hint()}",
                               loc) from None


def _ptxas_hint() -> str:
    """Where a failing ptxas came from, when the user chose it."""
    return f" (check {settings.PTXAS.name})" if settings.PTXAS.text() else ""
