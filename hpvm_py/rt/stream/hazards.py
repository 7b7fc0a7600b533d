"""Push order for the items of a stream that share a buffer: a stage starts an item once earlier
items' conflicting uses of its buffers on other stages are done, and push() keeps the valid bits of
a buffer an earlier item in flight still uses (docs/architecture.md, "Streaming")."""
from __future__ import annotations

import threading
from typing import Any, Callable

from ..tracker import MemoryObject

POLL = 0.05  # seconds between a waiting stage thread's checks of the stream's stop and failure


class Use:
    """One stage's use of one buffer for one item. It holds the user's buffer: the tracker
    forgets an implicit object once nothing but itself refers to that buffer (tracker.py,
    held_only_here), and a view the host pushed and dropped must outlive the item. (A plain
    class with slots: some thirty are made a push.)"""

    __slots__ = ("item", "stage", "obj", "writes", "user")

    def __init__(self, item: int, stage: int, obj: MemoryObject, writes: bool):
        self.item = item
        self.stage = stage
        self.obj = obj
        self.writes = writes
        self.user = obj.user


class Hazards:
    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._by_object: dict[int, list[Use]] = {}  # id(obj) -> its uses in flight, in push order
        self._by_item: dict[int, list[Use]] = {}  # item -> its uses not yet done, every stage's

    def admit(self, item: int, uses: list[Use]) -> list[MemoryObject]:
        """Register a pushed item's uses (items come in push order); returns the buffers that no
        earlier item in flight uses."""
        with self._changed:
            by_object = self._by_object
            idle: list[MemoryObject] = []
            for use in uses:
                same = by_object.get(id(use.obj))
                if same is None:  # (an object this item uses twice: idle once, at its first use)
                    by_object[id(use.obj)] = [use]
                    idle.append(use.obj)
                else:
                    same.append(use)
            self._by_item[item] = uses
            return idle

    def withdraw(self, item: int) -> None:
        """A push that gave its item to no stage: forget its uses."""
        self.done_stages(item)

    def ready(self, item: int, stage: int) -> bool:
        """Whether every conflicting use by an earlier item on another stage is done."""
        with self._changed:
            return self._ready(item, stage)

    def _ready(self, item: int, stage: int) -> bool:
        for use in self._by_item.get(item, ()):
            if use.stage != stage:
                continue
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
            uses = self._by_item.get(item)
            if uses is not None:
                kept = [use for use in uses if use.stage != stage]
                self._forget([use for use in uses if use.stage == stage])
                if kept:
                    self._by_item[item] = kept
                else:
                    del self._by_item[item]
            self._changed.notify_all()

    def done_stages(self, item: int) -> None:
        """Every stage finished the item (a whole item: one lock and one wake-up)."""
        with self._changed:
            self._forget(self._by_item.pop(item, ()))
            self._changed.notify_all()

    def _forget(self, uses: Any) -> None:
        by_object = self._by_object
        for use in uses:
            same = by_object[id(use.obj)]
            same.remove(use)  # (mostly the first: items end in push order)
            if not same:
                del by_object[id(use.obj)]

    def clear(self) -> None:
        """The stream ended: drop every use (and the buffers they hold)."""
        with self._changed:
            self._by_object.clear()
            self._by_item.clear()
