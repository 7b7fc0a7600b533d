"""A native work-sharing pool for kernel partitions, generated with llvmlite.
(docs/architecture.md, "Module notes": backends/cpu/threads.py)"""
from __future__ import annotations

import atexit
import ctypes
import functools
import os
import platform
import threading
import time
from dataclasses import dataclass

import llvmlite.ir as ir
import numpy as np

from ...errors import LaunchError
from ...support import settings
from ...support.cores import default_threads
from ..jit import LoadedObject, emit_object, optimize

I64 = ir.IntType(64)
I32 = ir.IntType(32)
PTR = ir.PointerType()
TASK_WORDS = 8  # a task record: the driver's address and its 7 arguments
SLOTS = 8  # jobs in flight at once; a launch that finds none free runs its tasks itself
_SLOT_BASE, _SLOT_WORDS = 8, 4
_FIELD_BITS = 20  # count and next task; the tag takes the top 24 bits
MAX_TASKS = (1 << _FIELD_BITS) - 1
# idle pause-loop iterations of a worker before it sleeps: about 0.5-1 ms, so that a host loop's
# next launch finds the workers awake. Above LARGE_POOL threads, less: on a 64-vCPU VM, 63 workers
# spinning between launches had the hypervisor take 6-26% of the vCPUs' time (steal), and a
# launch waited for the descheduled ones (its median 4x its minimum); with 2000 iterations the
# median was 2.3-4.5x lower on two such VMs (docs/architecture.md, "backends/cpu/threads.py").
IDLE_SPINS, LARGE_POOL_SPINS, LARGE_POOL = 20000, 2000, 32
_OWNER_SPINS = 2000  # pauses of a launch waiting for its last tasks before it yields its core
_SYS_FUTEX, _SYS_SCHED_YIELD = 202, 24  # x86-64 Linux
_FUTEX_WAIT_PRIVATE, _FUTEX_WAKE_PRIVATE = 128, 129
# seconds shutdown() waits for the workers, all of them together: one busy with a long task (a
# launch still running in a daemon thread at exit) leaves when it ends, and a wait per worker
# held the interpreter's exit a second per thread
SHUTDOWN_WAIT = 1.0

_DRIVER = ir.FunctionType(ir.VoidType(), [PTR, PTR, I64, I64, I64, I64, PTR])


def _word(builder: ir.IRBuilder, state: ir.Value, index: int | ir.Value) -> ir.Value:
    at = ir.Constant(I64, index) if isinstance(index, int) else index
    return builder.gep(state, [at], source_etype=I64)


def _slot_word(b: ir.IRBuilder, state: ir.Value, slot: ir.Value, field: int) -> ir.Value:
    at = b.add(b.mul(slot, ir.Constant(I64, _SLOT_WORDS)), ir.Constant(I64, _SLOT_BASE + field))
    return _word(b, state, at)


def _pause(builder: ir.IRBuilder, module: ir.Module) -> None:
    """A spin-wait hint: PAUSE on x86 (cheaper for the sibling hyperthread), nothing elsewhere."""
    if platform.machine() in ("x86_64", "AMD64", "i686"):
        fn = module.globals.get("llvm.x86.sse2.pause") or ir.Function(
            module, ir.FunctionType(ir.VoidType(), []), "llvm.x86.sse2.pause")
        builder.call(fn, [])


def _wake(b: ir.IRBuilder, state: ir.Value, syscall: ir.Function) -> None:
    """Bump the wake-up counter; if a worker sleeps on it, wake them all. (seq_cst: a worker
    counts itself as a sleeper, then reads the counter; this side bumps it, then reads the
    sleepers: one of the two sees the other.)"""
    b.atomic_rmw("add", _word(b, state, 0), ir.Constant(I64, 1), "seq_cst")
    sleepers = b.load_atomic(_word(b, state, 1), "seq_cst", 8, typ=I64)
    with b.if_then(b.icmp_unsigned("!=", sleepers, ir.Constant(I64, 0))):
        b.call(syscall, [ir.Constant(I64, _SYS_FUTEX), _word(b, state, 0),
                         ir.Constant(I32, _FUTEX_WAKE_PRIVATE), ir.Constant(I32, 2**31 - 1)])


def _field(b: ir.IRBuilder, word: ir.Value, shift: int) -> ir.Value:
    return b.and_(b.lshr(word, ir.Constant(I64, shift)), ir.Constant(I64, MAX_TASKS))


