"""LLVM for the host CPU: target machine, O3 pipeline, object code, and loading it for execution.

Every kernel goes through object code, whether just compiled or read from the disk cache, so both
paths run exactly the same machine code. MCJIT resolves the C library and libm symbols the object
calls (malloc, expm1f, ...) in the running process.

Shared by the cpu backend and the native atomics of the python backend's remote accesses and of
the ranks' heap (distributed/atomics.py); llvmlite is imported on first use, not with hpvm_py.
"""
from __future__ import annotations

import ctypes
import platform
import struct
import threading
from typing import TYPE_CHECKING

from ..errors import CompileError
from ..support import settings
from .base import symbol_name
from .softhalf import HELPERS, helpers_ir

if TYPE_CHECKING:
    import llvmlite.binding as llvm

_lock = threading.Lock()
Cpu = tuple[str, str]  # the CPU name and features code is generated for (code_cpu)
_machines: dict[Cpu, llvm.TargetMachine] = {}  # by (CPU name, features)

# The x86-64 psABI's micro-architecture levels that HPVM_CPU_LEVEL may name, each with the features,
# in LLVM's names, it adds to the one before: code for a level runs on every CPU that has them and
# those of the levels below. Below v3 there is no F16C: LLVM then converts f16 by calling
# compiler-rt's helpers, which softhalf.py defines (_provide_helpers).
LEVELS: dict[str, tuple[str, ...]] = {
    "x86-64": (),
    "x86-64-v2": ("cx16", "sahf", "popcnt", "sse3", "sse4.1", "sse4.2", "ssse3"),
    "x86-64-v3": ("avx", "avx2", "bmi", "bmi2", "f16c", "fma", "lzcnt", "movbe", "xsave"),
    "x86-64-v4": ("avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"),
}
_provided: dict[str, int] = {}  # helper name -> address, once compiled (_provide_helpers)
_helpers: list["LoadedObject"] = []  # (kept alive: the JIT calls into them)


def target_machine(cpu: Cpu | None = None) -> llvm.TargetMachine:
    """The target machine for optimising and emitting code for `cpu` (default: code_cpu()'s),
    created once per CPU."""
    cpu = cpu or code_cpu()
    with _lock:
        if cpu not in _machines:
            _machines[cpu] = _new_machine(cpu)
        return _machines[cpu]


def code_cpu() -> Cpu:
    """The CPU name and features code is generated for: this CPU's, or the level HPVM_CPU_LEVEL
    names, which this CPU must run (CI may get an AVX2 machine where a developer has AVX-512:
    x86-64-v3 makes here the code it runs)."""
    import llvmlite.binding as llvm

    _initialise()
    level = settings.CPU_LEVEL.text()
    if level is None:
        return llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()
    if level not in LEVELS:
        raise CompileError(f"HPVM_CPU_LEVEL={level!r}: expected one of {', '.join(LEVELS)}, or unset "
                           "for this CPU")
    host = llvm.get_host_cpu_features()
    missing = [f for f in level_features(level) if not host.get(f, False)]
    if missing:
        raise CompileError(f"HPVM_CPU_LEVEL={level}: this CPU ({llvm.get_host_cpu_name()}) lacks "
                           f"{', '.join(missing)}, so code for that level could not run here")
    return level, ""


def level_features(level: str) -> list[str]:
    """The CPU features code of a level uses: its own and those of the levels below it."""
    names = list(LEVELS)
    return [f for name in names[:names.index(level) + 1] for f in LEVELS[name]]


def runnable_levels() -> list[str]:
    """The levels whose code this CPU runs (what HPVM_CPU_LEVEL may name here)."""
    import llvmlite.binding as llvm

    _initialise()
    host = llvm.get_host_cpu_features()
    return [level for level in LEVELS if all(host.get(f, False) for f in level_features(level))]


def _initialise() -> None:
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()


def _new_machine(cpu: Cpu) -> llvm.TargetMachine:
    import llvmlite.binding as llvm

    _initialise()
    target = llvm.Target.from_default_triple()
    # jitdefault picks the large code model: the object can sit anywhere relative to libc.
    return target.create_target_machine(cpu=cpu[0], features=cpu[1], opt=3, codemodel="jitdefault",
                                        jit=True)


def host_signature(cpu: Cpu | None = None) -> str:
    """What object code for `cpu` (default: code_cpu()'s) depends on besides the IR: code
    generator version and the CPU it is for."""
    import llvmlite
    import llvmlite.binding as llvm

    name, features = cpu or code_cpu()
    return f"llvmlite={llvmlite.__version__};llvm={llvm.llvm_version_info};cpu={name};features={features}"


def optimize(ir_text: str, cpu: Cpu | None = None) -> llvm.ModuleRef:
    """Parse, verify and optimise at O3 (loop and SLP vectorisation, no fast-math anywhere), for
    `cpu` (default: code_cpu()'s)."""
    import llvmlite.binding as llvm

    tm = target_machine(cpu)
    with _lock:
        module = llvm.parse_assembly(ir_text)
        module.triple = tm.triple
        module.data_layout = str(tm.target_data)
        module.verify()
        options = llvm.create_pipeline_tuning_options(speed_level=3)
        options.loop_vectorization = True
        options.slp_vectorization = True
        options.loop_interleaving = True  # instance loops set their own count (parallel.py)
        builder = llvm.create_pass_builder(tm, options)
        builder.getModulePassManager().run(module, builder)
    return module


