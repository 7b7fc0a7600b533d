"""One firing of a communication node: its arguments, this rank's checks of them, and the
descriptor that ranks compare so that every rank raises the same error when they disagree.

A rank whose own arguments are wrong still takes part in the descriptor exchange (with a failure
status) so that its peers raise instead of waiting for it.
"""
from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

import numpy as np

from ..errors import DistributedError
from ..support.loc import Loc
from ..types import SCALAR_TYPES, ScalarType
from . import chooser
from .moe_plan import MOE_KINDS, size_error

KINDS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_reduce_rmsnorm") + MOE_KINDS
OPS = ("sum", "max", "min")
DTYPES = ("f16", "bf16", "f32", "f64", "i8", "i16", "i32", "i64", "u8")
_DTYPE_ORDER = sorted(SCALAR_TYPES)

# how a call runs (chooser.py); part of the descriptor, so that ranks whose choice differs (an
# HPVM_COMM_ONESHOT_BYTES of their own) raise instead of running different algorithms
ALGORITHMS = ("remote", "one_shot", "two_shot", "direct", "quantized", "stream", "push", "one_shot_push")
# the quantization a call applies (chooser.quantization), a word of the descriptor: "" for none
QUANTIZATIONS = ("", "fp8", "int8", "int4")

OK, BAD_ARGUMENT, NOT_ON_HEAP = 0, 1, 2
_BUFFERS = 7  # the word of the number of buffers
_ALGORITHM = 8  # the word of the algorithm
_QUANTIZATION = 9  # the word of the quantization
_FIXED = 10  # words before the per-buffer (bytes, heap offset) pairs


@dataclass
class Buffer:
    param: str  # the node's parameter name
    bound: str | None  # the graph argument bound to it, when there is one
    tensor: object  # flat torch tensor viewing the buffer (host memory, or the rank's GPU)
    address: int
    nbytes: int  # the buffer's real size
    size: int  # the size argument the graph passed, in bytes
    offset: int | None = None  # on this rank's heap, when it lies there
    elem: ScalarType | None = None  # its element type, when not the collective's

    @property
    def name(self) -> str:
        if self.bound and self.bound != self.param:
            return f"{self.bound!r} (input {self.param!r})"
        return repr(self.param)


@dataclass
class Call:
    kind: str
    dtype: ScalarType
    node: str
    loc: Loc | None
    buffers: list[Buffer]
    op: str = "sum"
    root: int = 0
    hidden: int = 0
    eps: float = 0.0
    quantize: str = ""  # the node's quantize= option ("" for none)
    experts: int = 0  # moe_dispatch / moe_combine
    capacity: int = 0

    def what(self) -> str:
        return f"{self.kind} node {self.node!r}"

    def elem(self, i: int) -> ScalarType:
        """Buffer i's element type."""
        return self.buffers[i].elem or self.dtype

    def count(self, i: int) -> int:
        """Elements in buffer i's size argument."""
        return self.buffers[i].size // self.elem(i).nbytes

    def quantization(self) -> str:
        """The quantization this call applies ("" for none; chooser.quantization)."""
        return chooser.quantization(self.kind, self.quantize, self.buffers[0].size)

    def fail(self, message: str, rule: str = "collective-arguments") -> DistributedError:
        return DistributedError(f"{self.what()}: {message}", self.loc, rule=rule)


# the buffers each collective writes (by position in its signature); one that overlaps another
# buffer of the call would be overwritten while a peer (or this rank) still reads it
WRITTEN = {"all_reduce": (0,), "broadcast": (0,), "all_gather": (1,), "reduce_scatter": (1,),
           "all_reduce_rmsnorm": (0, 1, 3, 4), "moe_dispatch": (2, 3, 4, 5), "moe_combine": (3,)}


def _overlap(call: Call) -> DistributedError | None:
    """Two buffers of the call whose bytes overlap where one of them is written: the heap
    algorithms would read what they already overwrote (silently wrong on some ranks) and the
    engines refuse aliased buffers, so every path raises instead."""
    written = WRITTEN.get(call.kind, ())
    for i, a in enumerate(call.buffers):
        for j in range(i + 1, len(call.buffers)):
            b = call.buffers[j]
            if (i in written or j in written) and a.size and b.size and \
                    a.address < b.address + b.size and b.address < a.address + a.size:
                return call.fail(f"buffers {a.name} and {b.name} overlap (bytes {a.address:#x}+{a.size} "
                                 f"and {b.address:#x}+{b.size}); a collective's outputs must not overlap "
                                 "its other buffers")
    return None


