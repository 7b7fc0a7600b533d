"""Compile the gpu target's code for an H100 (sm_90) without a GPU: Triton's compiler and ptxas run
on the CPU. Run in a process without TRITON_INTERPRET (which would make triton.jit interpret).

usage: python triton_compile_check.py module:graph|semantics|launches:module ...
("semantics": the kernels of tests/test_semantics.py, every operator and cast helper;
"launches:module": module.LAUNCHES, each leaf compiled as that launch would dispatch it on a GPU)
Prints one line per compiled kernel; exits non-zero with the compiler's message on a failure.
Every compiled kernel's parameters, as the gpu target's own launcher packs them
(backends/triton/launcher.py), are checked against the kernel's PTX entry.
"""
from __future__ import annotations

import importlib
import re
import sys

import numpy as np
import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, make_backend
from triton.runtime.jit import create_function_from_signature

import hpvm_py as hpvm
from differential.data import load
from hpvm_py.backends.base import BufferArg
from hpvm_py.backends.triton.codegen import generate, kernel_name
from hpvm_py.backends.triton.kernel import GPU_DOT, GPU_SPREAD, SMALLER_DOTS, TritonKernel
from hpvm_py.backends.triton.launcher import OwnLauncher, parameters, refusal

SM90 = GPUTarget("cuda", 90, 32)
ENTRY = re.compile(r"\.entry\s+\w+\s*\(([^)]*)\)", re.S)
PTX_TYPE = re.compile(r"\s*\.param\s+\.[busf](\d+)\b")
TRITON_BYTES = {"i1": 1, "u1": 1, "i8": 1, "u8": 1, "i16": 2, "u16": 2, "fp16": 2, "bf16": 2,
                "i32": 4, "u32": 4, "fp32": 4, "i64": 8, "u64": 8, "fp64": 8}


