"""Push order for the items of a stream that share a buffer: a stage starts an item once earlier
items' conflicting uses of its buffers on other stages are done, and push() keeps the valid bits of
a buffer an earlier item in flight still uses (docs/architecture.md, "Streaming")."""
from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

from ..tracker import MemoryObject

POLL = 0.05  # seconds between a waiting stage thread's checks of the stream's stop and failure


@dataclass(eq=False, slots=True)  # (some thirty a push)
class Use:
    """One stage's use of one buffer for one item. It holds the user's buffer: the tracker
    forgets an implicit object once nothing but itself refers to that buffer (tracker.py,
    held_only_here), and a view the host pushed and dropped must outlive the item."""

    item: int
    stage: int
    obj: MemoryObject
    writes: bool
    user: Any = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.user = self.obj.user


class Hazards:
    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._by_object: dict[int, deque[Use]] = {}  # id(obj) -> its uses in flight, in push order
        self._by_stage: dict[tuple[int, int], list[Use]] = {}  # (item, stage) -> its uses

    def admit(self, uses: list[Use]) -> list[MemoryObject]:
        """Register a pushed item's uses (items come in push order); returns the buffers that no
        earlier item in flight uses."""
        with self._changed:
            by_object, by_stage = self._by_object, self._by_stage
            idle: list[MemoryObject] = []
            for use in uses:
                same = by_object.get(id(use.obj))
                if same is None:  # (an object this item uses twice: idle once, at its first use)
                    same = by_object[id(use.obj)] = deque()
                    idle.append(use.obj)
                same.append(use)
                at = by_stage.get((use.item, use.stage))
                if at is None:
                    by_stage[(use.item, use.stage)] = [use]
                else:
                    at.append(use)
            return idle

    def withdraw(self, item: int, stages: int) -> None:
        """A push that gave its item to no stage: forget its uses."""
        self.done_stages(item, stages)

    def ready(self, item: int, stage: int) -> bool:
        """Whether every conflicting use by an earlier item on another stage is done."""
        with self._changed:
            return self._ready(item, stage)

    def _ready(self, item: int, stage: int) -> bool:
        for use in self._by_stage.get((item, stage), ()):
            for other in self._by_object[id(use.obj)]:
                if other.item >= item:
                    break  # (in push order: the rest are later items)
                if other.stage != stage and (use.writes or other.writes):
                    return False
        return True

    def wait(self, item: int, stage: int, check: Callable[[], None]) -> None:
        """Block until ready(item, stage); `check` raises when the stream stops meanwhile."""
        with self._changed:
            while not self._ready(item, stage):
                check()
                self._changed.wait(POLL)

    def done(self, item: int, stage: int) -> None:
        """The stage finished the item: its buffers hold the item's results where the next
        user looks for them."""
        with self._changed:
            self._release(item, stage)
            self._changed.notify_all()

    def done_stages(self, item: int, stages: int) -> None:
        """Stages 0 to stages - 1 finished the item (a whole item: one lock and one wake-up)."""
        with self._changed:
            for stage in range(stages):
                self._release(item, stage)
            self._changed.notify_all()

    def _release(self, item: int, stage: int) -> None:
        for use in self._by_stage.pop((item, stage), ()):
            uses = self._by_object[id(use.obj)]
            uses.remove(use)
            if not uses:
                del self._by_object[id(use.obj)]

    def clear(self) -> None:
        """The stream ended: drop every use (and the buffers they hold)."""
        with self._changed:
            self._by_object.clear()
            self._by_stage.clear()
