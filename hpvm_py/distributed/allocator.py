"""What every symmetric heap shares, host or device: the bump allocator that every rank runs
identically, the address checks and Iris's pointer translation.

A heap is one block of `size` bytes per rank: a control region of `header` bytes, then user
allocations aligned to ALIGN bytes. A buffer at offset `o` of rank r's heap has a twin at offset
`o` of every other rank's heap as long as all ranks allocate the same sequence (the collectives
check that), so rank r reaches rank q's twin of its pointer `p` at `bases[q] + (p - bases[r])`.

The end of the heap may hold a workspace that collectives reserve for themselves (the quantized
all-reduce's payloads): it grows downwards from `size`, only as far as user allocations leave
room, and is never given back; a collective of n bytes of workspace uses `[size - n, size)`, the
same offsets on every rank (every heap has the same size).
"""
from __future__ import annotations

from ..errors import DistributedError
from ..support.loc import Loc

ALIGN = 256


class SymmetricAllocator:
    """Allocation and addresses on one rank's view of a symmetric heap. Subclasses set `rank`,
    `size`, `header`, `bases` (one address per rank, as this process reaches it; 0 where
    unreachable) and `my_base`."""

    rank: int
    size: int
    header: int
    bases: list[int]
    my_base: int

    def _start_allocations(self) -> None:
        self._top = self.header
        self._tail = 0  # bytes of workspace reserved at the end of the heap

    @property
    def limit(self) -> int:
        """Where user allocations must end: the start of the workspace."""
        return self.size - self._tail

    @property
    def world_size(self) -> int:
        return len(self.bases)

    @property
    def free_bytes(self) -> int:
        return self.limit - self._top

    def allocate(self, nbytes: int, loc: Loc | None = None) -> int:
        """The offset of a new block of nbytes (aligned); HPVMError at `loc` when the heap is full."""
        start = (self._top + ALIGN - 1) // ALIGN * ALIGN
        end = start + max(nbytes, 1)
        if end > self.limit:
            raise DistributedError(f"symmetric heap exhausted: requested {nbytes} bytes, "
                                   f"{max(0, self.limit - start)} bytes free of {self.limit - self.header} "
                                   "(set HPVM_HEAP_BYTES larger)", loc, rule="heap-capacity")
        self._top = end
        return start

    def workspace_fits(self, nbytes: int) -> bool:
        """Whether reserve_workspace(nbytes) would succeed (nothing is reserved)."""
        need = -(-nbytes // ALIGN) * ALIGN
        return need <= self._tail or self.size - need >= self._top

    def reserve_workspace(self, nbytes: int) -> int | None:
        """The heap offset of a collective's workspace of nbytes (`size` - nbytes rounded up to
        ALIGN), reserving it at the end of the heap if need be; None when user allocations stand
        where it would start."""
        need = -(-nbytes // ALIGN) * ALIGN
        if need > self._tail:
            if self.size - need < self._top:
                return None
            self._tail = need
        return self.size - need

    def offset_of(self, address: int, nbytes: int) -> int | None:
        """The heap offset of [address, address + nbytes) when it lies in this rank's user
        region, else None."""
        offset = address - self.my_base
        if self.header <= offset and offset + nbytes <= self._top:
            return offset
        return None

    def contains(self, address: int, nbytes: int) -> bool:
        """Whether [address, address + nbytes) lies in this rank's own heap (user region)."""
        return self.offset_of(address, nbytes) is not None

    def translate(self, address: int, rank: int) -> int:
        """Iris's translation of a local heap address to the same object on `rank`."""
        return int(self.bases[rank]) + (address - self.my_base)