def check_arguments(call: Call, world_size: int) -> DistributedError | None:
    """This rank's own mistakes (independent of the other ranks), or None."""
    esize = call.dtype.nbytes
    for i, b in enumerate(call.buffers):
        if b.size < 0 or b.size > b.nbytes:
            return call.fail(f"buffer {b.name} has {b.nbytes} bytes, but its size argument says {b.size}")
        if b.size % call.elem(i).nbytes:
            return call.fail(f"the size of {b.name}, {b.size} bytes, is not a multiple of the "
                             f"{call.elem(i)} element size ({call.elem(i).nbytes})")
    overlap = _overlap(call)
    if overlap is not None:
        return overlap
    sizes = [b.size for b in call.buffers]
    if call.kind in MOE_KINDS:
        message = size_error(call.kind, sizes, esize, call.hidden, call.experts, call.capacity, world_size)
        return None if message is None else call.fail(message)
    if call.kind == "all_gather" and sizes[1] != world_size * sizes[0]:
        return call.fail(f"dst must be world_size ({world_size}) times src: src has {sizes[0]} bytes, "
                         f"dst {sizes[1]}")
    if call.kind == "reduce_scatter" and sizes[0] != world_size * sizes[1]:
        return call.fail(f"src must be world_size ({world_size}) times dst: src has {sizes[0]} bytes, "
                         f"dst {sizes[1]}")
    if call.kind == "broadcast" and not 0 <= call.root < world_size:
        return call.fail(f"root {call.root} is not a rank of this world of {world_size}")
    if call.kind == "all_reduce_rmsnorm":
        x, residual, weight = sizes[:3]
        if call.hidden <= 0:
            return call.fail(f"hidden is {call.hidden}; it must be positive")
        if residual != x:
            return call.fail(f"residual ({residual} bytes) must be as large as x ({x} bytes)")
        if weight != call.hidden * esize:
            return call.fail(f"weight has {weight} bytes; it must hold hidden = {call.hidden} elements")
        if (x // esize) % call.hidden:
            return call.fail(f"x holds {x // esize} elements, not a whole number of rows of "
                             f"hidden = {call.hidden}")
        if call.quantize:
            rows = x // esize // call.hidden
            if sizes[3] != rows * call.hidden:
                return call.fail(f"out has {sizes[3]} bytes; it must hold one fp8 byte per element of "
                                 f"x ({rows * call.hidden})")
            if sizes[4] != 4 * rows:
                return call.fail(f"scales has {sizes[4]} bytes; it must hold one f32 per row of x "
                                 f"({rows} rows: {4 * rows} bytes)")
    return None


def descriptor(call: Call, status: int, algorithm: str = "remote") -> np.ndarray:
    eps_bits, = struct.unpack("<q", struct.pack("<d", call.eps))
    words = [KINDS.index(call.kind), _DTYPE_ORDER.index(call.dtype.name), OPS.index(call.op), call.root,
             call.hidden, eps_bits, status, len(call.buffers), ALGORITHMS.index(algorithm),
             QUANTIZATIONS.index(call.quantization())]
    for b in call.buffers:
        words += [b.size, -1 if b.offset is None else b.offset]
    words += [call.experts, call.capacity]  # the options after the buffers
    return np.array(words, dtype=np.int64)


def fingerprint(words: np.ndarray) -> int:
    """A 64-bit digest of a descriptor (never 0, the value of a slot no rank wrote): ranks whose
    fingerprints are equal run the same call."""
    digest = int.from_bytes(hashlib.blake2b(words.astype("<i8").tobytes(), digest_size=8).digest(),
                            "little", signed=True)
    return digest or 1


def agree(call: Call, ranks: list[int], descriptors: list[np.ndarray], mine: DistributedError | None,
          compare_offsets: bool) -> None:
    """Raise on this rank exactly when the descriptors show a problem (every rank sees the same
    descriptors, so every rank raises)."""
    if mine is not None:
        raise mine
    first = descriptors[0]
    if all(np.array_equal(first, d) for d in descriptors[1:]) and first[6] == OK:
        return  # the common case, decided without building any message
    failed = [q for q, d in zip(ranks, descriptors) if d[6] != OK]
    if failed:
        reasons = {BAD_ARGUMENT: "invalid arguments", NOT_ON_HEAP: "a buffer not on the symmetric heap"}
        detail = ", ".join(f"rank {q}: {reasons.get(int(d[6]), 'an error')}"
                           for q, d in zip(ranks, descriptors) if d[6] != OK)
        raise call.fail(f"rank(s) {failed} could not take part ({detail}; see the error on those ranks)",
                        rule="rank-agreement")
    quantization = ("the quantization (the nodes' quantize= and HPVM_COMM_QUANTIZE_BYTES must be the "
                    "same on every rank)", _QUANTIZATION,
                    lambda v: (QUANTIZATIONS[v] or "none") if 0 <= v < len(QUANTIZATIONS) else str(v))
    fields = [("the collective", 0, lambda v: KINDS[v] if 0 <= v < len(KINDS) else str(v)),
              ("the element type", 1, lambda v: _DTYPE_ORDER[v] if 0 <= v < len(_DTYPE_ORDER) else str(v)),
              ("the reduction", 2, lambda v: OPS[v] if 0 <= v < len(OPS) else str(v)),
              ("the root", 3, str), ("hidden", 4, str),
              ("eps", 5, lambda v: repr(struct.unpack("<d", struct.pack("<q", v))[0]))]
    if len({int(d[_BUFFERS]) for d in descriptors}) > 1:
        # one collective with more buffers on some ranks (all_reduce_rmsnorm's quantize= adds two):
        # the words after the fixed ones mean different things on those ranks, and the engine
        # path's descriptors are shorter there
        fields.append(quantization)
    fields += [("experts", _FIXED + 2 * len(call.buffers), str),  # the options after the buffers
               ("capacity", _FIXED + 2 * len(call.buffers) + 1, str)]
    for i, b in enumerate(call.buffers):
        fields.append((f"the size of {b.name} in bytes", _FIXED + 2 * i, str))
        if compare_offsets:
            fields.append((f"the heap offset of {b.name} (allocate symmetric buffers in the same "
                           "order on every rank)", _FIXED + 2 * i + 1, str))
    fields.append(quantization)
    fields.append(("the algorithm (HPVM_COMM_ONESHOT_BYTES and HPVM_COMM_STREAM_BYTES must be the same on "
                   "every rank)", _ALGORITHM,
                   lambda v: ALGORITHMS[v] if 0 <= v < len(ALGORITHMS) else str(v)))
    for label, index, show in fields:
        values = [int(d[index]) for d in descriptors]
        if len(set(values)) > 1:
            detail = ", ".join(f"rank {q}: {show(v)}" for q, v in zip(ranks, values))
            raise call.fail(f"ranks disagree on {label} ({detail})", rule="rank-agreement")
