"""Compile the quantized GPU kernels for an H100 (sm_90) without a GPU, as the launcher does
(no FP fusion for the quantized all-reduce), and print what tests/test_quick_reduce.py checks in
the PTX: the flag protocol's ordering, correctly rounded divisions, no fused multiply-add in the
quantized sum (it would round differently from the host codec), and the fp8 conversions.
Run without TRITON_INTERPRET.

Prints `KERNEL/MODE/DTYPE/WORLD release=N acquire=N div_rn=N fma=N e4m3=N` for each variant.
"""
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from hpvm_py.distributed.gpu import kernels as K
from hpvm_py.distributed.gpu import quant_kernels as Q
from hpvm_py.distributed.quantize import BITS, MODES, QMAX

SM90 = GPUTarget("cuda", 90, 32)
COMMON = {"ctrl": "*i64", "bases": "*i64", "rank": "i32", "status_addr": "i64", "timeout_ns": "i64",
          "fingerprint": "i64"}


def compile_ptx(kernel, leading: dict, consts: dict, fusion: bool) -> str:  # noqa: ANN001
    signature = {**leading, **COMMON, **{name: "constexpr" for name in consts}}
    aligned = {(i,): [["tt.divisibility", 16]] for i, (name, t) in enumerate(signature.items())
               if t.startswith("*") or name in ("n", "hidden")}
    source = ASTSource(fn=kernel, signature=signature, constexprs=consts, attrs=aligned)
    return triton.compile(source, target=SM90, options={"enable_fp_fusion": fusion, "num_warps": 8}).asm["ptx"]


def show(name: str, ptx: str) -> None:
    print(f"{name} release={ptx.count('atom.global.sys.release.exch.b64')} "
          f"acquire={ptx.count('ld.global.sys.acquire.b64')} div_rn={ptx.count('div.rn.f32')} "
          f"fma={ptx.count('fma.rn.f32')} e4m3={ptx.count('e4m3x2')}", flush=True)


VARIANTS = [("fp8", "*bf16", 8192, 2), ("int8", "*fp32", 4096, 2), ("int4", "*fp16", 8192, 2),
            ("int8", "*bf16", 8192, 4)]
for mode, dtype, block, world in VARIANTS:
    consts = {"MODE": MODES.index(mode), "QMAX": QMAX[mode], "CODE_BYTES": block * BITS[mode] // 8,
              "WORLD": world, "BLOCK": block}
    leading = {"buf": dtype, "n": "i32", "codes": "*u8", "scales": "*fp32"}
    show(f"all_reduce_quantized/{mode}/{dtype[1:]}/{world}",
         compile_ptx(Q.all_reduce_quantized, leading, consts, fusion=False))
leading = {"x": "*bf16", "residual": "*bf16", "weight": "*bf16", "out": "*u8", "scales": "*fp32",
           "rows": "i32", "hidden": "i32", "eps": "fp32"}
show("all_reduce_rmsnorm/fp8/bf16/2", compile_ptx(K.all_reduce_rmsnorm, leading, {
    "QUANT": True, "WIDEN": True, "ELEM": 2, "BLOCK": 4096, "WORLD": 2}, fusion=True))