def parse(ir_text: str) -> llvm.ModuleRef:
    """Parse and verify IR that is already optimised."""
    import llvmlite.binding as llvm

    _initialise()
    with _lock:
        module = llvm.parse_assembly(ir_text)
        module.verify()
    return module


def emit_object(module: llvm.ModuleRef, cpu: Cpu | None = None) -> bytes:
    tm = target_machine(cpu)
    with _lock:
        return tm.emit_object(module)


class LoadedObject:
    """Object code for `cpu` (default: code_cpu()'s) loaded into an execution engine; keep it
    alive while its functions are used."""

    def __init__(self, data: bytes, cpu: Cpu | None = None):
        import llvmlite.binding as llvm

        cpu = cpu or code_cpu()
        _provide_helpers(undefined_symbols(data), cpu)
        _check_symbols(data)
        target_machine(cpu)  # initialises LLVM
        with _lock:
            tm = _new_machine(cpu)  # an engine owns (and deletes) its target machine
            empty = llvm.parse_assembly("")
            empty.triple = tm.triple
            self._engine = llvm.create_mcjit_compiler(empty, tm)
            self._engine.add_object_file(llvm.ObjectFileRef.from_data(data))
            self._engine.finalize_object()

    def address(self, name: str) -> int:
        return self._engine.get_function_address(symbol_name(name))


_process = ctypes.CDLL(None)


def _provide_helpers(needed: list[str], cpu: Cpu) -> None:
    """Compile softhalf.py's conversions the first time object code (for `cpu`) calls one (a CPU
    or a level without F16C) and give the JIT their addresses, as if this process had them."""
    if _provided or not any(name in HELPERS for name in needed):
        return
    import llvmlite.binding as llvm

    helpers = LoadedObject(emit_object(optimize(helpers_ir(), cpu), cpu), cpu)
    with _lock:
        if _provided:
            return
        _helpers.append(helpers)
        for name in HELPERS:
            _provided[name] = helpers.address(name)
            llvm.add_symbol(name, _provided[name])


def _check_symbols(data: bytes) -> None:
    """Refuse object code that calls a function this process lacks (say a compiler-rt helper).

    The JIT would bind such a call to address 0 and crash when it runs.
    """
    missing = [name for name in undefined_symbols(data)
               if name not in _provided and not hasattr(_process, name)]
    if missing:
        raise CompileError("the generated code needs functions this process does not provide: "
                           + ", ".join(sorted(missing)))


def undefined_symbols(data: bytes) -> list[str]:
    """The undefined symbols of a little-endian ELF64 object file (its .symtab)."""
    return [name for name, defined in _symbols(data) if not defined]


def defined_symbols(data: bytes) -> list[str]:
    """The symbols a little-endian ELF64 object file defines (its .symtab)."""
    return [name for name, defined in _symbols(data) if defined]


def _symbols(data: bytes) -> list[tuple[str, bool]]:
    """(name, defined) of each named symbol of a little-endian ELF64 object file; none for other
    formats. object_problem() has checked that the tables lie inside `data`."""
    if data[:4] != b"\x7fELF" or len(data) < 64 or data[4] != 2 or data[5] != 1:
        return []  # not ELF64 LE: nothing to check with this reader
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    found: list[tuple[str, bool]] = []
    for sh in sections:
        if sh[1] != 2:  # SHT_SYMTAB
            continue
        strtab = sections[sh[6]]
        for offset in range(sh[4], sh[4] + sh[5], 24):
            st_name, _info, _other, st_shndx = struct.unpack_from("<IBBH", data, offset)
            if st_name:
                start = strtab[4] + st_name
                found.append((data[start:data.index(b"\0", start)].decode(), st_shndx != 0))
    return found


_ELF_MACHINES = {"x86_64": 62, "amd64": 62, "aarch64": 183, "arm64": 183, "ppc64le": 21}


def object_problem(data: bytes, names: tuple[str, ...] = ()) -> str | None:
    """What is wrong with object code read back from the disk cache, or None: it must be an ELF64
    little-endian relocatable file for this machine whose section and symbol tables lie inside it
    and that defines `names`. LLVM's loader trusts its input (an empty or cut-short file, or
    one of another architecture, crashes the process) and a kernel's missing driver would be
    looked up as address 0, so nothing else is loaded."""
    if len(data) < 64 or data[:4] != b"\x7fELF":
        return "not an ELF object file"
    if data[4] != 2 or data[5] != 1:
        return "not a 64-bit little-endian object"
    e_type, e_machine = struct.unpack_from("<HH", data, 0x10)
    expected = _ELF_MACHINES.get(platform.machine().lower())
    if e_type != 1 or (expected is not None and e_machine != expected):
        return f"an object of type {e_type} for machine {e_machine}, not this one's"
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    if shentsize < 64 or shoff + shnum * shentsize > len(data):
        return "its section table lies outside the file"
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    for sh in sections:
        if sh[1] != 8 and sh[4] + sh[5] > len(data):  # every section but SHT_NOBITS has bytes
            return "a section lies outside the file"
        if sh[1] == 2 and (sh[6] >= shnum or sh[5] % 24):
            return "a malformed symbol table"
    try:
        defined = set(defined_symbols(data))
    except (ValueError, UnicodeDecodeError, struct.error):
        return "a malformed symbol table"
    missing = [name for name in names if symbol_name(name) not in defined]  # as defined
    if missing:
        return f"it lacks {', '.join(missing)}"
    return None