"""A native fork-join pool for kernel partitions, generated with llvmlite.

Python threads that wait on locks wake up slowly (tens of microseconds on a VM, plus the GIL), and a
launch of a millisecond kernel cannot afford that twice. Here the worker threads live in native
code: each is a Python thread that calls `worker(state)` once and stays in it, with the GIL
released, spinning briefly and then sleeping in short naps until a job is published. A launch
writes the task records, publishes the job with one atomic store, runs tasks itself and waits (in
native code) until every task is done. This is how OpenMP runtimes do it.

State (an array of i64):
  [0] job word: generation << 32 | next task index (claims are compare-and-swap on this word,
      so a worker late from an earlier job can never take a task of the next one)
  [1] tasks done   [2] number of tasks   [3] address of the task records   [4] shutdown
  [5] wake-up counter (a futex word: bumped on every job and at shutdown)   [6] sleeping workers
A worker that has spun for a while without a job sleeps on the futex; a launch makes the wake-up
system call only when some worker sleeps. Idle workers cost nothing.
Task record (8 x i64): driver address, then its arguments: args, extents, p_begin, p_end,
o_begin, o_end, error.
"""
from __future__ import annotations

import atexit
import ctypes
import functools
import platform
import threading
from typing import Sequence

import llvmlite.ir as ir

from ...rt.pool import default_threads, thread_share
from .jit import LoadedObject, emit_object, optimize

I64 = ir.IntType(64)
I32 = ir.IntType(32)
PTR = ir.PointerType()
_TASK_WORDS = 8
_SPINS = 20000  # pause-loop iterations before sleeping (about 0.5-1 ms)
_SYS_FUTEX = 202  # x86-64 Linux
_FUTEX_WAIT_PRIVATE, _FUTEX_WAKE_PRIVATE = 128, 129

_DRIVER = ir.FunctionType(ir.VoidType(), [PTR, PTR, I64, I64, I64, I64, PTR])


def _word(builder: ir.IRBuilder, state: ir.Value, index: int) -> ir.Value:
    return builder.gep(state, [ir.Constant(I64, index)], source_etype=I64)


def _pause(builder: ir.IRBuilder, module: ir.Module) -> None:
    """A spin-wait hint: PAUSE on x86 (cheaper for the sibling hyperthread), nothing elsewhere."""
    if platform.machine() in ("x86_64", "AMD64", "i686"):
        fn = module.globals.get("llvm.x86.sse2.pause") or ir.Function(
            module, ir.FunctionType(ir.VoidType(), []), "llvm.x86.sse2.pause")
        builder.call(fn, [])


def _wake(b: ir.IRBuilder, state: ir.Value, syscall: ir.Function) -> None:
    """Bump the wake-up counter; if a worker sleeps on it, wake them all."""
    b.atomic_rmw("add", _word(b, state, 5), ir.Constant(I64, 1), "acq_rel")
    sleepers = b.load_atomic(_word(b, state, 6), "acquire", 8, typ=I64)
    with b.if_then(b.icmp_unsigned("!=", sleepers, ir.Constant(I64, 0))):
        b.call(syscall, [ir.Constant(I64, _SYS_FUTEX), _word(b, state, 5),
                         ir.Constant(I32, _FUTEX_WAKE_PRIVATE), ir.Constant(I32, 2**31 - 1)])


