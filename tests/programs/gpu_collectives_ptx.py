"""Compile every GPU collective kernel for an H100 (sm_90) without a GPU (Triton's compiler and
ptxas run on the CPU) and print what the tests check in the PTX: the flags' ordering (release
exchanges and acquire loads at system scope), the bounded wait's clock, and 16-byte peer loads.
Run without TRITON_INTERPRET (which would make triton.jit interpret).

Prints `KERNEL/WORLD release=N acquire=N timer=N v4=N st4=N` for each kernel (st4: 16-byte
stores; push twice: KERNEL-early for its first chunk sent with the arrival).
"""
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from hpvm_py.distributed.gpu import kernels as K
from hpvm_py.distributed.gpu import stream_kernels as S

SM90 = GPUTarget("cuda", 90, 32)
COMMON = {"ctrl": "*i64", "bases": "*i64", "rank": "i32", "status_addr": "i64", "timeout_ns": "i64",
          "fingerprint": "i64"}
CASES = [  # kernel, leading arguments, constexprs (every kernel for two and four ranks but stream)
    (K.all_reduce_one_shot, {"buf": "*bf16", "n": "i32"}, {"OP": 0, "WIDEN": True, "ELEM": 2, "BLOCK": 8192}),
    (K.all_reduce_two_shot, {"buf": "*fp32", "n": "i32"}, {"OP": 1, "WIDEN": False, "ELEM": 4, "BLOCK": 4096}),
    (K.all_reduce_push, {"buf": "*bf16", "n": "i32", "scratch": "*bf16"},
     {"OP": 0, "WIDEN": True, "ELEM": 2, "BLOCK": 8192, "EARLY": False}),
    (K.all_reduce_push, {"buf": "*bf16", "n": "i32", "scratch": "*bf16"},
     {"OP": 0, "WIDEN": True, "ELEM": 2, "BLOCK": 8192, "EARLY": True}),
    (K.all_reduce_one_shot_push, {"buf": "*bf16", "n": "i32", "rows": "*bf16"},
     {"OP": 0, "WIDEN": True, "ELEM": 2, "BLOCK": 2048, "PROGRAMS": 128}),
    (K.all_gather, {"src": "*fp16", "dst": "*fp16", "n": "i32"}, {"ELEM": 2, "BLOCK": 8192}),
    (K.reduce_scatter, {"src": "*i32", "dst": "*i32", "n": "i32"}, {"OP": 2, "WIDEN": False, "ELEM": 4, "BLOCK": 4096}),
    (K.broadcast, {"buf": "*u8", "n": "i32", "root": "i32"}, {"ELEM": 1, "BLOCK": 16384}),
    (K.all_reduce_rmsnorm, {"x": "*bf16", "residual": "*bf16", "weight": "*bf16", "out": "*u8",
                            "scales": "*fp32", "rows": "i32", "hidden": "i32", "eps": "fp32"},
     {"QUANT": False, "WIDEN": True, "ELEM": 2, "BLOCK": 4096}),
    (S.all_reduce_stream, {"buf": "*bf16", "n": "i32", "ring": "*bf16"},
     {"OP": 0, "WIDEN": True, "ELEM": 2, "BLOCK": 8192, "SLOTS": 4}),
]
WORLDS = {"all_reduce_stream": (2,)}  # the stream kernel is for two ranks only

for kernel, leading, constexprs in CASES:
    for world in WORLDS.get(kernel.__name__, (2, 4)):
        consts = {**constexprs, "WORLD": world}
        signature = {**leading, **COMMON, **{name: "constexpr" for name in consts}}
        # what the launcher's specialisation gives: 16-byte aligned pointers, sizes divisible by 16
        aligned = {(i,): [["tt.divisibility", 16]] for i, (name, t) in enumerate(signature.items())
                   if t.startswith("*") or name in ("n", "hidden")}
        ptx = triton.compile(ASTSource(fn=kernel, signature=signature, constexprs=consts, attrs=aligned),
                             target=SM90).asm["ptx"]
        name = kernel.__name__ + ("-early" if consts.get("EARLY") else "")
        print(f"{name}/{world} release={ptx.count('atom.global.sys.release.exch.b64')} "
              f"acquire={ptx.count('ld.global.sys.acquire.b64')} timer={ptx.count('%globaltimer')} "
              f"v4={ptx.count('ld.global.v4')} st4={ptx.count('st.global.v4')}", flush=True)
