"""Sequentially consistent 64-bit atomics on shared memory, as native code (LLVM through llvmlite).

Python has no atomic operations on raw memory, and cross-rank flags live in memory that other
processes write; these few functions are compiled once per process with the CPU backend's JIT and
called through ctypes (which releases the GIL while they run).
"""
from __future__ import annotations

import ctypes
import threading

from ..backends import jit

_IR = """
define i64 @hpvm_atomic_load(ptr %p) {
  %v = load atomic i64, ptr %p seq_cst, align 8
  ret i64 %v
}

define void @hpvm_atomic_store(ptr %p, i64 %v) {
  store atomic i64 %v, ptr %p seq_cst, align 8
  ret void
}

define i64 @hpvm_atomic_add(ptr %p, i64 %v) {
  %old = atomicrmw add ptr %p, i64 %v seq_cst, align 8
  ret i64 %old
}

; The first of n flags (at flags[i], an array of addresses) whose value is below `target`, polled
; up to `rounds` times; -1 once every flag has reached it.
define i64 @hpvm_first_behind(ptr %flags, i64 %n, i64 %target, i64 %rounds) {
entry:
  br label %round
round:
  %r = phi i64 [ 0, %entry ], [ %r1, %again ]
  br label %scan
scan:
  %i = phi i64 [ 0, %round ], [ %i1, %next ]
  %done = icmp sge i64 %i, %n
  br i1 %done, label %all, label %check
check:
  %slot = getelementptr i64, ptr %flags, i64 %i
  %addr = load i64, ptr %slot, align 8
  %fp = inttoptr i64 %addr to ptr
  %v = load atomic i64, ptr %fp seq_cst, align 8
  %behind = icmp slt i64 %v, %target
  br i1 %behind, label %wait, label %next
next:
  %i1 = add i64 %i, 1
  br label %scan
wait:
  %r1 = add i64 %r, 1
  %more = icmp slt i64 %r1, %rounds
  br i1 %more, label %again, label %give_up
again:
  br label %round
give_up:
  ret i64 %i
all:
  ret i64 -1
}
"""

_lock = threading.Lock()
_native: "_Native | None" = None


class _Native:
    def __init__(self) -> None:
        self._object = jit.LoadedObject(jit.emit_object(jit.optimize(_IR)))  # kept alive
        i64, ptr = ctypes.c_int64, ctypes.c_void_p
        self.load = ctypes.CFUNCTYPE(i64, ptr)(self._object.address("hpvm_atomic_load"))
        self.store = ctypes.CFUNCTYPE(None, ptr, i64)(self._object.address("hpvm_atomic_store"))
        self.add = ctypes.CFUNCTYPE(i64, ptr, i64)(self._object.address("hpvm_atomic_add"))
        self.first_behind = ctypes.CFUNCTYPE(i64, ptr, i64, i64, i64)(
            self._object.address("hpvm_first_behind"))


def native() -> _Native:
    global _native
    with _lock:
        if _native is None:
            _native = _Native()
        return _native