def _build_work(module: ir.Module) -> ir.Function:
    """work(state, slot) -> tasks run: claim and run tasks of one slot until none is left."""
    work = ir.Function(module, ir.FunctionType(I64, [PTR, I64]), "hpvm_pool_work")
    state, slot = work.args
    entry = work.append_basic_block("entry")
    claim = work.append_basic_block("claim")
    take = work.append_basic_block("take")
    call = work.append_basic_block("call")
    done = work.append_basic_block("done")
    b = ir.IRBuilder(entry)
    job = _slot_word(b, state, slot, 0)
    b.branch(claim)
    b.position_at_end(claim)
    ran = b.phi(I64, name="ran")
    ran.add_incoming(ir.Constant(I64, 0), entry)
    word = b.load_atomic(job, "acquire", 8, typ=I64)
    index = b.and_(word, ir.Constant(I64, MAX_TASKS))
    b.cbranch(b.icmp_unsigned("<", index, _field(b, word, _FIELD_BITS)), take, done)
    b.position_at_end(take)
    swapped = b.cmpxchg(job, word, b.add(word, ir.Constant(I64, 1)), "acq_rel", "acquire")
    ran.add_incoming(ran, take)
    b.cbranch(b.extract_value(swapped, 1), call, claim)
    b.position_at_end(call)
    # the job cannot finish before this task does, so its records stay in place meanwhile
    tasks = b.inttoptr(b.load_atomic(_slot_word(b, state, slot, 2), "acquire", 8, typ=I64), PTR)
    record = b.gep(tasks, [b.mul(index, ir.Constant(I64, TASK_WORDS))], source_etype=I64)
    fields = [b.load(b.gep(record, [ir.Constant(I64, k)], source_etype=I64), typ=I64)
              for k in range(TASK_WORDS)]
    # a typed function pointer lets llvmlite emit the indirect call (LLVM reads it as `ptr`)
    driver = b.inttoptr(fields[0], ir.PointerType(_DRIVER))
    b.call(driver, [b.inttoptr(fields[1], PTR), b.inttoptr(fields[2], PTR), fields[3], fields[4],
                    fields[5], fields[6], b.inttoptr(fields[7], PTR)])
    b.atomic_rmw("add", _slot_word(b, state, slot, 1), ir.Constant(I64, 1), "acq_rel")
    ran.add_incoming(b.add(ran, ir.Constant(I64, 1)), call)
    b.branch(claim)
    b.position_at_end(done)
    b.ret(ran)
    return work


def _build_scan(module: ir.Module, work: ir.Function) -> ir.Function:
    """scan(state, first) -> tasks run: work on every slot, starting at `first`."""
    scan = ir.Function(module, ir.FunctionType(I64, [PTR, I64]), "hpvm_pool_scan")
    state, first = scan.args
    entry = scan.append_basic_block("entry")
    loop = scan.append_basic_block("slot")
    done = scan.append_basic_block("done")
    b = ir.IRBuilder(entry)
    b.branch(loop)
    b.position_at_end(loop)
    k = b.phi(I64, name="k")
    total = b.phi(I64, name="total")
    k.add_incoming(ir.Constant(I64, 0), entry)
    total.add_incoming(ir.Constant(I64, 0), entry)
    slot = b.urem(b.add(first, k), ir.Constant(I64, SLOTS))
    more = b.add(total, b.call(work, [state, slot]))
    following = b.add(k, ir.Constant(I64, 1))
    k.add_incoming(following, loop)
    total.add_incoming(more, loop)
    b.cbranch(b.icmp_unsigned("<", following, ir.Constant(I64, SLOTS)), loop, done)
    b.position_at_end(done)
    b.ret(more)
    return scan


