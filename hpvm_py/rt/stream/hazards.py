"""Push order for the items of a stream that share a buffer: a stage starts an item once earlier
items' conflicting uses of its buffers on other stages are done, and push() keeps the valid bits of
a buffer an earlier item in flight still uses; once no item uses a buffer, its device copies stop
being valid for the user's (docs/architecture.md, "Streaming")."""
from __future__ import annotations

import threading
from typing import Callable

from ..tracker import MemoryObject

POLL = 0.05  # seconds between a waiting stage thread's checks of the stream's stop and failure


class Use:
    """One item's use of one buffer: per stage that uses it, whether that stage writes it. It
    holds the user's buffer: the tracker forgets an implicit object once nothing but itself
    refers to that buffer (tracker.py, held_only_here), and a view the host pushed and dropped
    must outlive the item. (A plain class with slots: a dozen are made a push.) `stages` is never
    changed in place: a push's uses share the stream's dicts of its binds."""

    __slots__ = ("item", "stages", "obj", "user", "key")

    def __init__(self, item: int, obj: MemoryObject, stages: dict[int, bool], key: int):
        self.item = item
        self.obj = obj
        self.stages = stages  # stage -> it writes the buffer; a stage leaves once done with it
        self.user = obj.user
        self.key = key  # id(user): the buffer, whichever object tracks it now


class Hazards:
    def __init__(self, host_data: Callable[[list[MemoryObject]], None]) -> None:
        # the tracker's host_data(): a buffer no item in flight uses is the user's again, whose
        # host writes a later launch must see (a stage keeps the device copies of an item's untracked
        # buffers valid for its next stages: rt/stream/stage_launch.py); called under the lock, so a
        # push that admits the buffer again comes wholly before or after it
        self._host_data = host_data
        self._changed = threading.Condition()
        self._by_object: dict[int, list[Use]] = {}  # id(user) -> its uses in flight, in push order
        self._by_item: dict[int, list[Use]] = {}  # item -> its uses not yet done

    def admit(self, item: int, uses: list[Use]) -> list[MemoryObject]:
        """Register a pushed item's uses, one per buffer (items come in push order); returns the
        buffers that no earlier item in flight uses."""
        with self._changed:
            by_object = self._by_object
            idle: list[MemoryObject] = []
            for use in uses:
                same = by_object.get(use.key)
                if same is None:
                    by_object[use.key] = [use]
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
            writes = use.stages.get(stage)
            if writes is None:
                continue
            for other in self._by_object[use.key]:
                if other.item >= item:
                    break  # (in push order: the rest are later items)
                for other_stage, other_writes in other.stages.items():
                    if other_stage != stage and (writes or other_writes):
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
                left, idle = [], []
                for use in uses:
                    if stage in use.stages:  # (a new dict: the old one may be another use's)
                        use.stages = {s: w for s, w in use.stages.items() if s != stage}
                    if use.stages:
                        left.append(use)
                    elif self._forget(use):
                        idle.append(use.obj)
                if left:
                    self._by_item[item] = left
                else:
                    del self._by_item[item]
                if idle:
                    self._host_data(idle)
            self._changed.notify_all()

    def done_stages(self, item: int) -> None:
        """Every stage finished the item (a whole item: one lock and one wake-up)."""
        with self._changed:
            idle = [use.obj for use in self._by_item.pop(item, ()) if self._forget(use)]
            if idle:
                self._host_data(idle)
            self._changed.notify_all()

    def _forget(self, use: Use) -> bool:
        """Drop one use; whether it was the last use of its buffer in flight."""
        same = self._by_object[use.key]
        if same[0] is use:  # (mostly: items end in push order)
            del same[0]
        else:
            same.remove(use)
        if same:
            return False
        del self._by_object[use.key]
        return True

    def clear(self) -> None:
        """The stream ended (its stages too): drop every use (and the buffers they hold); their
        buffers are the user's again (items left by a failure or a stop included)."""
        with self._changed:
            idle = [uses[0].obj for uses in self._by_object.values()]
            self._by_object.clear()
            self._by_item.clear()
            if idle:
                self._host_data(idle)
