"""Launching the mixture-of-experts kernels on tensors of the device heap: the direct API of
moe_dispatch and moe_combine on GPU ranks (what the runner of communication nodes calls after the
ranks agreed), in the manner of launch.py: nothing waits on the host, a call seen before replays
its CUDA graph, and every rank must make the same calls with the same sizes.

Bad routing data cannot raise where the kernel meets it (the host does not wait for the device):
an expert id outside [-1, experts) routes its row nowhere and a slot outside [-1, experts x
capacity) gives a zero row; either is reported in the heap's status word, and this rank's next
collective (or launch.synchronize()) raises a DistributedError saying so.
"""
from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from ...errors import DistributedError
from ..moe_plan import Layout, layout, size_error
from .heap import MAX_BLOCKS
from .launch import BAD_ROUTE, BAD_SLOT, Bound, Tuning, _common, _flat, _heap, _key, _run

# Not measured yet (no sweep on GPUs has been run for these kernels): one row of up to 16 KiB
# per step of a program, 8 warps, at most 264 programs (two per SM of an H100).
TUNING = Tuning(block_bytes=16 << 10, warps=8, programs=264)
MAX_EXPERTS = 1024  # the per-expert vectors of a program live in registers
ROWS_PER_PROGRAM = 4  # at least, before a dispatch uses another program
_scratch: dict[tuple[str, int], Any] = {}  # (device, words) -> the count kernel's int32 output


def _kernels() -> ModuleType:
    """moe_kernels.py, loaded by the first call that launches one (it imports Triton)."""
    return importlib.import_module(f"{__package__}.moe_kernels")


def moe_dispatch(tokens: Any, expert: Any, recv: Any, counts: Any, origin: Any, slot: Any, hidden: int,
                 experts: int, capacity: int, *, fingerprint: int = 0, bind: bool = False) -> Bound | None:
    """Every row of `tokens` to the rank of its expert (expert[i]; -1: nowhere), into `recv` there:
    block e % experts_per_rank, rows ordered by (source rank, source row), at most `capacity` per
    expert. counts[s, e]: rows rank s routed to this rank's expert e (all of them, kept or
    dropped); origin: (source rank, source row) per received row, (-1, -1) where none; slot:
    where each of this rank's rows went (expert x capacity + position), -1 where nowhere.
    Layout and semantics: docs/distributed.md. fingerprint and bind: as launch.all_reduce's."""
    tensors = (tokens, expert, recv, counts, origin, slot)
    return _call(("moe_dispatch", hidden, experts, capacity, TUNING, fingerprint) + _key(*tensors),
                 lambda: _dispatch(tensors, hidden, experts, capacity, fingerprint), bind)


def moe_combine(expert_out: Any, slot: Any, gate: Any | None, out: Any, hidden: int, experts: int,
                capacity: int, *, fingerprint: int = 0, bind: bool = False) -> Bound | None:
    """out[i] = gate[i] x expert_out[slot[i]] of the expert's rank (no gate: gate None), zero where
    slot[i] is -1: the inverse of moe_dispatch."""
    tensors = (expert_out, slot) + ((gate,) if gate is not None else ()) + (out,)
    return _call(("moe_combine", hidden, experts, capacity, TUNING, gate is not None, fingerprint) + _key(*tensors),
                 lambda: _combine(expert_out, slot, gate, out, hidden, experts, capacity, fingerprint), bind)


def _call(key: tuple, launch: Any, bind: bool) -> Bound | None:
    """As launch._call, through this module's `_run` (the tests stand it in)."""
    if bind:
        return Bound(key, launch)
    _run(key, launch)
    return None


