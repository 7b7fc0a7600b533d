"""What the launchers that call libcuda's cuLaunchKernel themselves share (the nvptx target's, and
the gpu target's own launcher of compiled Triton kernels): a kernel's parameters packed once into
8-byte slots, with the array of their addresses that cuLaunchKernel reads, and the error a failed
launch raises.

cuLaunchKernel reads each parameter's size from the kernel itself, so a parameter narrower than 8
bytes sits in the low bytes of its slot (little-endian), the other bytes zero.
"""
from __future__ import annotations

import array
import ctypes

from ..errors import HPVMError, LaunchError
from ..support.loc import Loc
from . import faults

SLOT_BYTES = 8
_MASK = (1 << 64) - 1


class ParamSlots:
    """`count` parameter slots (`slots`, 8 bytes each, zeroed) and `address`, the address of the
    array of their addresses: cuLaunchKernel's kernelParams. Patching a slot changes the next
    launch; nothing is rebuilt."""

    def __init__(self, count: int, slots: ctypes.Array | None = None):
        self.count = count
        self.slots = (ctypes.c_uint64 * count)() if slots is None else slots
        base = ctypes.addressof(self.slots)
        # (from an array of the addresses: a ctypes constructor of many arguments is slow)
        self.pointers = (ctypes.c_void_p * count).from_buffer_copy(
            array.array("Q", range(base, base + SLOT_BYTES * count, SLOT_BYTES)))
        self.address = ctypes.addressof(self.pointers)

    def set(self, i: int, bits: int) -> None:
        """Slot i holds `bits` (an integer: a negative one as its two's complement)."""
        self.slots[i] = bits & _MASK

    def copy(self) -> "ParamSlots":
        """Other slots holding the same parameters (patching either leaves the other as it is)."""
        return ParamSlots(self.count, type(self.slots).from_buffer_copy(self.slots))

    def raw(self) -> bytes:
        """The slots' bytes, in order."""
        return bytes(self.slots)


def launch_failure(leaf: str, loc: Loc | None, grid: tuple[int, ...], block: tuple[int, ...],
                   shared: int, reason: str) -> HPVMError:
    """The error of a launch that cuLaunchKernel refused: a fault report when the reason is a
    kernel fault (an earlier kernel's, reported at this launch), else a LaunchError."""
    failure = LaunchError(f"launching leaf {leaf} (grid {grid}, block {block}, {shared} bytes of "
                          f"shared memory) failed: {reason}", loc)
    reported = faults.reported(failure, leaf, loc)
    assert isinstance(reported, HPVMError)
    return reported
