"""A persistent pool of worker threads that run partitions of a kernel launch in parallel.

Compiled code is called through ctypes, which releases the GIL, so the workers really run in
parallel. The calling thread takes part in the work, so a launch of n tasks wakes n - 1 workers.
"""
from __future__ import annotations

import os
import queue
import threading
from typing import Callable

from ..errors import HPVMTimeoutError


def default_threads() -> int:
    env = os.environ.get("HPVM_NUM_THREADS")
    if env and env.isdigit() and int(env) > 0:
        return int(env)
    return os.cpu_count() or 1


class _Batch:
    """One call of WorkerPool.run: tasks taken by index, the first error kept."""

    def __init__(self, tasks: list[Callable[[], None]]):
        self.tasks = tasks
        self.next = 0
        self.done = 0
        self.error: BaseException | None = None
        self.lock = threading.Lock()
        self.finished = threading.Event()

    def work(self) -> None:
        while True:
            with self.lock:
                if self.next >= len(self.tasks):
                    return
                index = self.next
                self.next += 1
            try:
                self.tasks[index]()
            except BaseException as exc:  # noqa: BLE001 - handed to the caller of run()
                with self.lock:
                    if self.error is None:
                        self.error = exc
            with self.lock:
                self.done += 1
                if self.done == len(self.tasks):
                    self.finished.set()


class WorkerPool:
    def __init__(self, threads: int | None = None):
        self.threads = threads or default_threads()
        self._queue: queue.SimpleQueue[_Batch | None] = queue.SimpleQueue()
        self._workers: list[threading.Thread] = []
        self._lock = threading.Lock()

    def _ensure_started(self) -> None:
        if self._workers:
            return
        with self._lock:
            if self._workers:
                return
            for i in range(self.threads - 1):
                t = threading.Thread(target=self._loop, name=f"hpvm-worker-{i}", daemon=True)
                t.start()
                self._workers.append(t)

    def _loop(self) -> None:
        while True:
            batch = self._queue.get()
            if batch is None:
                return
            batch.work()

    def run(self, tasks: list[Callable[[], None]], timeout: float | None = None) -> None:
        """Run every task, in parallel where possible; re-raise the first error."""
        if not tasks:
            return
        if len(tasks) == 1 or self.threads == 1:
            for task in tasks:
                task()
            return
        self._ensure_started()
        batch = _Batch(tasks)
        for _ in range(min(len(tasks) - 1, len(self._workers))):
            self._queue.put(batch)
        batch.work()
        if not batch.finished.wait(timeout):
            raise HPVMTimeoutError(f"a kernel launch did not finish within {timeout} s")
        if batch.error is not None:
            raise batch.error

    def shutdown(self) -> None:
        with self._lock:
            for _ in self._workers:
                self._queue.put(None)
            self._workers = []


_pool: WorkerPool | None = None
_pool_lock = threading.Lock()


def get_pool() -> WorkerPool:
    """The process-wide pool (HPVM_NUM_THREADS threads, default: every core)."""
    global _pool
    if _pool is None:
        with _pool_lock:
            if _pool is None:
                _pool = WorkerPool()
    return _pool