def _checked(kind: str, named: dict[str, Any], hidden: int, experts: int, capacity: int,
             fingerprint: int) -> tuple[dict, list[Any], Layout]:
    """The common kernel arguments, the flat tensors and the layout; DistributedError for tensors
    the kernels cannot take."""
    import torch

    world, heap = _heap()
    flat = [_flat(heap, t, name) for name, t in named.items()]
    data = [t for name, t in zip(named, flat) if name in ("tokens", "recv", "expert_out", "out")]
    ints = [name for name, t in zip(named, flat) if name in ("expert", "counts", "origin", "slot")
            and t.dtype != torch.int32]
    if ints or data[0].dtype != data[1].dtype or (kind == "moe_combine" and not data[0].is_floating_point()):
        raise DistributedError(f"{kind}: the rows must share one element type (a float one for "
                               f"combine), expert, counts, origin and slot must be int32 (not: "
                               f"{', '.join(ints) or 'none'}), gate float32")
    if "gate" in named and flat[2].dtype != torch.float32:
        raise DistributedError(f"{kind}: gate must be float32, not {flat[2].dtype}")
    if min(hidden, experts, capacity) < 1 or experts > MAX_EXPERTS:
        raise DistributedError(f"{kind}: hidden, experts and capacity must be positive, experts at "
                               f"most {MAX_EXPERTS} on GPU ranks (got {hidden}, {experts}, {capacity})")
    sizes = [t.numel() * t.element_size() for t in flat]
    if kind == "moe_combine" and "gate" not in named:
        sizes.insert(2, 0)
    message = size_error(kind, sizes, data[0].element_size(), hidden, experts, capacity, world.size)
    if message is not None:
        raise DistributedError(f"{kind}: {message}")
    return _common(world, heap, fingerprint), flat, layout(kind, sizes, data[0].element_size(), hidden, experts,
                                               capacity, world.size)


def _dispatch(tensors: tuple, hidden: int, experts: int, capacity: int, fingerprint: int) -> None:
    names = ("tokens", "expert", "recv", "counts", "origin", "slot")
    common, flat, lay = _checked("moe_dispatch", dict(zip(names, tensors)), hidden, experts, capacity,
                                 fingerprint)
    launch_dispatch(common, flat, lay)


def _combine(expert_out: Any, slot: Any, gate: Any | None, out: Any, hidden: int, experts: int,
             capacity: int, fingerprint: int) -> None:
    named = {"expert_out": expert_out, "slot": slot, **({"gate": gate} if gate is not None else {}),
             "out": out}
    common, flat, lay = _checked("moe_combine", named, hidden, experts, capacity, fingerprint)
    if gate is None:
        flat.insert(2, None)
    launch_combine(common, flat, lay)


def _pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def dispatch_grid(lay: Layout) -> tuple[int, int]:
    """(programs, rows per program): the same on every rank (the ranks agreed on the sizes)."""
    programs = min(TUNING.programs, MAX_BLOCKS, max(1, -(-lay.tokens // ROWS_PER_PROGRAM)))
    per_program = max(1, -(-lay.tokens // programs))
    return programs, per_program


def launch_dispatch(common: dict, flat: list[Any], lay: Layout) -> None:
    """The two kernels of a dispatch on checked flat tensors (tokens, expert, recv, counts,
    origin, slot); `common`: launch._common's arguments (the tests pass stand-ins)."""
    import torch

    K = _kernels()
    tokens, expert, recv, counts, origin, slot = flat
    programs, per_program = dispatch_grid(lay)
    block_e = max(16, _pow2(lay.experts))
    block_t = max(8, min(128, 8192 // block_e))
    key = (str(tokens.device), programs * block_e)
    scratch = _scratch.get(key)
    if scratch is None:
        scratch = _scratch[key] = torch.empty(programs * block_e, dtype=torch.int32, device=tokens.device)
    K.moe_count[(programs,)](expert, lay.tokens, per_program, scratch, lay.experts,
                             common["status_addr"], BAD=BAD_ROUTE, BLOCK_T=block_t, BLOCK_E=block_e)
    block_h = min(_pow2(lay.hidden), max(16, TUNING.block_bytes // tokens.element_size()))
    K.moe_dispatch[(programs,)](tokens, expert, recv, counts, origin, slot, scratch, lay.tokens,
                                per_program, lay.hidden, lay.experts, lay.capacity,
                                ELEM=tokens.element_size(), BLOCK_T=block_t, BLOCK_E=block_e,
                                BLOCK_P=max(1, min(_pow2(programs), 8192 // block_e)), BLOCK_H=block_h,
                                num_warps=TUNING.warps, **common)


def launch_combine(common: dict, flat: list[Any], lay: Layout) -> None:
    """The combine kernel on checked flat tensors (expert_out, slot, gate or None, out)."""
    K = _kernels()
    expert_out, slot, gate, out = flat
    programs = min(TUNING.programs, MAX_BLOCKS, max(1, lay.tokens))
    block_h = min(_pow2(lay.hidden), max(16, TUNING.block_bytes // out.element_size()))
    K.moe_combine[(programs,)](expert_out, slot, gate if gate is not None else out, out, lay.tokens,
                               lay.hidden, lay.experts, lay.capacity, BAD=BAD_SLOT,
                               GATED=gate is not None, ELEM=out.element_size(), BLOCK_H=block_h,
                               num_warps=TUNING.warps, **common)