def check_parameters(kernel, args: list) -> None:
    """The own launcher's parameters (one 8-byte slot each, the value in its low bytes) against
    the PTX entry's: as many, in order, each as wide as its Triton type, then the two scratch
    pointers (global_scratch, profile_scratch), null; and the packing accepts every argument."""
    params = parameters(kernel.src.signature)
    entry = ENTRY.search(kernel.asm["ptx"]).group(1)
    ptx = [int(PTX_TYPE.match(p).group(1)) // 8 for p in entry.split(",") if p.strip()]
    ours = [8 if kind.startswith("*") else TRITON_BYTES[kind] for _, kind in params] + [8, 8]
    assert ptx == ours, f"{kernel.name}: PTX parameters of {ptx} bytes, the own launcher packs {ours}"
    assert refusal(kernel.metadata) is None, f"{kernel.name}: {refusal(kernel.metadata)}"
    launcher = OwnLauncher(0, params, args, (1, 1, 1), kernel.metadata.num_warps,
                           kernel.metadata.shared, 0, kernel.name, None)
    assert launcher.params.count == len(ptx)


def placeholders(signature: dict) -> list:
    """Arguments of a kernel compiled without a launch (any value of each type)."""
    return [0 if kind.startswith("*") else 0.5 if kind.startswith(("fp", "bf")) else 2
            for kind in signature.values()]


def constants(source) -> list[dict]:
    """The constexpr arguments of launches (kernel.py's GPU block shapes): a splittable spread
    loop unsplit and split over GPU_SPREAD's programs."""
    if source.tiles:
        return [{"BLOCK": 128, "TX": 32, "TY": 4}]
    if source.split_words:
        return [{"BLOCK": GPU_SPREAD.lanes, "SPLIT": split} for split in (1, GPU_SPREAD.programs)]
    if source.spread:
        return [{"BLOCK": GPU_SPREAD.lanes}]
    if source.dot is None:
        private = {"LANES32": True} if source.private else {}
        return [{"BLOCK": 128, **private, **{f"NB_{kernel_name(p.name)}": 256 for p in source.private}}]
    return [{"BLOCK": dot.bm * dot.bn, "BM": dot.bm, "BN": dot.bn, "BK": dot.bk, "GROUP": dot.group}
            for dot in (GPU_DOT,) + SMALLER_DOTS]


def semantic_graphs() -> list:
    from hpvm_py import types as T
    from programs import semantic_kernels as K

    ints = [T.i8, T.i32, T.i64, T.u8, T.u32, T.u64]
    floats = [T.f16, T.bf16, T.f32, T.f64]
    graphs = [K.make_graph(K.make_binary(t, None), 3) for t in ints + floats]
    graphs += [K.make_graph(K.make_int_only(t), 3) for t in ints]
    graphs += [K.make_graph(K.make_float_only(t), 3) for t in floats]
    casts = [T.i1, T.i8, T.u64, T.f16, T.bf16, T.f64]
    graphs += [K.make_graph(K.make_cast(a, b), 2) for a in casts for b in casts if a != b]
    graphs += [K.make_by_divisor(t) for t in ints + [T.i16, T.u16]]  # masks, reciprocals
    graphs += [K.make_negations_in_min_max(t) for t in (T.i8, T.i16, T.i32, T.i64)]  # _ineg
    graphs += [K.make_narrow_guards(t) for t in (T.i8, T.u8, T.i16, T.u16, T.i32)]  # _narrow_*
    graphs += [K.make_negated_shifts(t) for t in (T.i8, T.i16, T.i32, T.i64)]  # _ashr
    graphs += [K.make_signed_zero_selects(t) for t in (T.f16, T.f32, T.f64)]  # _select_bits
    graphs += [K.make_range_compares(t) for t in (T.f16, T.f32, T.f64)]  # _flt .. _fge
    graphs += [K.make_unsigned_conversions(T.i8, T.u64, T.f32)]
    return graphs


def leaf_argument(value: object) -> object:
    """A launch's argument as the executor hands it to the kernel: arrays as buffers (in host
    memory: nothing runs), scalars as NumPy integers."""
    if isinstance(value, np.ndarray):
        tensor = torch.from_numpy(value.reshape(-1).view(np.uint8))
        return BufferArg(tensor, tensor.data_ptr(), value.nbytes, None)
    return np.int64(value)


def compile_launches(module_name: str) -> int:
    """Each leaf of the module's LAUNCHES (graph, leaf arguments, extents) compiled as the launch
    would be on a GPU: TritonKernel.prepare picks the variant (a small grid's fixed extents) and
    layout, and Triton's own binder specialises the call (integers equal to 1 become constants),
    which the other checks, compiling every argument as a plain integer, never see."""
    backend = make_backend(SM90)
    count = 0
    for graph, leaf_args, extents in importlib.import_module(module_name).LAUNCHES:
        for leaf, ctx, _ in hpvm.compile(graph, target="cpu").leaf_kernels():
            for checked in (False, True):
                kernel = TritonKernel(leaf, ctx, lambda fixed, optimised, rows, quads: generate(
                    leaf, ctx, checked, False, fixed, optimised, rows=rows, quads=quads))
                launch = kernel.prepare([leaf_argument(a) for a in leaf_args],
                                        [None] * len(leaf.outputs), extents)
                jit, options = launch.jit, dict(launch.options)
                binder = create_function_from_signature(jit.signature, jit.params, backend)
                bound, specialization, parsed = binder(*launch._typed_call(), **options)
                parsed, signature, constexprs, attrs = jit._pack_args(backend, options, bound,
                                                                      specialization, parsed)
                compiled = triton.compile(ASTSource(jit, signature, constexprs, attrs), target=SM90,
                                          options=parsed.__dict__)
                check_parameters(compiled, list(bound.values()))
                print(f"compiled {leaf.name} checked={checked} launch {extents}")
                count += 1
    return count


def main(names: list[str]) -> None:
    count = 0
    for name in names:
        if name.startswith("launches:"):
            count += compile_launches(name.split(":", 1)[1])
            continue
        if name == "semantics":
            graphs, variants = semantic_graphs(), (False,)
        else:
            module_name, graph_name = name.split(":")
            graphs, variants = [getattr(importlib.import_module(module_name), graph_name)], (False, True)
        for graph in graphs:
            compiled = hpvm.compile(graph, target="cpu")  # node contexts do not depend on the target
            for leaf, ctx, _ in compiled.leaf_kernels():
                for checked in variants:
                    sources = [generate(leaf, ctx, checked, interpreted=False)]
                    if sources[0].dot or sources[0].private or sources[0].tiles:  # and the fallback
                        sources.append(generate(leaf, ctx, checked, interpreted=False, optimised=False))
                    for source in sources:
                        for constexprs in constants(source):
                            fn = getattr(load(source.text, f"check_{count}"), source.kernel)
                            ast = ASTSource(fn=fn, signature=dict(source.arguments), constexprs=constexprs)
                            kernel = triton.compile(ast, target=SM90,
                                                    options={"enable_fp_fusion": source.dot is not None})
                            assert "cubin" in kernel.asm
                            check_parameters(kernel, placeholders(source.arguments))
                            kind = "dot" if source.dot else "tiles" if source.tiles else \
                                "private" if source.private else "spread" if source.spread else "literal"
                            split = f" SPLIT={constexprs['SPLIT']}" if "SPLIT" in constexprs else ""
                            print(f"compiled {leaf.name} checked={checked} {kind}{split}")
                            count += 1


if __name__ == "__main__":
    main(sys.argv[1:])
