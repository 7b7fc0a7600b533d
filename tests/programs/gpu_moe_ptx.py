"""Compile the mixture-of-experts kernels (hpvm_py/distributed/gpu/moe_kernels.py) for an H100
(sm_90) without a GPU, as gpu_collectives_ptx.py does for the other collectives, and print what
the tests check in the PTX. Run without TRITON_INTERPRET.

Prints `KERNEL/WORLD/TYPE release=N acquire=N timer=N v4=N` for each variant.
"""
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from hpvm_py.distributed.gpu import moe_kernels as K

SM90 = GPUTarget("cuda", 90, 32)
COMMON = {"ctrl": "*i64", "bases": "*i64", "rank": "i32", "status_addr": "i64", "timeout_ns": "i64",
          "fingerprint": "i64"}
SIZES = {"n_tokens": "i32", "hidden": "i32", "experts": "i32", "capacity": "i32"}


def dispatch(elem: str) -> dict:
    return {"tokens": f"*{elem}", "route": "*i32", "recv": f"*{elem}", "counts": "*i32", "origin": "*i32",
            "slot": "*i32", "scratch": "*i32", "n_tokens": "i32", "per_program": "i32", "hidden": "i32",
            "experts": "i32", "capacity": "i32"}


def combine(elem: str) -> dict:
    return {"expert_out": f"*{elem}", "slot": "*i32", "gate": "*fp32", "out": f"*{elem}", **SIZES}


CASES = [  # kernel, label, arguments before the common ones, constexprs, takes the flags
    (K.moe_count, "i32", {"route": "*i32", "n_tokens": "i32", "per_program": "i32", "scratch": "*i32",
                          "experts": "i32", "status_addr": "i64"},
     {"BAD": 1 << 20, "BLOCK_T": 32, "BLOCK_E": 256}, False),
    (K.moe_dispatch, "bf16", dispatch("bf16"),
     {"ELEM": 2, "BLOCK_T": 32, "BLOCK_E": 256, "BLOCK_P": 32, "BLOCK_H": 8192}, True),
    (K.moe_dispatch, "u8", dispatch("u8"),
     {"ELEM": 1, "BLOCK_T": 128, "BLOCK_E": 16, "BLOCK_P": 512, "BLOCK_H": 4096}, True),
    (K.moe_combine, "bf16", combine("bf16"),
     {"BAD": (1 << 20) + 1, "GATED": True, "ELEM": 2, "BLOCK_H": 8192}, True),
    (K.moe_combine, "fp64", combine("fp64"),
     {"BAD": (1 << 20) + 1, "GATED": True, "ELEM": 8, "BLOCK_H": 2048}, True),
]

for kernel, label, leading, constexprs, flags in CASES:
    for world in (2, 4):
        consts = {**constexprs, **({"WORLD": world} if flags else {})}
        signature = {**leading, **(COMMON if flags else {}), **{name: "constexpr" for name in consts}}
        # the launcher's specialisation: 16-byte aligned pointers, a hidden size divisible by 16
        aligned = {(i,): [["tt.divisibility", 16]] for i, (name, t) in enumerate(signature.items())
                   if t.startswith("*") or name == "hidden"}
        ptx = triton.compile(ASTSource(fn=kernel, signature=signature, constexprs=consts, attrs=aligned),
                             target=SM90).asm["ptx"]
        print(f"{kernel.__name__}/{world}/{label} release={ptx.count('atom.global.sys.release.exch.b64')} "
              f"acquire={ptx.count('ld.global.sys.acquire.b64')} timer={ptx.count('%globaltimer')} "
              f"v4={ptx.count('ld.global.v4') + ptx.count('st.global.v4')}", flush=True)
