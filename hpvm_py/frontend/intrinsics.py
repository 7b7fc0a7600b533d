"""The leaf intrinsics as Python objects.

Inside a leaf the front end recognises these functions by identity and lowers them to kernel IR;
they never run there. Called anywhere else (host code, a graph body) they raise a FrontendError
that names the caller's line, because the reference allows them in leaf nodes only.
"""
from __future__ import annotations

from typing import Any, Callable

from ..errors import FrontendError
from .callsite import caller_loc

# intrinsic function -> (kind, detail): kind selects the lowering rule in frontend.lower.
INTRINSICS: dict[Callable[..., Any], tuple[str, Any]] = {}


def _intrinsic(kind: str, detail: Any = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        name = fn.__name__

        def outside_leaf(*args: Any, **kwargs: Any) -> Any:
            raise FrontendError(
                f"{name}() is a leaf intrinsic: it can only be used inside an @hpvm.leaf function",
                caller_loc(), rule="intrinsics-in-leaves")

        outside_leaf.__name__ = name
        outside_leaf.__qualname__ = name
        outside_leaf.__doc__ = fn.__doc__
        INTRINSICS[outside_leaf] = (kind, detail)
        return outside_leaf

    return wrap


@_intrinsic("get_node")
def get_node() -> Any:
    """Handle of the current leaf node."""


@_intrinsic("get_parent_node")
def get_parent_node(node: Any) -> Any:
    """Handle of the parent of `node` in the hierarchy."""


@_intrinsic("num_dims")
def get_num_dims(node: Any) -> Any:
    """Number of replication dimensions of `node` (i32)."""


@_intrinsic("instance_id", 0)
def get_node_instance_id_x(node: Any) -> Any:
    """Index of the current dynamic instance of `node` in dimension x (i64)."""


@_intrinsic("instance_id", 1)
def get_node_instance_id_y(node: Any) -> Any:
    """Index of the current dynamic instance of `node` in dimension y (i64)."""


@_intrinsic("instance_id", 2)
def get_node_instance_id_z(node: Any) -> Any:
    """Index of the current dynamic instance of `node` in dimension z (i64)."""


@_intrinsic("num_instances", 0)
def get_num_node_instances_x(node: Any) -> Any:
    """Number of dynamic instances of `node` in dimension x (i64)."""


@_intrinsic("num_instances", 1)
def get_num_node_instances_y(node: Any) -> Any:
    """Number of dynamic instances of `node` in dimension y (i64)."""


@_intrinsic("num_instances", 2)
def get_num_node_instances_z(node: Any) -> Any:
    """Number of dynamic instances of `node` in dimension z (i64)."""


@_intrinsic("instance_id_short")
def instance_id(dim: int) -> Any:
    """Short form of get_node_instance_id_{x,y,z}(get_node()): dim is 0, 1 or 2."""


@_intrinsic("num_instances_short")
def num_instances(dim: int) -> Any:
    """Short form of get_num_node_instances_{x,y,z}(get_node()): dim is 0, 1 or 2."""


@_intrinsic("malloc")
def malloc(nbytes: int, dtype: Any = None, shape: Any = None) -> Any:
    """Scratch memory shared by the instances of this leaf within one parent instance; with a
    shape (`shape=(16, 16)`), indexed `tile[ty, tx]` (row-major)."""


@_intrinsic("view")
def view(ptr: Any, shape: Any) -> Any:
    """ptr (a pointer parameter, scratch, or `p + k`) seen with a row-major shape of 1 to 3
    extents: `m = hpvm.view(data, (rows, cols))`, then `m[i, j]` is `data[i * cols + j]`."""


@_intrinsic("barrier")
def barrier() -> None:
    """All instances of the current leaf (within one parent instance) reach it before any passes."""


@_intrinsic("atomic", "add")
def atomic_add(ptr: Any, index: Any, value: Any) -> Any:
    """Atomically ptr[index] += value; returns the old value."""


@_intrinsic("atomic", "sub")
def atomic_sub(ptr: Any, index: Any, value: Any) -> Any:
    """Atomically ptr[index] -= value; returns the old value."""


@_intrinsic("atomic", "min")
def atomic_min(ptr: Any, index: Any, value: Any) -> Any:
    """Atomically ptr[index] = min(ptr[index], value); returns the old value."""


@_intrinsic("atomic", "max")
def atomic_max(ptr: Any, index: Any, value: Any) -> Any:
    """Atomically ptr[index] = max(ptr[index], value); returns the old value."""


@_intrinsic("atomic", "xchg")
def atomic_xchg(ptr: Any, index: Any, value: Any) -> Any:
    """Atomically ptr[index] = value; returns the old value."""


@_intrinsic("atomic", "and")
def atomic_and(ptr: Any, index: Any, value: Any) -> Any:
    """Atomically ptr[index] &= value; returns the old value."""


@_intrinsic("atomic", "or")
def atomic_or(ptr: Any, index: Any, value: Any) -> Any:
    """Atomically ptr[index] |= value; returns the old value."""


@_intrinsic("atomic", "xor")
def atomic_xor(ptr: Any, index: Any, value: Any) -> Any:
    """Atomically ptr[index] ^= value; returns the old value."""


@_intrinsic("remote", "load")
def remote_load(ptr: Any, index: Any, rank: Any) -> Any:
    """ptr[index] of rank `rank`'s copy of a symmetric-heap buffer (ptr: a pointer parameter)."""


@_intrinsic("remote", "store")
def remote_store(ptr: Any, index: Any, value: Any, rank: Any) -> None:
    """ptr[index] = value in rank `rank`'s copy of a symmetric-heap buffer."""


@_intrinsic("remote", "atomic_add")
def remote_atomic_add(ptr: Any, index: Any, value: Any, rank: Any) -> Any:
    """Atomically ptr[index] += value in rank `rank`'s copy of a symmetric-heap buffer; returns
    the old value."""