def _build_worker(module: ir.Module, scan: ir.Function, syscall: ir.Function, spins: int) -> None:
    """worker(state, first): take tasks from any job until shutdown; spin `spins` pauses, then
    sleep, when idle."""
    worker = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR, I64]), "hpvm_pool_worker")
    state, first = worker.args
    entry = worker.append_basic_block("entry")
    wait = worker.append_basic_block("wait")
    look = worker.append_basic_block("look")
    idle = worker.append_basic_block("idle")
    pause = worker.append_basic_block("pause")
    nap = worker.append_basic_block("sleep")
    leave = worker.append_basic_block("leave")
    b = ir.IRBuilder(entry)
    b.branch(wait)
    b.position_at_end(wait)
    spun = b.phi(I64, name="spun")
    spun.add_incoming(ir.Constant(I64, 0), entry)
    stop = b.load_atomic(_word(b, state, 2), "acquire", 8, typ=I64)
    b.cbranch(b.icmp_unsigned("!=", stop, ir.Constant(I64, 0)), leave, look)
    b.position_at_end(look)
    # read the counter before looking: a job published after this read changes it
    seen = b.load_atomic(_word(b, state, 0), "seq_cst", 8, typ=I64)
    ran = b.call(scan, [state, first])
    now = b.load_atomic(_word(b, state, 0), "seq_cst", 8, typ=I64)
    busy = b.or_(b.icmp_unsigned("!=", ran, ir.Constant(I64, 0)), b.icmp_unsigned("!=", now, seen))
    spun.add_incoming(ir.Constant(I64, 0), look)
    b.cbranch(busy, wait, idle)
    b.position_at_end(idle)
    b.cbranch(b.icmp_unsigned(">=", spun, ir.Constant(I64, spins)), nap, pause)
    b.position_at_end(pause)
    _pause(b, module)
    spun.add_incoming(b.add(spun, ir.Constant(I64, 1)), pause)
    b.branch(wait)
    b.position_at_end(nap)
    # count ourselves as a sleeper, then sleep only if no job was published since `seen`
    b.atomic_rmw("add", _word(b, state, 1), ir.Constant(I64, 1), "seq_cst")
    latest = b.load_atomic(_word(b, state, 0), "seq_cst", 8, typ=I64)
    quiet = b.and_(b.icmp_unsigned("==", latest, seen),
                   b.icmp_unsigned("==", b.load_atomic(_word(b, state, 2), "acquire", 8, typ=I64),
                                   ir.Constant(I64, 0)))
    with b.if_then(quiet):
        b.call(syscall, [ir.Constant(I64, _SYS_FUTEX), _word(b, state, 0),
                         ir.Constant(I32, _FUTEX_WAIT_PRIVATE), b.trunc(seen, I32),
                         ir.Constant(PTR, None)])
    b.atomic_rmw("sub", _word(b, state, 1), ir.Constant(I64, 1), "seq_cst")
    spun.add_incoming(ir.Constant(I64, 0), b.block)
    b.branch(wait)
    b.position_at_end(leave)
    b.ret_void()


def _build_runner(module: ir.Module, work: ir.Function, scan: ir.Function,
                  syscall: ir.Function) -> None:
    """run(state, slot): the launching thread wakes the workers, runs tasks of its own job, then
    helps with any job until its own is done (yielding its core when there is nothing to do)."""
    runner = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR, I64]), "hpvm_pool_run")
    state, slot = runner.args
    entry = runner.append_basic_block("entry")
    check = runner.append_basic_block("check")
    help_ = runner.append_basic_block("help")
    idle = runner.append_basic_block("idle")
    finished = runner.append_basic_block("finished")
    b = ir.IRBuilder(entry)
    _wake(b, state, syscall)
    b.call(work, [state, slot])
    count = _field(b, b.load_atomic(_slot_word(b, state, slot, 0), "acquire", 8, typ=I64), _FIELD_BITS)
    started = b.block  # _wake added blocks after entry
    b.branch(check)
    b.position_at_end(check)
    spins = b.phi(I64, name="spins")
    spins.add_incoming(ir.Constant(I64, 0), started)
    completed = b.load_atomic(_slot_word(b, state, slot, 1), "acquire", 8, typ=I64)
    b.cbranch(b.icmp_unsigned("<", completed, count), help_, finished)
    b.position_at_end(help_)
    ran = b.call(scan, [state, b.add(slot, ir.Constant(I64, 1))])
    spins.add_incoming(ir.Constant(I64, 0), help_)
    b.cbranch(b.icmp_unsigned("!=", ran, ir.Constant(I64, 0)), check, idle)
    b.position_at_end(idle)
    with b.if_else(b.icmp_unsigned("<", spins, ir.Constant(I64, _OWNER_SPINS))) as (spin, give_up):
        with spin:
            _pause(b, module)
        with give_up:  # more threads than cores: let the ones finishing our tasks run
            b.call(syscall, [ir.Constant(I64, _SYS_SCHED_YIELD)])
    spins.add_incoming(b.add(spins, ir.Constant(I64, 1)), b.block)
    b.branch(check)
    b.position_at_end(finished)
    b.ret_void()


def _build_module(spins: int) -> str:
    module = ir.Module(name="hpvm_pool")
    syscall = ir.Function(module, ir.FunctionType(I64, [I64], var_arg=True), "syscall")
    work = _build_work(module)
    scan = _build_scan(module, work)
    _build_worker(module, scan, syscall, spins)
    _build_runner(module, work, scan, syscall)
    waker = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR]), "hpvm_pool_wake")
    b = ir.IRBuilder(waker.append_basic_block("entry"))
    _wake(b, waker.args[0], syscall)
    b.ret_void()
    return str(module)


@functools.cache
def _pool_code(spins: int) -> LoadedObject:
    """The pool's functions, compiled once per spin count (they take the pool's state as an
    argument)."""
    return LoadedObject(emit_object(optimize(_build_module(spins))))


