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
    """The handle of the current leaf node (for the other `get_*` intrinsics).

    Returns:
        The node handle.

    Raises:
        FrontendError: called outside a leaf body (from host code or a graph body).
    """


@_intrinsic("get_parent_node")
def get_parent_node(node: Any) -> Any:
    """The handle of the parent of `node` in the hierarchy (the internal node that created it).

    Args:
        node: a node handle, from `get_node()` or `get_parent_node(...)`.

    Returns:
        The parent's handle.

    Raises:
        FrontendError: called outside a leaf body (from host code or a graph body).
    """


@_intrinsic("num_dims")
def get_num_dims(node: Any) -> Any:
    """The number of replication dimensions of `node`, 0 to 3.

    Args:
        node: a node handle, from `get_node()` or `get_parent_node(...)`.

    Returns:
        The count, an i32.

    Raises:
        FrontendError: called outside a leaf body (from host code or a graph body).
    """


@_intrinsic("instance_id", 0)
def get_node_instance_id_x(node: Any) -> Any:
    """The index of the current dynamic instance of `node` in dimension x.

    Args:
        node: a node handle, from `get_node()` or `get_parent_node(...)`.

    Returns:
        The index, an i64 in [0, get_num_node_instances_x(node)).

    Raises:
        FrontendError: called outside a leaf body (from host code or a graph body).
    """


@_intrinsic("instance_id", 1)
def get_node_instance_id_y(node: Any) -> Any:
    """The index of the current dynamic instance of `node` in dimension y.

    Args:
        node: a node handle, from `get_node()` or `get_parent_node(...)`.

    Returns:
        The index, an i64 in [0, get_num_node_instances_y(node)).

    Raises:
        FrontendError: called outside a leaf body (from host code or a graph body).
    """


@_intrinsic("instance_id", 2)
def get_node_instance_id_z(node: Any) -> Any:
    """The index of the current dynamic instance of `node` in dimension z.

    Args:
        node: a node handle, from `get_node()` or `get_parent_node(...)`.

    Returns:
        The index, an i64 in [0, get_num_node_instances_z(node)).

    Raises:
        FrontendError: called outside a leaf body (from host code or a graph body).
    """


@_intrinsic("num_instances", 0)
def get_num_node_instances_x(node: Any) -> Any:
    """The number of dynamic instances of `node` in dimension x.

    Args:
        node: a node handle, from `get_node()` or `get_parent_node(...)`.

    Returns:
        The count, an i64 (1 in a dimension the node is not replicated in).

    Raises:
        FrontendError: called outside a leaf body (from host code or a graph body).
    """


@_intrinsic("num_instances", 1)
def get_num_node_instances_y(node: Any) -> Any:
    """The number of dynamic instances of `node` in dimension y.

    Args:
        node: a node handle, from `get_node()` or `get_parent_node(...)`.

    Returns:
        The count, an i64 (1 in a dimension the node is not replicated in).

    Raises:
        FrontendError: called outside a leaf body (from host code or a graph body).
    """


@_intrinsic("num_instances", 2)
def get_num_node_instances_z(node: Any) -> Any:
    """The number of dynamic instances of `node` in dimension z.

    Args:
        node: a node handle, from `get_node()` or `get_parent_node(...)`.

    Returns:
        The count, an i64 (1 in a dimension the node is not replicated in).

    Raises:
        FrontendError: called outside a leaf body (from host code or a graph body).
    """


@_intrinsic("instance_id_short")
def instance_id(dim: int) -> Any:
    """The current leaf instance's index in a dimension: `get_node_instance_id_{x,y,z}(get_node())`.

    Args:
        dim: 0 (x), 1 (y) or 2 (z), a constant.

    Returns:
        The index, an i64.

    Raises:
        FrontendError: called outside a leaf body (from host code or a graph body).
    """


@_intrinsic("num_instances_short")
def num_instances(dim: int) -> Any:
    """The current leaf's instance count in a dimension: `get_num_node_instances_{x,y,z}(get_node())`.

    Args:
        dim: 0 (x), 1 (y) or 2 (z), a constant.

    Returns:
        The count, an i64.

    Raises:
        FrontendError: called outside a leaf body (from host code or a graph body).
    """


@_intrinsic("malloc")
def malloc(nbytes: int, dtype: Any = None, shape: Any = None) -> Any:
    """Zeroed scratch memory shared by the instances of this leaf within one parent instance.

    Called at the top level of the leaf body, with a size that is the same for every instance
    (docs/language.md, `malloc-uniform`).

    Args:
        nbytes: the size in bytes.
        dtype: the element type (an hpvm scalar type); default u8.
        shape: 1 to 3 extents (`shape=(16, 16)`): the memory is then indexed `tile[ty, tx]`
            (row-major; docs/language.md, "Pointer offsets and shapes").

    Returns:
        A pointer to the memory, indexed like a buffer parameter.

    Raises:
        FrontendError: called outside a leaf body (from host code or a graph body).
    """


@_intrinsic("view")
def view(ptr: Any, shape: Any) -> Any:
    """A pointer seen with a row-major shape: `m = hpvm.view(data, (rows, cols))`, then `m[i, j]`
    is `data[i * cols + j]` and `m[i]` is row i.

    Args:
        ptr: a pointer parameter, malloc scratch, or an offset of one (`p + k`).
        shape: 1 to 3 extents, integers or expressions of the leaf's scalars.

    Returns:
        The view, indexed with as many indices as the shape has extents.

    Raises:
        FrontendError: called outside a leaf body.
    """


