"""Remote accesses on the python target: views of the peers' copies of a buffer, and an atomic
add that stays atomic while other processes update the same memory.

A leaf with remote accesses runs instance by instance (never vectorised), with one `Peers` per
launch as its hidden argument. A peer's copy of buffer `b` is a NumPy view at Iris's translated
address `bases[q] + (address(b) - bases[rank])`, as long as `b`'s view (the size the user passed).
"""
from __future__ import annotations

import ctypes
import threading
from typing import Any

import numpy as np

from ...ir import semantics as S
from .. import jit
from ..heapview import RemoteView
from . import ops


class RankError(IndexError):
    """A remote access to a rank outside the world (the kernel turns it into the located error)."""

    def __init__(self, site: int, rank: int, world_size: int):
        super().__init__(f"access {site}: rank {rank} outside [0, {world_size})")
        self.site = site
        self.rank = rank
        self.world_size = world_size


class Peers:
    """The peers' copies of this launch's buffers, made on first use."""

    def __init__(self, view: RemoteView):
        self.view = view
        self._copies: dict[tuple[int, int], ops.Buffer] = {}

    def buffer(self, site: int, buf: ops.Buffer, rank: Any) -> ops.Buffer:
        q = int(rank)
        view = self.view
        if not 0 <= q < view.world_size:
            raise RankError(site, q, view.world_size)
        key = (id(buf), q)
        found = self._copies.get(key)
        if found is None:
            array = buf.array
            address = array.__array_interface__["data"][0]
            peer = int(view.bases[q]) + (address - int(view.bases[view.rank]))
            if array.nbytes == 0:
                found = buf
            else:
                memory = (ctypes.c_char * array.nbytes).from_address(peer)
                found = ops.Buffer(buf.name, np.frombuffer(memory, dtype=array.dtype), buf.is_bf16)
            self._copies[key] = found
        return found


def rload(site: int, peers: Peers, buf: ops.Buffer, index: Any, rank: Any) -> Any:
    return ops.load(site, peers.buffer(site, buf, rank), index)


def rstore(site: int, peers: Peers, buf: ops.Buffer, index: Any, value: Any, rank: Any) -> None:
    ops.store(site, peers.buffer(site, buf, rank), index, value)


def ratomic_add(site: int, peers: Peers, buf: ops.Buffer, index: Any, value: Any, rank: Any) -> Any:
    """ptr[index] += value on rank's copy, atomically with respect to other processes (a
    compare-exchange loop on the element's bits); returns the old value."""
    target = peers.buffer(site, buf, rank)
    ops.load(site, target, index)  # the bounds check
    array = target.array
    i = int(index)
    address = array.__array_interface__["data"][0] + i * array.itemsize
    cas = _native().cas[array.itemsize]
    bits_type = np.dtype(f"u{array.itemsize}")
    seen = int(array[i:i + 1].view(bits_type)[0])
    while True:
        raw = np.array([seen], dtype=bits_type).view(array.dtype)[0]
        old = S.bf16_from_bits(raw) if target.is_bf16 else raw
        new = old + value
        stored = np.array([S.bf16_to_bits(new) if target.is_bf16 else new], dtype=array.dtype)
        witnessed = cas(address, seen, int(stored.view(bits_type)[0]))
        if witnessed == seen:
            return old
        seen = witnessed


# -- native compare-exchange (Python has no atomics on raw memory) ----------------------------

_IR = "\n".join(f"""
define i{bits} @hpvm_cas{bits}(ptr %p, i{bits} %expected, i{bits} %desired) {{
  %pair = cmpxchg ptr %p, i{bits} %expected, i{bits} %desired seq_cst seq_cst, align {bits // 8}
  %old = extractvalue {{ i{bits}, i1 }} %pair, 0
  ret i{bits} %old
}}""" for bits in (8, 16, 32, 64))

_lock = threading.Lock()
_compiled: "_Native | None" = None


class _Native:
    def __init__(self) -> None:
        self._object = jit.LoadedObject(jit.emit_object(jit.optimize(_IR)))  # owns the code
        types = {1: ctypes.c_uint8, 2: ctypes.c_uint16, 4: ctypes.c_uint32, 8: ctypes.c_uint64}
        self.cas = {size: ctypes.CFUNCTYPE(t, ctypes.c_void_p, t, t)(
            self._object.address(f"hpvm_cas{size * 8}")) for size, t in types.items()}


def _native() -> _Native:
    global _compiled
    with _lock:
        if _compiled is None:
            _compiled = _Native()
        return _compiled
