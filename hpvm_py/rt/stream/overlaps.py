"""A push's check that no stage gets two device copies of one memory: an item's buffers that
share memory (`a` and its view `a[2:6]`), one of them written by a stage with nodes away from
their home, are refused, as a launch refuses them (rt/args.py, check_overlaps)."""
from __future__ import annotations

from typing import Any

from ...errors import LaunchError
from ...frontend.callsite import caller_loc
from ..launch_devices import launch_devices
from ..placement import device_of
from ..tracker import overlap
from .hazards import Use
from .item_slots import any_overlap


def refuse_shared_memory(uses: list[Use], nodes: list[Any]) -> None:
    """Refuse two buffers over common memory (`a` and `a[2:6]`) that one stage uses, writing
    one, with nodes away from their home: there each gets a device copy of its own, which the
    other's writes do not reach until the stage is done, as in a launch (rt/args.py,
    check_overlaps). Between stages the tracker keeps them in step."""
    if len(uses) < 2 or not any_overlap([use.obj for use in uses]):
        return
    for k, a in enumerate(uses):
        for b in uses[k + 1:]:
            if a.obj.home != b.obj.home or not overlap(a.obj, b.obj):
                continue
            for stage in a.stages.keys() & b.stages.keys():
                if not (a.stages[stage] or b.stages[stage]):
                    continue
                node = nodes[stage]
                away = (launch_devices(node.child) if node.child is not None else
                        {device_of(node.target, node.placement.index)}) - {a.obj.home}
                if away:
                    raise LaunchError(
                        f"push(): two buffers of this item share memory (one is a view of "
                        f"the other, or both of one array), and stage {node.name} writes one "
                        f"of them with nodes on {', '.join(sorted(away))}, where each gets a "
                        "copy of its own: the other's would not see the writes. Pass the "
                        "array once (and index it with an offset), copies that do not share "
                        "memory, or use them in different stages", caller_loc(),
                        rule="buffer-overlap")
