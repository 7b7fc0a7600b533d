"""Item.conflict (rt/stream/item_slots.py), which orders a stream's whole items that share memory,
against the plain all-pairs rule on generated items: buffers apart within an item, spans that
touch, nest, coincide or miss the other item's, written or not, tracked or not. Then waits_for
(rt/stream/items.py), which picks the events in flight a new item waits for, on generated
sequences of items started and completed: every earlier item in flight it conflicts with on the
device must be ordered before it through the events waited for, and a conflict through the host
must send it after every item in flight."""
from __future__ import annotations

import random
from collections import deque

import pytest

from hpvm_py.rt.stream.item_slots import Item
from hpvm_py.rt.stream.item_order import Flight, waits_for
from hpvm_py.rt.stream.items import SLOTS
from hpvm_py.rt.tracker import MemoryObject


def _item(rng: random.Random, tracked: float = 0.7) -> Item:
    """Up to six buffers apart from one another, on a small address range (so that two items'
    buffers often meet), each read or written, tracked (with probability `tracked`) or copied."""
    objects, at = [], rng.randrange(0, 40)
    for _ in range(rng.randrange(0, 7)):
        size = rng.choice([0, 1, 4, 8, 16, 24])
        objects.append(MemoryObject(None, size, "host", at))
        at += size + rng.choice([0, 0, 1, 8, 20])
    rng.shuffle(objects)
    n = len(objects)
    return Item([], objects, [True] * n, [rng.random() < 0.5 for _ in objects],
                [rng.random() < tracked for _ in objects])


def _all_pairs(a: Item, b: Item) -> str:
    found = ""
    for oa, wa, ta in zip(a.objects, a.writes, a.tracked):
        for ob, wb, tb in zip(b.objects, b.writes, b.tracked):
            meet = oa.address < ob.address + ob.nbytes and ob.address < oa.address + oa.nbytes
            if meet and (wa or wb):
                if not (ta and tb):
                    return "host"
                found = "device"
    return found


@pytest.mark.parametrize("seed", range(4))
def test_conflict_agrees_with_every_pair_checked(seed: int) -> None:
    rng = random.Random(seed)
    kinds = set()
    for _ in range(2500):
        a, b = _item(rng), _item(rng)
        expected = _all_pairs(a, b)
        assert a.conflict(b) == expected, (a.spans, b.spans)
        kinds.add(expected)
    assert kinds == {"", "device", "host"}  # every answer was reached


def _reaches(waits: dict[int, list[int]], start: int, goal: int) -> bool:
    """Whether the item `start` is ordered after `goal` through the events waited for."""
    seen, todo = set(), [start]
    while todo:
        k = todo.pop()
        if k == goal:
            return True
        if k not in seen:
            seen.add(k)
            todo.extend(waits.get(k, ()))
    return False


@pytest.mark.parametrize("seed", range(4))
def test_items_wait_for_every_conflicting_item_in_flight(seed: int) -> None:
    rng = random.Random(seed)
    flight: deque[Flight] = deque()
    waits: dict[int, list[int]] = {}
    shortcuts = drained = 0
    for index in range(4000):
        item = _item(rng, tracked=rng.choice([0.7, 0.97, 1.0]))
        hows = {f.index: _all_pairs(item, f.item) for f in flight}
        after, covers = waits_for(item, flight)
        if "host" in hows.values():
            assert after is None, "a conflict through the host must wait for the items in flight"
            flight.clear()  # (the runner completes them all first)
            after, covers = [], item.in_place
            drained += 1
        assert after is not None
        waits[index] = [f.index for f in after]
        for f in flight:
            if hows[f.index] == "device":
                assert _reaches(waits, index, f.index), (index, f.index, waits[index])
        if len(after) == 1 and sum(how == "device" for how in hows.values()) > 1:
            shortcuts += 1
        flight.append(Flight(item, None, None, None, index, covers))
        while len(flight) >= SLOTS or (flight and rng.random() < 0.3):
            flight.popleft()  # completed, oldest first
    assert shortcuts > 50 and drained > 50  # both ways were taken
