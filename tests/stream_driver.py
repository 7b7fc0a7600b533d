"""What the seeded stream tests share (test_stream_adversarial.py, test_streaming_adversarial.py):
events that lag as a GPU's do, and the random walk of pushes, pops and host refills that drives a
stream, by one thread or by a producer thread and this one. Each test's run class says what an
item is (make, push, pop) and what the host may refill between items (refill)."""
from __future__ import annotations

import queue
import threading
import time
from typing import Any

import numpy as np

from hpvm_py.device import streams as S


def slow_events(monkeypatch: Any, lags: list[int]) -> None:
    """As on a GPU, where items pile up in flight: each item's event says "not yet" to its first
    few questions (`lags`, one per event; on the fake device everything has run when queued)."""
    real_done = S.ItemEvent.done
    lags = list(lags)

    def done(self: S.ItemEvent) -> bool:
        if not hasattr(self, "_lag"):
            self._lag = lags.pop() if lags else 0
        if self._lag > 0:
            self._lag -= 1
            return False
        return real_done(self)

    monkeypatch.setattr(S.ItemEvent, "done", done)


class StreamDriver:
    """The random walk over a stream. A subclass has `rng`, `count` (items to push), `items`
    (pushed so far), `popped`, `pop_failed`, `failed` and WAIT (seconds a call may block before
    it is a hang), and make(number), push(handle, item, timeout) ("ok", "timeout" or "refused"),
    pop(handle, timeout) (whether an item came) and refill() (the host rewrites a buffer no item
    in flight uses)."""

    WAIT: float = 60.0
    rng: np.random.Generator
    count: int
    items: list
    popped: int
    pop_failed: bool
    failed: Any

    def make(self, number: int) -> Any:
        raise NotImplementedError

    def push(self, handle: Any, item: Any, timeout: float | None) -> str:
        raise NotImplementedError

    def pop(self, handle: Any, timeout: float) -> bool:
        raise NotImplementedError

    def refill(self) -> None:
        raise NotImplementedError

    def stopped_early(self, handle: Any, pushed: int) -> bool:
        """Whether the walk ends here, after `pushed` items (a subclass may clean up the runtime)."""
        return False

    def drive(self, handle: Any) -> None:
        r = self.rng
        number, refused = 0, False
        while not self.pop_failed:
            if self.stopped_early(handle, number):
                return
            can_push = number < self.count and not refused
            if not can_push and self.popped >= len(self.items):
                return
            roll = r.random()
            if can_push and (roll < 0.5 or self.popped >= len(self.items)):
                timeout = [None, 30, 1e-4, 0.0][int(r.integers(0, 4))]
                result = self.push(handle, self.make(number), timeout)
                number += result == "ok"
                refused = result == "refused"
            elif roll < 0.85 and self.popped < len(self.items):
                self.pop(handle, [self.WAIT, self.WAIT, 0.0, 1e-3][int(r.integers(0, 4))])
            elif roll < 0.92 and self.failed is None:
                self.refill()
            else:
                time.sleep(float(r.choice([0.0, 0.0005, 0.003])))

    def drive_threaded(self, handle: Any) -> None:
        """A producer thread pushes every item while this thread pops them."""
        r = self.rng
        items = [self.make(i) for i in range(self.count)]
        timeouts = [[None, 30, 1e-4][int(r.integers(0, 3))] for _ in items]
        pushed: queue.Queue = queue.Queue()
        errors: list[BaseException] = []

        def producer() -> None:
            try:
                for it, timeout in zip(items, timeouts):
                    while (result := self.push(handle, it, timeout)) == "timeout":
                        pass
                    if result == "refused":
                        break
                    pushed.put(True)
            except BaseException as exc:  # noqa: BLE001 - re-raised below
                errors.append(exc)
            pushed.put(False)

        thread = threading.Thread(target=producer, daemon=True)
        thread.start()
        while pushed.get(timeout=self.WAIT):
            while not self.pop_failed and not self.pop(handle, float(r.choice([self.WAIT, 1e-3]))):
                pass
        thread.join(self.WAIT)
        assert not thread.is_alive(), "the producer hung"
        if errors:
            raise errors[0]