def _build_module() -> str:
    module = ir.Module(name="hpvm_pool")
    syscall = ir.Function(module, ir.FunctionType(I64, [I64], var_arg=True), "syscall")

    # work(state): claim tasks of the current job until none is left
    work = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR, I64]), "hpvm_pool_work")
    state, generation = work.args
    entry = work.append_basic_block("entry")
    claim = work.append_basic_block("claim")
    run = work.append_basic_block("run")
    done = work.append_basic_block("done")
    b = ir.IRBuilder(entry)
    b.branch(claim)
    b.position_at_end(claim)
    word = b.load_atomic(_word(b, state, 0), "acquire", 8, typ=I64)
    count = b.load_atomic(_word(b, state, 2), "acquire", 8, typ=I64)
    same_job = b.icmp_unsigned("==", b.lshr(word, ir.Constant(I64, 32)), generation)
    index = b.and_(word, ir.Constant(I64, 0xFFFFFFFF))
    left = b.icmp_unsigned("<", index, count)
    b.cbranch(b.and_(same_job, left), run, done)
    b.position_at_end(run)
    swapped = b.cmpxchg(_word(b, state, 0), word, b.add(word, ir.Constant(I64, 1)), "acq_rel", "acquire")
    won = b.extract_value(swapped, 1)
    call = work.append_basic_block("call")
    b.cbranch(won, call, claim)
    b.position_at_end(call)
    tasks = b.inttoptr(b.load_atomic(_word(b, state, 3), "acquire", 8, typ=I64), PTR)
    record = b.gep(tasks, [b.mul(index, ir.Constant(I64, _TASK_WORDS))], source_etype=I64)
    fields = [b.load(b.gep(record, [ir.Constant(I64, k)], source_etype=I64), typ=I64)
              for k in range(_TASK_WORDS)]
    # a typed function pointer lets llvmlite emit the indirect call (LLVM reads it as `ptr`)
    driver = b.inttoptr(fields[0], ir.PointerType(_DRIVER))
    b.call(driver, [b.inttoptr(fields[1], PTR), b.inttoptr(fields[2], PTR), fields[3], fields[4],
                    fields[5], fields[6], b.inttoptr(fields[7], PTR)])
    b.atomic_rmw("add", _word(b, state, 1), ir.Constant(I64, 1), "acq_rel")
    b.branch(claim)
    b.position_at_end(done)
    b.ret_void()

    # worker(state): wait for each new job, take part in it, until shutdown
    worker = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR]), "hpvm_pool_worker")
    (wstate,) = worker.args
    entry = worker.append_basic_block("entry")
    wait = worker.append_basic_block("wait")
    idle = worker.append_basic_block("idle")
    spin = worker.append_basic_block("spin")
    nap = worker.append_basic_block("sleep")
    pause = worker.append_basic_block("pause")
    join = worker.append_basic_block("join")
    leave = worker.append_basic_block("leave")
    b = ir.IRBuilder(entry)
    seen0 = b.lshr(b.load_atomic(_word(b, wstate, 0), "acquire", 8, typ=I64), ir.Constant(I64, 32))
    b.branch(wait)
    b.position_at_end(wait)
    seen = b.phi(I64)
    spins = b.phi(I64)
    seen.add_incoming(seen0, entry)
    spins.add_incoming(ir.Constant(I64, 0), entry)
    now = b.lshr(b.load_atomic(_word(b, wstate, 0), "acquire", 8, typ=I64), ir.Constant(I64, 32))
    stop = b.icmp_unsigned("!=", b.load_atomic(_word(b, wstate, 4), "acquire", 8, typ=I64),
                           ir.Constant(I64, 0))
    b.cbranch(stop, leave, idle)
    b.position_at_end(idle)
    b.cbranch(b.icmp_unsigned("!=", now, seen), join, spin)
    b.position_at_end(spin)
    more = b.add(spins, ir.Constant(I64, 1))
    b.cbranch(b.icmp_unsigned(">=", spins, ir.Constant(I64, _SPINS)), nap, pause)
    b.position_at_end(nap)
    # sleep until the wake-up counter moves: count ourselves as a sleeper, check once more that no
    # job arrived meanwhile, and wait on the counter's value read before that check
    ticket = b.load_atomic(_word(b, wstate, 5), "acquire", 8, typ=I64)
    b.atomic_rmw("add", _word(b, wstate, 6), ir.Constant(I64, 1), "acq_rel")
    latest = b.lshr(b.load_atomic(_word(b, wstate, 0), "acquire", 8, typ=I64), ir.Constant(I64, 32))
    quiet = b.and_(b.icmp_unsigned("==", latest, seen),
                   b.icmp_unsigned("==", b.load_atomic(_word(b, wstate, 4), "acquire", 8, typ=I64),
                                   ir.Constant(I64, 0)))
    with b.if_then(quiet):
        b.call(syscall, [ir.Constant(I64, _SYS_FUTEX), _word(b, wstate, 5),
                         ir.Constant(I32, _FUTEX_WAIT_PRIVATE), b.trunc(ticket, I32),
                         ir.Constant(PTR, None)])
    b.atomic_rmw("sub", _word(b, wstate, 6), ir.Constant(I64, 1), "acq_rel")
    slept = b.block
    b.branch(wait)
    b.position_at_end(pause)
    _pause(b, module)
    b.branch(wait)
    seen.add_incoming(seen, slept)
    spins.add_incoming(ir.Constant(I64, 0), slept)
    seen.add_incoming(seen, pause)
    spins.add_incoming(more, pause)
    b.position_at_end(join)
    b.call(work, [wstate, now])
    seen.add_incoming(now, join)
    spins.add_incoming(ir.Constant(I64, 0), join)
    b.branch(wait)
    b.position_at_end(leave)
    b.ret_void()

    # run(state, generation): take part in the published job, then wait until it is all done
    waker = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR]), "hpvm_pool_wake")
    b = ir.IRBuilder(waker.append_basic_block("entry"))
    _wake(b, waker.args[0], syscall)
    b.ret_void()

    runner = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR, I64]), "hpvm_pool_run")
    rstate, rgen = runner.args
    entry = runner.append_basic_block("entry")
    check = runner.append_basic_block("check")
    again = runner.append_basic_block("again")
    finished = runner.append_basic_block("finished")
    b = ir.IRBuilder(entry)
    _wake(b, rstate, syscall)
    b.call(work, [rstate, rgen])
    b.branch(check)
    b.position_at_end(check)
    total = b.load_atomic(_word(b, rstate, 2), "acquire", 8, typ=I64)
    completed = b.load_atomic(_word(b, rstate, 1), "acquire", 8, typ=I64)
    b.cbranch(b.icmp_unsigned("<", completed, total), again, finished)
    b.position_at_end(again)
    _pause(b, module)
    b.branch(check)
    b.position_at_end(finished)
    b.ret_void()
    return str(module)