@_intrinsic("barrier")
def barrier() -> None:
    """Wait until every instance of the current leaf within one parent instance has reached it.

    Writes to scratch memory (`malloc`) and buffers before it are visible to all those instances
    after it.

    Raises:
        FrontendError: called outside a leaf body (from host code or a graph body).
    """


@_intrinsic("atomic", "add")
def atomic_add(ptr: Any, index: Any, value: Any) -> Any:
    """Atomically `ptr[index] += value`.

    Args:
        ptr: a buffer parameter (`Out` or `InOut`) or scratch memory from `malloc`.
        index: the element's index.
        value: the operand, converted to the element type.

    Returns:
        The element's value before the operation.

    Raises:
        FrontendError: called outside a leaf body (from host code or a graph body).
    """


@_intrinsic("atomic", "sub")
def atomic_sub(ptr: Any, index: Any, value: Any) -> Any:
    """Atomically `ptr[index] -= value`.

    Args:
        ptr: a buffer parameter (`Out` or `InOut`) or scratch memory from `malloc`.
        index: the element's index.
        value: the operand, converted to the element type.

    Returns:
        The element's value before the operation.

    Raises:
        FrontendError: called outside a leaf body (from host code or a graph body).
    """


@_intrinsic("atomic", "min")
def atomic_min(ptr: Any, index: Any, value: Any) -> Any:
    """Atomically `ptr[index] = min(ptr[index], value)`.

    Args:
        ptr: a buffer parameter (`Out` or `InOut`) or scratch memory from `malloc`.
        index: the element's index.
        value: the operand, converted to the element type.

    Returns:
        The element's value before the operation.

    Raises:
        FrontendError: called outside a leaf body (from host code or a graph body).
    """


@_intrinsic("atomic", "max")
def atomic_max(ptr: Any, index: Any, value: Any) -> Any:
    """Atomically `ptr[index] = max(ptr[index], value)`.

    Args:
        ptr: a buffer parameter (`Out` or `InOut`) or scratch memory from `malloc`.
        index: the element's index.
        value: the operand, converted to the element type.

    Returns:
        The element's value before the operation.

    Raises:
        FrontendError: called outside a leaf body (from host code or a graph body).
    """


@_intrinsic("atomic", "xchg")
def atomic_xchg(ptr: Any, index: Any, value: Any) -> Any:
    """Atomically `ptr[index] = value`.

    Args:
        ptr: a buffer parameter (`Out` or `InOut`) or scratch memory from `malloc`.
        index: the element's index.
        value: the operand, converted to the element type.

    Returns:
        The element's value before the operation.

    Raises:
        FrontendError: called outside a leaf body (from host code or a graph body).
    """


@_intrinsic("atomic", "and")
def atomic_and(ptr: Any, index: Any, value: Any) -> Any:
    """Atomically `ptr[index] &= value`.

    Args:
        ptr: a buffer parameter (`Out` or `InOut`) or scratch memory from `malloc`.
        index: the element's index.
        value: the operand, converted to the element type.

    Returns:
        The element's value before the operation.

    Raises:
        FrontendError: called outside a leaf body (from host code or a graph body).
    """


@_intrinsic("atomic", "or")
def atomic_or(ptr: Any, index: Any, value: Any) -> Any:
    """Atomically `ptr[index] |= value`.

    Args:
        ptr: a buffer parameter (`Out` or `InOut`) or scratch memory from `malloc`.
        index: the element's index.
        value: the operand, converted to the element type.

    Returns:
        The element's value before the operation.

    Raises:
        FrontendError: called outside a leaf body (from host code or a graph body).
    """


@_intrinsic("atomic", "xor")
def atomic_xor(ptr: Any, index: Any, value: Any) -> Any:
    """Atomically `ptr[index] ^= value`.

    Args:
        ptr: a buffer parameter (`Out` or `InOut`) or scratch memory from `malloc`.
        index: the element's index.
        value: the operand, converted to the element type.

    Returns:
        The element's value before the operation.

    Raises:
        FrontendError: called outside a leaf body (from host code or a graph body).
    """


@_intrinsic("remote", "load")
def remote_load(ptr: Any, index: Any, rank: Any) -> Any:
    """Read `ptr[index]` from rank `rank`'s copy of a buffer on the symmetric heap.

    Args:
        ptr: an `In` or `InOut` buffer parameter on the symmetric heap.
        index: the element's index.
        rank: the rank whose copy is accessed, 0 .. world_size - 1.

    Returns:
        The element's value.

    Raises:
        FrontendError: called outside a leaf body (from host code or a graph body).
    """


@_intrinsic("remote", "store")
def remote_store(ptr: Any, index: Any, value: Any, rank: Any) -> None:
    """Write `ptr[index] = value` in rank `rank`'s copy of a buffer on the symmetric heap.

    Args:
        ptr: an `Out` or `InOut` buffer parameter on the symmetric heap.
        index: the element's index.
        value: the value, converted to the element type.
        rank: the rank whose copy is accessed, 0 .. world_size - 1.

    Raises:
        FrontendError: called outside a leaf body (from host code or a graph body).
    """


@_intrinsic("remote", "atomic_add")
def remote_atomic_add(ptr: Any, index: Any, value: Any, rank: Any) -> Any:
    """Atomically `ptr[index] += value` in rank `rank`'s copy of a buffer on the symmetric heap.

    Args:
        ptr: an `InOut` buffer parameter on the symmetric heap.
        index: the element's index.
        value: the operand, converted to the element type.
        rank: the rank whose copy is accessed, 0 .. world_size - 1.

    Returns:
        The element's value before the addition.

    Raises:
        FrontendError: called outside a leaf body (from host code or a graph body).
    """
