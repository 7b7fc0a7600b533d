"""IR → IR passes, run in a fixed order by run_passes(), and the backends' leaf pipelines.

Each module pass is a pure function Module -> Module with a name. Each backend pass is a pure
function (LeafFunc, NodeContext) -> LeafFunc with a name, run in its target's `Pipeline` when a
leaf is compiled; an analysis records its decision in the leaf as a `Note`, which the text shows.
HPVM_DUMP_IR=name[,name...] prints the textual IR after the named passes to stderr, through the
`hpvm_py.dump` logger (`frontend` is the IR before any pass, `all` every stage; a backend pass is
named alone, `clip`, or with its target, `gpu.privatise`), so a miscompile can be bisected stage by
stage.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from ..ir import kernel as K
from ..ir.context import NodeContext
from ..ir.dfg import Module
from ..ir.printer import print_module
from ..ir.targets import TARGETS
from ..support import log, settings
from .fold import fold_constants
from .inline import inline_helpers

Pass = Callable[[Module], Module]

PIPELINE: list[tuple[str, Pass]] = [
    ("inline", inline_helpers),
    ("fold", fold_constants),
]


_checked_dumps: set[str] = set()  # HPVM_DUMP_IR values whose names were checked


def _dump_requested() -> set[str]:
    """The stages HPVM_DUMP_IR names; a warning (once per value) for names no stage has, which
    would otherwise print nothing, silently."""
    text = settings.DUMP_IR.get()
    wanted = {s.strip() for s in text.split(",") if s.strip()}
    if wanted and text not in _checked_dumps:
        _checked_dumps.add(text)
        known = dump_stages()
        unknown = sorted(wanted - set(known))
        if unknown:
            settings.warn(settings.DUMP_IR, f"{settings.DUMP_IR.name} names no stage called "
                          f"{', '.join(map(repr, unknown))}: nothing is printed for it (the stages: "
                          f"{', '.join(known)}; docs/debugging.md)")
    return wanted


def dump_stages() -> list[str]:
    """Every name HPVM_DUMP_IR takes: `all`, the module passes (`frontend` before them), each
    backend pass alone and with its target."""
    names = ["all", "frontend"] + [name for name, _ in PIPELINE]
    for target, row in TARGETS.items():
        names += [name for name in row.passes if name not in names]
        names += [f"{target}.{name}" for name in row.passes]
    return names


def dump(stage: str, module: Module) -> None:
    wanted = _dump_requested()
    if stage in wanted or "all" in wanted:
        log.dumps().info("; ---- IR after %s ----\n%s", stage, print_module(module))


def run_passes(module: Module) -> Module:
    dump("frontend", module)
    for name, fn in PIPELINE:
        module = fn(module)
        dump(name, module)
    return module


# ----------------------------------------------------------------------------------------------
# Backend passes: one pipeline of named leaf passes per target

LeafPass = Callable[[K.LeafFunc, NodeContext], K.LeafFunc]


@dataclass(frozen=True)
class Pipeline:
    """A target's backend passes, in the order its compile stages run them. `optional` passes run
    only in the variants that want them (the gpu target's checked and literal kernels skip its
    optimisations)."""

    target: str
    stages: tuple[tuple[str, LeafPass], ...]
    optional: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        PIPELINES[self.target] = self

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.stages)

    def get(self, name: str) -> LeafPass:
        """One pass by name (to run it alone, as the tests do)."""
        for stage, fn in self.stages:
            if stage == name:
                return fn
        raise KeyError(f"the {self.target} target has no pass {name!r} (it has "
                       f"{', '.join(self.names)})")

    def run(self, leaf: K.LeafFunc, ctx: NodeContext, skip: frozenset[str] = frozenset(),
            upto: str | None = None, label: str = "") -> dict[str, K.LeafFunc]:
        """The leaf after each stage that ran (in order; the last entry is the result), dumping
        those HPVM_DUMP_IR names. `skip`: optional passes this variant leaves out; `upto`: stop
        after that pass."""
        assert skip <= self.optional, skip - self.optional
        # the notes are this pipeline's decisions, made here: notes the leaf arrives with (a dump
        # read back, text written by hand) would be obeyed unchecked by the code generator
        leaf = replace(leaf, notes=[]) if leaf.notes else leaf
        after: dict[str, K.LeafFunc] = {}
        for name, fn in self.stages:
            if name not in skip:
                leaf = fn(leaf, ctx)
                after[name] = leaf
                dump_leaf(self.target, name, leaf, ctx, label)
            if name == upto:
                break
        return after

    def final(self, leaf: K.LeafFunc, ctx: NodeContext, skip: frozenset[str] = frozenset(),
              label: str = "") -> K.LeafFunc:
        after = self.run(leaf, ctx, skip, label=label)
        return list(after.values())[-1] if after else leaf


def with_notes(leaf: K.LeafFunc, name: str, notes: list[K.Note]) -> K.LeafFunc:
    """The leaf with the notes of pass `name` replaced by these (so that running a pass twice
    notes its decision once); the same leaf when nothing changes."""
    kept = [n for n in leaf.notes if n.name != name]
    if not notes and len(kept) == len(leaf.notes):
        return leaf
    return replace(leaf, notes=kept + notes)


# target -> its pipeline, filled as the backends are imported
PIPELINES: dict[str, Pipeline] = {}


def leaf_module(leaf: K.LeafFunc) -> Module:
    """A module of one leaf (what a dump of a backend pass prints; parse_module reads it back)."""
    return Module(root=leaf.name, functions={leaf.name: leaf})


def dump_leaf(target: str, stage: str, leaf: K.LeafFunc, ctx: NodeContext, label: str = "") -> None:
    wanted = _dump_requested()
    if stage in wanted or f"{target}.{stage}" in wanted or "all" in wanted:
        variant = f", {label}" if label else ""
        log.dumps().info("; ---- IR after %s.%s (leaf @%s, %s%s) ----\n%s", target, stage,
                         leaf.name, ctx.key(), variant, print_module(leaf_module(leaf)))