@functools.cache
def _pool_code() -> LoadedObject:
    """The pool's functions, compiled once: they take the pool's state as an argument, so every
    pool (the full one and the stages' smaller ones) shares them."""
    return LoadedObject(emit_object(optimize(_build_module())))


class NativePool:
    """Runs task records on `threads` threads: the caller and threads - 1 native workers."""

    def __init__(self, threads: int):
        self.threads = threads
        self._code = _pool_code()
        self._run = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)(
            self._code.address("hpvm_pool_run"))
        worker = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(self._code.address("hpvm_pool_worker"))
        self._wake = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(self._code.address("hpvm_pool_wake"))
        self._state = (ctypes.c_int64 * 7)()
        self._state_at = ctypes.addressof(self._state)
        self._generation = 0
        self._lock = threading.Lock()
        self._workers = [threading.Thread(target=worker, args=(self._state_at,), daemon=True,
                                          name=f"hpvm-native-{i}") for i in range(threads - 1)]
        for t in self._workers:
            t.start()
        atexit.register(self.shutdown)

    def run(self, tasks: Sequence[Sequence[int]]) -> bool:
        """Run every task (driver address and its 7 arguments); False when the pool is busy with
        another thread's job (the caller then runs its tasks itself)."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            records = (ctypes.c_int64 * (_TASK_WORDS * len(tasks)))()
            for i, task in enumerate(tasks):
                records[i * _TASK_WORDS:(i + 1) * _TASK_WORDS] = task
            state = self._state
            self._generation = (self._generation + 1) & 0xFFFFFFFF
            state[1] = 0
            state[2] = len(tasks)
            state[3] = ctypes.addressof(records)
            # publish last: x86 keeps stores in order, so a worker that sees the new generation
            # also sees the task records and counts written above
            state[0] = self._generation << 32
            self._run(self._state_at, self._generation)
            return True
        finally:
            self._lock.release()

    def shutdown(self) -> None:
        self._state[4] = 1
        self._wake(self._state_at)
        for t in self._workers:
            t.join(1.0)


_pool: NativePool | None = None
_pool_lock = threading.Lock()
_share_pools: dict[int, list[NativePool]] = {}  # smaller pools for the stages of a stream


def native_pool() -> NativePool:
    global _pool
    if _pool is None:
        with _pool_lock:
            if _pool is None:
                _pool = NativePool(default_threads())
    return _pool


def run_tasks(tasks: Sequence[Sequence[int]]) -> bool:
    """Run the tasks on a pool of the calling thread's share of the threads (rt/pool.py); False
    when the share is one thread or every pool of that size is busy: the caller runs them."""
    full = native_pool()
    share = thread_share(full.threads)
    if share >= full.threads:
        return full.run(tasks)
    if share < 2:
        return False
    with _pool_lock:
        pools = _share_pools.setdefault(share, [])
        candidates = list(pools)
    for pool in candidates:
        if pool.run(tasks):
            return True
    with _pool_lock:
        if len(pools) >= full.threads // share:
            return False
        pool = NativePool(share)  # at most threads / share of them, each idle when not used
        pools.append(pool)
    return pool.run(tasks)
