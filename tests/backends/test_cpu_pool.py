"""The native work-sharing pool: every task of every job runs exactly once, however many
launches are in flight at once (the stages of a stream launch concurrently); a launch that finds
no free job slot runs its tasks itself. Drivers here are Python callbacks with the driver's
signature, so the tests see which tasks ran."""
from __future__ import annotations

import ctypes
import threading
import time
from collections import Counter

import numpy as np
import pytest

from hpvm_py.backends.cpu.threads import (IDLE_SPINS, LARGE_POOL, LARGE_POOL_SPINS, SLOTS,
                                          NativePool, idle_spins)
from hpvm_py.errors import LaunchError

DRIVER = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                          ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p)


def _tasks(driver_address: int, job: int, count: int) -> np.ndarray:
    # (driver, args, extents, p_begin, p_end, o_begin, o_end, error): the test's job and task ids
    return np.array([[driver_address, 0, 0, job, i, 0, 0, 0] for i in range(count)], np.int64)


class TaskLog:
    """A driver that counts the (job, task) pairs it ran, and its address for task records."""

    def __init__(self) -> None:
        self.ran: Counter = Counter()
        lock = threading.Lock()

        @DRIVER
        def record(args, extents, job, task, o_begin, o_end, error):
            with lock:
                self.ran[(job, task)] += 1

        self.driver = record  # the pool calls it through its address: keep it alive
        self.address = ctypes.cast(record, ctypes.c_void_p).value


def test_every_task_runs_once_with_many_launches_in_flight():
    pool = NativePool(4)
    log = TaskLog()
    lock = threading.Lock()
    expected: Counter = Counter()
    inline: list[int] = []

    def launcher(thread: int) -> None:
        for k in range(60):
            job, count = thread * 1000 + k, 1 + (thread * 7 + k * 5) % 37
            tasks = _tasks(log.address, job, count)
            if not pool.run(tasks):  # no free slot: the caller runs them, as kernels do
                inline.append(job)
                for t in tasks:
                    log.driver(None, None, int(t[3]), int(t[4]), 0, 0, None)
            with lock:
                expected.update((job, i) for i in range(count))

    threads = [threading.Thread(target=launcher, args=(t,)) for t in range(SLOTS + 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)
    assert log.ran == expected  # each task exactly once, none lost, none invented
    pool.shutdown()


def test_a_launch_without_a_free_slot_runs_its_tasks_itself():
    pool = NativePool(2)
    started = threading.Semaphore(0)
    release = threading.Event()

    @DRIVER
    def block(args, extents, job, task, o_begin, o_end, error):
        started.release()
        release.wait(60)

    address = ctypes.cast(block, ctypes.c_void_p).value
    holders = [threading.Thread(target=pool.run, args=(_tasks(address, j, 1),)) for j in range(SLOTS)]
    for t in holders:
        t.start()
    for _ in range(SLOTS):  # every slot holds a job whose task has started
        assert started.acquire(timeout=60)
    try:
        assert pool.run(_tasks(address, 99, 1)) is False
    finally:
        release.set()
    for t in holders:
        t.join(60)
    assert pool.run(_tasks(address, 100, 3)) is True  # the slots are free again
    pool.shutdown()


def test_workers_that_sleep_after_every_job_lose_no_task():
    """A pool whose idle workers never spin (HPVM_CPU_SPINS=0): every job wakes sleeping
    workers, and each task still runs exactly once."""
    pool = NativePool(4, spins=0)
    log = TaskLog()
    expected: Counter = Counter()
    for job in range(300):
        count = 1 + job % 23
        assert pool.run(_tasks(log.address, job, count))
        expected.update((job, i) for i in range(count))
        if job % 50 == 0:
            time.sleep(0.01)  # long enough for every worker to be asleep
    assert log.ran == expected
    pool.shutdown()


def test_idle_spins_by_pool_size_and_setting(monkeypatch):
    monkeypatch.delenv("HPVM_CPU_SPINS", raising=False)
    assert idle_spins(16) == idle_spins(LARGE_POOL) == IDLE_SPINS
    assert idle_spins(64) == LARGE_POOL_SPINS < IDLE_SPINS
    monkeypatch.setenv("HPVM_CPU_SPINS", "0")
    assert idle_spins(64) == 0
    monkeypatch.setenv("HPVM_CPU_SPINS", "lots")
    with pytest.raises(LaunchError, match="HPVM_CPU_SPINS='lots'"):
        idle_spins(8)
