"""What every symmetric heap shares, host or device: the bump allocator that every rank runs
identically, the address checks and Iris's pointer translation.

A heap is one block of `size` bytes per rank: a control region of `header` bytes, then user
allocations aligned to ALIGN bytes. A buffer at offset `o` of rank r's heap has a twin at offset
`o` of every other rank's heap as long as all ranks allocate the same sequence (the collectives
check that), so rank r reaches rank q's twin of its pointer `p` at `bases[q] + (p - bases[r])`.
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

    @property
    def world_size(self) -> int:
        return len(self.bases)

    @property
    def free_bytes(self) -> int:
        return self.size - self._top

    def allocate(self, nbytes: int, loc: Loc | None = None) -> int:
        """The offset of a new block of nbytes (aligned); HPVMError at `loc` when the heap is full."""
        start = (self._top + ALIGN - 1) // ALIGN * ALIGN
        end = start + max(nbytes, 1)
        if end > self.size:
            raise DistributedError(f"symmetric heap exhausted: requested {nbytes} bytes, "
                                   f"{max(0, self.size - start)} bytes free of {self.size - self.header} "
                                   "(set HPVM_HEAP_BYTES larger)", loc, rule="heap-capacity")
        self._top = end
        return start

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
