"""The Triton generator's remote accesses (remote_load / remote_store / remote_atomic_add): the
access's block of pointers becomes integers, moves by the distance between this rank's heap and
the peer's (Iris's translation, with the bases loaded from the HEAP_BASES argument) and is cast
back to the buffer's pointer type; in the checked variant the rank is checked first."""
from __future__ import annotations

from ...ir import kernel as K
from ..access_errors import RANK_SITES

HEAP_ARGUMENTS = {"HEAP_BASES": "*i64", "MY_RANK": "i64", "WORLD": "i64"}


class RemoteAccesses:
    """Mixed into the generator: uses its emit/fresh/index and its names and sites."""

    def rank(self, e: K.Expr | None, m: str) -> str | None:
        """The rank of a remote access as a block of int64 (None for a local access)."""
        return None if e is None else self.index(e, m)

    def rank_guard(self, rank: str, m: str, site: int) -> str:
        """The mask of lanes whose rank is in the world; the checked variant reports the others
        (site: the access's number)."""
        ok = self.fresh("okr")
        self.emit(f"{ok} = ({rank} >= 0) & ({rank} < WORLD)")
        if self.failures is not None:  # kept for the end, as the accesses' failures (accesses.py)
            self.record_failure(f"{m} & ~{ok}", rank, RANK_SITES + site, "WORLD")
        else:
            self.emit(f"_report(ERR, {m} & ~{ok}, {rank}, {RANK_SITES + site}, WORLD, BLOCK)")
        return f"{m} & {ok}"

    def address(self, ptr: K.Var, index: str, rank: str | None, m: str) -> str:
        """The pointers of one access: into this rank's buffer, or into rank's twin of it (the
        bases are read only for the lanes of mask m)."""
        buf = self.names[ptr.name]
        if rank is None:
            return f"{buf} + {index}"
        peer = self.fresh("peer")
        self.emit(f"{peer} = (tl.cast({buf} + {index}, tl.int64) + tl.load(HEAP_BASES + {rank}, "
                  f"mask={m}, other=0) - tl.load(HEAP_BASES + MY_RANK)).to({buf}.dtype)")
        return peer
