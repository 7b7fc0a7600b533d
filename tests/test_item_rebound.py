"""rebound() (rt/stream/item_slots.py), which makes a stream's last whole item again for a push that
differs only in streamed buffers of the same sizes, looks only at the positions whose values are
other objects than the last push's (bind_arguments keeps the value of an argument passed again).
Against the rule it replaces, written out over every position, on generated pushes: buffers from a
pool (tracked, on the device, copied through a slot, released, of another size, overlapping
another), bound at one position or at two, scalars the same or not, positions of every kind."""
from __future__ import annotations

import random

import numpy as np
import pytest

from hpvm_py.rt.args import same_scalar
from hpvm_py.rt.buffers import HOST
from hpvm_py.rt.executor import BoundBuffer
from hpvm_py.rt.stream.item_slots import _SCALAR, Item, PushLayout, _overlaps_any, on_device, rebound
from hpvm_py.rt.tracker import MemoryObject

DEVICE = "fake:0"


def _every_position(item: Item, last: list, env: list, first: list, layout: PushLayout
                    ) -> Item | None:
    """The rule over every position of the push, as rebound() had it before it looked only at
    the changed ones."""
    for i in (i for i, part in enumerate(layout.parts) if part == _SCALAR):
        if env[i] is not last[i] and not same_scalar(env[i], last[i]):
            return None
    swap: dict[int, MemoryObject] = {}
    moved: set[int] = set()
    for i, streamed in layout.buffers:
        old, new = last[i].obj, env[i].obj
        if swap.setdefault(id(old), new) is not new:
            return None
        if old is new:
            continue
        if not streamed or new.released or new.nbytes != old.nbytes or \
                on_device(new, DEVICE) != on_device(old, DEVICE) or \
                not (on_device(new, DEVICE) or new.home == HOST):
            return None
        moved.add(id(old))
    objects = [swap.get(id(obj), obj) for obj in item.objects] if moved else item.objects
    if any(obj.released for obj in objects):
        return None
    if not moved:
        return item.again()
    if any(id(first[i].obj) in moved for i in layout.fixed) or \
            len({id(o) for o in objects}) < len(objects) or \
            _overlaps_any([swap[j] for j in moved], objects):
        return None
    return item.again(objects)


def _pool(rng: random.Random) -> list[MemoryObject]:
    """Buffers of 8 or 16 bytes: tracked by the user, implicit on the device, implicit on the host
    (copied through a slot); most apart, some overlapping another (views of one base)."""
    pool, at = [], 0
    for _ in range(9):
        nbytes = rng.choice([8, 8, 16])
        kind = rng.choice(["tracked", "device", "host"])
        home = DEVICE if kind == "device" else HOST
        address = at if rng.random() < 0.8 or not pool else pool[-1].address + 4
        pool.append(MemoryObject(object(), nbytes, home, address, implicit=kind != "tracked"))
        at += 64
    return pool


def _item_for(env: list, layout: PushLayout, rng: random.Random) -> Item:
    """An item over the distinct objects env's pointers bind (as _whole makes one)."""
    objects: list[MemoryObject] = []
    for i, _ in layout.buffers:
        obj = env[i].obj
        if not any(o is obj for o in objects):
            objects.append(obj)
    n = len(objects)
    return Item([], objects, [True] * n, [rng.random() < 0.5 for _ in objects],
                [on_device(o, DEVICE) for o in objects])


def _push(last: list | None, layout: PushLayout, pool: list[MemoryObject], rng: random.Random
          ) -> list:
    """The next push: each position kept (the very value of the last push) or changed."""
    env = []
    for i, part in enumerate(layout.parts):
        if last is not None and rng.random() < 0.6:
            env.append(last[i])
        elif i % 2:  # scalars (at odd positions; some of them ignored)
            env.append(np.int64(rng.choice([3, 3, 4])) if last is None or rng.random() < 0.5
                       else np.int64(int(last[i])))
        else:
            env.append(BoundBuffer(rng.choice(pool[:4]) if rng.random() < 0.7 else rng.choice(pool)))
    return env


@pytest.mark.parametrize("seed", range(6))
def test_rebound_by_changed_positions_agrees_with_the_rule_over_every_position(seed: int) -> None:
    rng = random.Random(seed)
    outcomes = {"same item": 0, "other buffers": 0, "afresh": 0}
    for _ in range(300):
        n = rng.randrange(2, 7)
        pointers = [i % 2 == 0 for i in range(n)]
        modes = [rng.choice(["all", "all", "all", "none", "mixed"]) for _ in range(n)]
        layout = PushLayout.of(pointers, modes)
        if not layout.buffers:
            continue
        pool = _pool(rng)
        env = _push(None, layout, pool, rng)
        first, item = env, _item_for(env, layout, rng)
        for _ in range(12):
            if rng.random() < 0.1:
                rng.choice(pool).released = True
            nxt = _push(env, layout, pool, rng)
            got = rebound(item, env, nxt, first, layout, DEVICE)
            want = _every_position(item, env, nxt, first, layout)
            assert (got is None) == (want is None), (env, nxt)
            if got is None:
                outcomes["afresh"] += 1
                item = _item_for(nxt, layout, rng)
            else:
                assert [id(o) for o in got.objects] == [id(o) for o in want.objects]
                assert got.stages is item.stages and got.writes is item.writes
                outcomes["same item" if got.objects is item.objects else "other buffers"] += 1
                item = got
            env = nxt
    assert all(outcomes.values()), outcomes  # every answer reached
