"""The cpu target: leaves compiled to native code with LLVM (llvmlite), run on the worker pool.

A leaf compiles, per NodeContext, to a driver function that loops over its dynamic instances itself
with the body inlined into the innermost (x) loop, so that LLVM's loop vectoriser works across
instances (abi.py has the calling convention). The pieces, in pipeline order:

  passes.py    the backend passes, in order: localize (prepare.py: scalar parameters the body
               assigns become locals), privatise (accesses.py), clip (clip.py)
  plan.py      "SIMT to loops": barrier-free regions run as loops over a group's instances, with
               uniform loops interchanged with the instance loop (uniform.py decides uniformity)
  driver.py    the driver: parent, row and instance loops, per-instance storage, malloc scratch
  nontemporal.py
               the driver variant for large outputs, with stores that skip the read-for-ownership
  codegen.py   expressions and statements (arith.py, mathfns.py, memory.py, lltypes.py below it)
  ../jit.py    target machine, O3 pipeline, object code, loading it (shared with the atomics)
  kernel.py    launch: argument checks and packing, partitions over the pool, privatised atomics,
               errors recorded by checked builds
  backend.py   CpuBackend: build() and the disk-cache keys (the caches are backends/base.py's)
"""
from .backend import CpuBackend

__all__ = ["CpuBackend"]
