"""The order of a stream's whole items in flight (rt/stream/items.py): which earlier items' events
a new item's slot stream waits for, and when it must wait for them on the host instead."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from ...device.streams import ItemEvent
from .item_slots import Item, ItemSlot


@dataclass
class Flight:
    item: Item
    slot: ItemSlot
    copies: Any  # its StagedCopies
    event: ItemEvent
    index: int  # the item's place in push order
    # its event passing means every item in flight before it passed its own, and it and those
    # all use their buffers in place (waits_for())
    covers: bool = False


def waits_for(item: Item, flight: Sequence[Flight]) -> tuple[list[Flight] | None, bool]:
    """The items in flight (oldest first) whose events `item` must wait for on the GPU, or None
    when it must wait until they have completed on the host (Item.conflict's "host"); and whether
    the item covers those in flight (Flight.covers). An item in place whose newest predecessor
    covers the rest and shares written memory with it waits for that one alone: the others' events
    have passed before its own, and with every buffer in place none of them needs the host."""
    if not flight:
        return [], item.in_place
    if item.writes_in_place and any(f.item.checked for f in flight):
        # an item in flight may still fail at a checked kernel, and then no later item may run:
        # queued behind its event on the device, this one would write memory in place all the
        # same (its results there are never dropped). It starts once those have completed.
        return None, False
    newest = flight[-1]
    if newest.covers and item.in_place and item.conflict(newest.item) == "device":
        return [newest], True
    hows = [item.conflict(f.item) for f in flight]
    if "host" in hows:
        return None, False
    after = [f for f, how in zip(flight, hows) if how == "device"]
    covers = item.in_place and (
        (len(after) == len(flight) and all(f.item.in_place for f in flight))
        or (bool(after) and after[-1] is newest and newest.covers))
    return after, covers
