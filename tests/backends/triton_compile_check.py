"""Compile the gpu target's code for an H100 (sm_90) without a GPU: Triton's compiler and ptxas run
on the CPU. Run in a process without TRITON_INTERPRET (which would make triton.jit interpret).

usage: python triton_compile_check.py module:graph|semantics ...
("semantics": the kernels of tests/test_semantics.py, every operator and cast helper)
Prints one line per compiled kernel; exits non-zero with the compiler's message on a failure.
"""
from __future__ import annotations

import importlib
import sys
import tempfile
from pathlib import Path

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

import hpvm_py as hpvm
from hpvm_py.backends.triton.codegen import generate, kernel_name
from hpvm_py.backends.triton.kernel import GPU_DOT, GPU_SPREAD

SM90 = GPUTarget("cuda", 90, 32)


def load(text: str, name: str):
    path = Path(tempfile.mkdtemp()) / f"{name}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


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
    dot = GPU_DOT
    return [{"BLOCK": dot.bm * dot.bn, "BM": dot.bm, "BN": dot.bn, "BK": dot.bk, "GROUP": dot.group}]


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
    return graphs


def main(names: list[str]) -> None:
    count = 0
    for name in names:
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
                            kind = "dot" if source.dot else "tiles" if source.tiles else \
                                "private" if source.private else "spread" if source.spread else "literal"
                            split = f" SPLIT={constexprs['SPLIT']}" if "SPLIT" in constexprs else ""
                            print(f"compiled {leaf.name} checked={checked} {kind}{split}")
                            count += 1


if __name__ == "__main__":
    main(sys.argv[1:])
