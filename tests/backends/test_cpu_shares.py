"""Stages of a stream share the cores: while k stages run kernels, a launch from a stage thread
uses a power-of-two share of total / k threads, on a smaller native pool or (a share of one) on
the stage's own thread. Results are the same whichever way a launch runs."""
import threading

import numpy as np

from cpu_harness import run
from hpvm_py import In, Out, Ptr, f32, i64
import hpvm_py as hpvm
from hpvm_py.backends.cpu import kernel as kernel_module
from hpvm_py.backends.cpu import threads as threads_module
from hpvm_py.backends.cpu.threads import NativePool
from hpvm_py.rt.pool import stage_running, thread_share


@hpvm.leaf
def scale(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64, k: f32):
    i = hpvm.instance_id(0)
    c[i] = a[i] * k + 1.0


def _shares_seen(stages: int, total: int) -> list[int]:
    """The share each of `stages` threads sees while all of them are inside stage_running()."""
    inside = threading.Barrier(stages)
    seen: list[int] = []

    def stage() -> None:
        with stage_running():
            inside.wait(timeout=30)
            seen.append(thread_share(total))
            inside.wait(timeout=30)

    workers = [threading.Thread(target=stage) for _ in range(stages)]
    for t in workers:
        t.start()
    for t in workers:
        t.join(30)
    return seen


def test_a_share_is_a_power_of_two_of_the_cores_per_running_stage():
    assert thread_share(16) == 16  # not a stage: every thread
    assert _shares_seen(1, 16) == [16]
    assert _shares_seen(2, 16) == [8, 8]
    assert _shares_seen(3, 16) == [4, 4, 4]  # 16 / 3 = 5, rounded down to a power of two
    assert _shares_seen(6, 16) == [2] * 6
    assert _shares_seen(3, 2) == [1, 1, 1]  # more stages than cores: each on its own thread
    assert thread_share(16) == 16  # every stage has left


def test_stages_launch_on_smaller_pools_with_the_same_results(monkeypatch):
    """Two stage threads, each running a kernel while the other does, on a host of 8 threads:
    each launch gets 4, on one of the pools of 4 threads (created once, then reused)."""
    big = NativePool(8)
    monkeypatch.setattr(threads_module, "native_pool", lambda: big)
    monkeypatch.setattr(kernel_module, "native_pool", lambda: big)  # split for 8, on any host
    monkeypatch.setattr(threads_module, "_share_pools", {})
    n = 200_000
    rng = np.random.default_rng()
    inputs = [rng.standard_normal(n).astype(np.float32) for _ in range(2)]
    outputs = [np.zeros(n, np.float32) for _ in inputs]
    both_running = threading.Barrier(2)
    errors: list[BaseException] = []

    def stage(k: int) -> None:
        try:
            with stage_running():
                both_running.wait(timeout=30)
                for _ in range(3):
                    run(scale, [(n,)], inputs[k], None, outputs[k], None, np.float32(k + 2))
                both_running.wait(timeout=30)  # neither leaves while the other still launches
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    workers = [threading.Thread(target=stage, args=(k,)) for k in range(2)]
    for t in workers:
        t.start()
    for t in workers:
        t.join(60)
    assert not errors
    for k, (a, c) in enumerate(zip(inputs, outputs)):
        np.testing.assert_array_equal(c, a * np.float32(k + 2) + np.float32(1))
    pools = threads_module._share_pools
    assert set(pools) == {4} and 1 <= len(pools[4]) <= 2
    assert all(p.threads == 4 for p in pools[4])
    for p in [big, *pools[4]]:
        p.shutdown()
