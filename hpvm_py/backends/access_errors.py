"""The errors every target reports for an access outside its buffer (rule memory-in-bounds) and
for a remote access to a rank outside the world (remote-rank), so that the python target and the
compiled targets' checked variants say the same thing."""
from __future__ import annotations

from ..errors import ExecutionError
from ..ir import kernel as K
from ..types import PtrType

Access = K.Load | K.Store | K.Atomic

_WHAT = {K.Load: "load from", K.Store: "store to", K.Atomic: "atomic on"}


# The compiled targets' error slot records site + 1 for an index out of bounds and
# RANK_SITES + site + 1 for a remote access to a rank outside the world (then the rank and the
# world size in place of the index and the limit).
RANK_SITES = 1 << 40


def recorded(leaf: str, sites: list[Access], code: int, index: int, limit: int) -> ExecutionError:
    """The error of a failed access recorded in an error slot (code: the slot's first word)."""
    if code > RANK_SITES:
        return bad_rank(leaf, sites[code - 1 - RANK_SITES], index, limit)
    return out_of_bounds(leaf, sites[code - 1], index, limit)


def out_of_bounds(leaf: str, access: Access, index: int, limit: int) -> ExecutionError:
    """access read or wrote element `index` of a buffer of `limit` elements."""
    name = access.ptr.name
    if limit <= 0:
        elem = access.ptr.type.elem if isinstance(access.ptr.type, PtrType) else "element"
        detail = f"{name} holds no element (its size in bytes is less than one {elem})"
    else:
        detail = f"the valid indices are 0 to {limit - 1} ({limit} element{'s' if limit > 1 else ''})"
    return ExecutionError(f"{leaf}: out-of-bounds {_what(access)} {name}[{index}]: {detail}",
                          access.loc, rule="memory-in-bounds")


def bad_rank(leaf: str, access: Access, rank: int, world_size: int) -> ExecutionError:
    """A remote access named a rank outside [0, world_size)."""
    return ExecutionError(f"{leaf}: {_what(access)} {access.ptr.name}[...] on rank {rank}: the ranks are "
                          f"0 to {world_size - 1} (a world of {world_size})", access.loc,
                          rule="remote-rank")


def _what(access: Access) -> str:
    return ("remote " if access.rank is not None else "") + _WHAT[type(access)]
