"""IR → IR passes, run in a fixed order by run_passes().

Each pass is a pure function Module -> Module with a name. HPVM_DUMP_IR=name[,name...] prints the
textual IR after the named passes to stderr, through the `hpvm_py.dump` logger (`frontend` is the
IR before any pass, `all` every stage), so a miscompile can be bisected stage by stage.
"""
from __future__ import annotations

from typing import Callable

from ..ir.dfg import Module
from ..ir.printer import print_module
from ..support import log, settings
from .fold import fold_constants
from .inline import inline_helpers

Pass = Callable[[Module], Module]

PIPELINE: list[tuple[str, Pass]] = [
    ("inline", inline_helpers),
    ("fold", fold_constants),
]


def _dump_requested() -> set[str]:
    return {s.strip() for s in settings.DUMP_IR.get().split(",") if s.strip()}


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