def idle_spins(threads: int) -> int:
    """How long an idle worker of a pool of `threads` spins before it sleeps (HPVM_CPU_SPINS)."""
    text = settings.CPU_SPINS.text()
    if text is not None:
        # (an i64 constant of the pool's code: LLVM wraps a larger one, 2**64 to no spin at all)
        if not settings.is_decimal(text) or int(text) >= 1 << 63:
            raise LaunchError(f"HPVM_CPU_SPINS={text!r}: a number of pause iterations "
                              "(0 to 2**63 - 1) is expected")
        return int(text)
    return IDLE_SPINS if threads <= LARGE_POOL else LARGE_POOL_SPINS


@dataclass
class PoolJob:
    """A job published by start(): its slot, its task count, and the records the workers read."""

    slot: int
    count: int
    records: np.ndarray


class NativePool:
    """Runs task records on `threads` threads: the launching threads and threads - 1 native
    workers shared by every launch in flight."""

    def __init__(self, threads: int, spins: int | None = None):
        self.threads = threads
        self.spins = idle_spins(threads) if spins is None else spins
        self._code = _pool_code(self.spins)
        self._run = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)(
            self._code.address("hpvm_pool_run"))
        worker = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)(
            self._code.address("hpvm_pool_worker"))
        self._wake = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(self._code.address("hpvm_pool_wake"))
        self._state = (ctypes.c_int64 * (_SLOT_BASE + _SLOT_WORDS * SLOTS))()
        self._state_at = ctypes.addressof(self._state)
        self._tag = 0
        self._free = list(range(SLOTS))
        self._lock = threading.Lock()
        self._workers = [threading.Thread(target=worker, args=(self._state_at, i % SLOTS),
                                          daemon=True, name=f"hpvm-native-{i}")
                         for i in range(threads - 1)]
        started: list[threading.Thread] = []
        try:
            for t in self._workers:
                t.start()
                started.append(t)
        except RuntimeError as exc:  # the system's thread limit: stop the workers already started
            self._workers = started
            self.shutdown()
            raise LaunchError(f"the cpu target could not start {threads - 1} worker threads "
                              f"({exc}); set {settings.NUM_THREADS.name} to fewer") from None
        atexit.register(self.shutdown)

    def run(self, records: np.ndarray) -> bool:
        """Run every task of `records` (int64, one row of TASK_WORDS per task: the driver's
        address and its 7 arguments); False when every job slot is taken by other launches (the
        caller then runs its tasks itself)."""
        job = self.start(records)
        if job is None:
            return False
        self.wait(job)
        return True

    def start(self, records: np.ndarray) -> "PoolJob | None":
        """Publish the tasks as a job for the workers and return at once; wait() ends it. None
        when every job slot is taken (or there are too many tasks): nothing was published. The
        records are read in place: they must not change before the job ends."""
        count = len(records)
        if count > MAX_TASKS:
            return None
        assert records.dtype == np.int64 and records.flags.c_contiguous and \
            records.shape[1:] == (TASK_WORDS,)
        with self._lock:
            if not self._free:
                return None
            slot = self._free.pop()
            self._tag = (self._tag + 1) & 0xFFFFFF
            tag = self._tag
        base = _SLOT_BASE + _SLOT_WORDS * slot
        state = self._state
        state[base + 1] = 0
        state[base + 2] = records.ctypes.data
        # publish last: x86 keeps stores in order, so a worker that sees the new job word
        # also sees the task records and the cleared count written above
        state[base] = (tag << 40) | (count << _FIELD_BITS)
        self._wake(self._state_at)
        return PoolJob(slot, count, records)

    def done(self, job: "PoolJob") -> bool:
        """Whether every task of the job has ended (the workers count them after running them)."""
        return self._state[_SLOT_BASE + _SLOT_WORDS * job.slot + 1] >= job.count

    def wait(self, job: "PoolJob") -> None:
        """Help with the job (and others) until it is done, with the interpreter released; then
        free its slot."""
        try:
            self._run(self._state_at, job.slot)
        finally:
            with self._lock:
                self._free.append(job.slot)

    def shutdown(self) -> None:
        self._state[2] = 1
        self._wake(self._state_at)
        deadline = time.monotonic() + SHUTDOWN_WAIT
        for t in self._workers:
            t.join(max(0.0, deadline - time.monotonic()))


_pool: NativePool | None = None
_pool_lock = threading.Lock()


def native_pool() -> NativePool:
    global _pool
    if _pool is None:
        with _pool_lock:
            if _pool is None:
                _pool = NativePool(default_threads())
    return _pool


def _forget_pool_in_child() -> None:
    """After os.fork() the child has none of the pool's workers (only the forking thread is
    copied), and another thread may have held a lock of the pool: the child starts a pool of its
    own at its first launch, rather than running every task on the launching thread (or waiting
    for ever on that lock)."""
    global _pool, _pool_lock
    _pool = None
    _pool_lock = threading.Lock()


if hasattr(os, "register_at_fork"):  # (POSIX)
    os.register_at_fork(after_in_child=_forget_pool_in_child)
