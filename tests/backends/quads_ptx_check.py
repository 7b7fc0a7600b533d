"""The stencil's rows and quads variants compiled for sm_90 as a launch on a 512 x 512 x 256 grid
would (fixed leaf extents, 512 lanes in 4 warps over tiles 512 x 1 and 128 x 4, integers
divisible by 16 as Triton specialises them): prints each variant's counts of global loads,
16-byte loads and shared-memory instructions; then the same for the quads variant of the suite's
Parboil stencil (examples/hpvm_suite/stencil.py: blocks of 256 x 1 x 1, x one past the block's
lanes). Run without TRITON_INTERPRET (tests/test_quads.py)."""
from __future__ import annotations

import sys

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

import stencil
from differential.data import load
from hpvm_suite import stencil as suite_stencil
from hpvm_py.backends.triton.codegen import generate
from hpvm_py.rt.compiler import compile_graph


def ptx_of(text: str, kernel: str, arguments: dict[str, str], width: int,
           leaf: tuple[int, int] = (16, 8)) -> str:
    module = load(text, f"quads_check_{abs(hash(text))}")
    constants = {"E0_0": leaf[0], "E0_1": leaf[1], "BLOCK": 512, "TX": width, "TY": 512 // width}
    if "E0_2" in arguments:
        constants["E0_2"] = 1
    signature = {**arguments, **{name: "constexpr" for name in constants}}
    # pointers and the grid's integers (512, 256, 32, 64 ...) are multiples of 16; c0 and c1 are floats' bits
    attrs = {(i,): [["tt.divisibility", 16]] for i, (name, kind) in enumerate(signature.items())
             if kind.startswith("*") or (kind == "i64" and not name.startswith(("v_c0", "v_c1")))}
    compiled = triton.compile(ASTSource(fn=getattr(module, kernel), signature=signature,
                                        constexprs=constants, attrs=attrs),
                              target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
    return compiled.asm["ptx"]


def main() -> None:
    (_, ctx, kernel), = compile_graph(stencil.root, "gpu").leaf_kernels()
    for name, quads in (("rows", False), ("quads", True)):
        source = generate(kernel.leaf, ctx, False, interpreted=False, fixed_grid=True, rows=True, quads=quads)
        for width in (512, 128):
            ptx = ptx_of(source.text, source.kernel, source.arguments, width)
            counts = {key: ptx.count(key) for key in ("ld.global", "ld.global.v4", ".shared")}
            print(f"{name} {width}: {sorted(counts.items())}")
    (_, ctx, kernel), = compile_graph(suite_stencil.root, "gpu").leaf_kernels()
    source = generate(kernel.leaf, ctx, False, interpreted=False, fixed_grid=True, rows=True, quads=True)
    for width in (512, 128):
        ptx = ptx_of(source.text, source.kernel, source.arguments, width, leaf=(256, 1))
        counts = {key: ptx.count(key) for key in ("ld.global", "ld.global.v4", ".shared")}
        print(f"suite {width}: {sorted(counts.items())}")


if __name__ == "__main__":
    sys.exit(main())
