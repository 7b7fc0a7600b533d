"""Item.conflict (rt/stream/item_slots.py), which orders a stream's whole items that share memory,
against the plain all-pairs rule on generated items: buffers apart within an item, spans that
touch, nest, coincide or miss the other item's, written or not, tracked or not."""
from __future__ import annotations

import random

import pytest

from hpvm_py.rt.stream.item_slots import Item
from hpvm_py.rt.tracker import MemoryObject


def _item(rng: random.Random) -> Item:
    """Up to six buffers apart from one another, on a small address range (so that two items'
    buffers often meet), each read or written, tracked or copied."""
    objects, at = [], rng.randrange(0, 40)
    for _ in range(rng.randrange(0, 7)):
        size = rng.choice([0, 1, 4, 8, 16, 24])
        objects.append(MemoryObject(None, size, "host", at))
        at += size + rng.choice([0, 0, 1, 8, 20])
    rng.shuffle(objects)
    n = len(objects)
    return Item([], objects, [True] * n, [rng.random() < 0.5 for _ in objects],
                [rng.random() < 0.7 for _ in objects])


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
