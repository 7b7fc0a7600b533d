"""hpvmc: check, compile, run and draw hpvm-py programs.

    hpvmc check FILE [--graph NAME]
    hpvmc compile FILE [--graph NAME] [--target cpu|gpu|nvptx|python] [--emit ir,triton,llvm,ptx,dot] [-o DIR]
                  [--after PASS]  (--emit ir: each leaf's IR after that backend pass of the target)
                  [--variants]    (--emit triton: the other kernels a launch may run)
    hpvmc run FILE [--target cpu|gpu|nvptx|python] [--trace T.json] [ARGS...]  (a .py program's host code)
    hpvmc run FILE [--graph NAME] [--target ...] [--set NAME=VALUE ...] [-o DIR] [--trace T.json]  (one graph)
    hpvmc viz FILE [--graph NAME] [--hide-scalars|--show-scalars] [--no-legend] [--profile T.json]
              -o OUT.{dot,svg,png}
    hpvmc config                                                      (the HPVM_* variables)
    hpvmc cache [--clear]                     (the disk cache: where, how full; --clear empties it)

FILE is a Python module or a textual .hpvm file. Exit status: 0 on success, 1 on an error in the
program (the message names its file:line), 2 on a usage error.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import runpy
import shutil
import subprocess
import sys
import sysconfig
import time
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

from .api.textio import from_text
from .backends import registry
from .cli_run import RunUsageError, run_graph
from .errors import HPVMError, InternalError
from .frontend.decorators import GraphDef, HelperDef, LeafDef
from .ir.dfg import Module
from .ir.dot import HIDE_SCALARS_ABOVE, module_to_dot
from .ir.printer import print_module
from .ir.verify import verify_module
from .passes import PIPELINES, leaf_module, run_passes
from .passes.coverage import check_report
from .rt.compiler import LoadedGraph, compile_graph
from .support import cache, settings
from .support.loc import Loc
from .support.profile import load_summary, profile, why_unwritable
from .support.version import VERSION

# what `--emit` takes: kind -> (file suffix, the target whose code it is; None: the graph's own,
# any target). The leaves' kinds are the backends' `emits` (a test holds the two together); known
# here so that a wrong --emit, or one at odds with --target, is refused before anything compiles.
EMITS: dict[str, tuple[str, str | None]] = {
    "ir": (".hpvm", None),
    "dot": (".dot", None),
    "llvm": (".ll", "cpu"),
    "triton": (".triton.py", "gpu"),
    "ptx": (".ptx", "nvptx"),
}
GRAPH_EMITS = tuple(kind for kind, (_, target) in EMITS.items() if target is None)


def parse_emits(text: str) -> list[str]:
    """`--emit`'s comma-separated kinds, checked when the command line is parsed (argparse type)."""
    emits = list(dict.fromkeys(e.strip() for e in text.split(",") if e.strip()))
    bad = [e for e in emits if e not in EMITS]
    if bad or not emits:
        raise argparse.ArgumentTypeError(f"takes a comma-separated list of {', '.join(EMITS)}; "
                                         f"got {', '.join(bad) if bad else repr(text)}")
    return emits


def emit_target(emits: list[str], target: str | None) -> str | None:
    """The target a compile for `emits` needs: the one whose code a leaf kind is (`--emit triton`
    implies gpu, `llvm` cpu, `ptx` nvptx), else `target`. Raises UsageError where the kinds need
    two targets or an explicit `target` is another."""
    wanted = {kind: EMITS[kind][1] for kind in emits if EMITS[kind][1] is not None}
    if len(set(wanted.values())) > 1:
        raise UsageError(f"--emit {', '.join(wanted)}: these are the code of different targets "
                         f"({', '.join(f'{k}: {t}' for k, t in wanted.items())}); run hpvmc compile "
                         "once per target")
    if not wanted:
        return target
    kind, needed = next(iter(wanted.items()))
    if target is not None and target != needed:
        raise UsageError(f"--emit {kind} writes the {needed} target's code, but --target is {target}: "
                         f"leave --target out or give --target {needed}")
    return needed


class UsageError(Exception):
    """A command line that cannot be carried out (exit status 2)."""


class UserCodeError(Exception):
    """The user's Python module failed while it was imported or run (exit status 1)."""


def _progress(message: str) -> None:
    if not settings.QUIET.on():
        print(f"hpvmc: {message}", file=sys.stderr)


# ----------------------------------------------------------------------------------------------
# Loading programs


def _program_module_name(path: Path) -> str:
    """The private name a program is imported under: never a standard library module's or a
    package's, whatever the file is called (`string.py`, `types.py`)."""
    return "_hpvmc_program_" + "".join(c if c.isalnum() else "_" for c in path.stem)


def _add_program_dir(path: Path) -> None:
    """Let a program import the modules next to it, after the standard library: a program named
    like a standard module (`string.py`, `calendar.py`) must not stand in for it, in its own imports
    or in those of numpy, llvmlite or Triton made later."""
    folder = str(path.resolve().parent)
    if folder in sys.path:
        return
    stdlib = {os.path.normpath(p) for p in (sysconfig.get_paths()["stdlib"],
                                            sysconfig.get_paths()["platstdlib"])}
    position = 0
    for i, entry in enumerate(sys.path):
        normal = os.path.normpath(entry) if entry else ""
        if normal in stdlib or any(normal.startswith(s + os.sep) for s in stdlib) or \
                normal.endswith(".zip"):
            position = i + 1
    sys.path.insert(position, folder)


def _import_program(path: Path) -> ModuleType:
    """Import a program from its path under a private name (`_program_module_name`)."""
    name = _program_module_name(path)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UsageError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    _add_program_dir(path)
    try:
        spec.loader.exec_module(module)
    except HPVMError:
        raise
    except SystemExit as exc:  # sys.exit() or argparse at module level: nothing was checked
        raise UserCodeError(_exit_message(exc, path)) from None
    except Exception as exc:  # noqa: BLE001 - the user's own code failed: show its frames only
        raise UserCodeError(_user_traceback(exc, path)) from None
    return module


def _exit_message(exc: SystemExit, path: Path) -> str:
    """A program that exited while it was imported (sys.exit(), or argparse reading hpvmc's own
    arguments), at the program's line that did (the exit itself may be deep in a library)."""
    lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__)
             if Path(f.filename).resolve() == path.resolve()]
    loc = Loc(str(path), lines[-1] if lines else 0)
    return (f"{loc}: error: the program exited (SystemExit: {exc.code}) while hpvmc imported it: "
            f"put its host code under `if __name__ == \"__main__\":`\n{loc.snippet()}").rstrip()


def _user_traceback(exc: BaseException, path: Path) -> str:
    if isinstance(exc, SyntaxError):  # shown as hpvm-py's own errors are, caret included
        loc = Loc(exc.filename or str(path), exc.lineno or 0, max(0, (exc.offset or 1) - 1))
        return f"{loc}: error: {exc.msg}\n{loc.snippet() or '    ' + (exc.text or '').strip()}"
    package = str(Path(__file__).parent) + os.sep  # (not a user's hpvm_py_x/ beside it)
    # (nor Python's own machinery that ran the program: "<frozen runpy>", "<frozen importlib...>")
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if not f.filename.startswith((package, "<frozen "))]
    lines = "".join(traceback.format_list(frames[-5:]))
    return f"{path}: the program raised {type(exc).__name__}: {exc}\n{lines}".rstrip()


def _graphs_of(module: ModuleType) -> dict[str, GraphDef]:
    found = {}
    for obj in vars(module).values():
        if isinstance(obj, GraphDef) and obj.pyfunc.__module__ == module.__name__:
            found[obj.pyfunc.__name__] = obj
    return found


def _roots(graphs: dict[str, GraphDef]) -> dict[str, GraphDef]:
    """The graphs no other graph of the module instantiates."""
    children: set[int] = set()
    for g in graphs.values():
        for child in g.children().values():
            children.add(id(child))
    return {name: g for name, g in graphs.items() if id(g) not in children}


def _load(file: str, graph: str | None, need_one: bool,
          need_graph: bool = True) -> tuple[ModuleType | None, list[tuple[str, Any]]]:
    """The python module (None for a .hpvm file) and the (name, graph object) pairs to work on;
    none where the program has no graph and `need_graph` is off (check: its leaves alone)."""
    path = Path(file)
    if not path.exists():
        raise UsageError(f"{file}: no such file")
    if path.is_dir():
        raise UsageError(f"{file}: a folder, not a .py program or a .hpvm file")
    if path.suffix == ".hpvm":
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"{file}: cannot read it ({exc.strerror or exc})") from None
        except UnicodeDecodeError as exc:
            raise UsageError(f"{file}: not a textual .hpvm file (byte {exc.start} is not UTF-8)") from None
        loaded = from_text(text, str(path))
        assert isinstance(loaded, LoadedGraph)
        if graph is not None and graph != loaded.name:
            raise UsageError(f"{file} holds graph {loaded.name!r}, not {graph!r}")
        return None, [(loaded.name, loaded)]
    if path.suffix != ".py":
        raise UsageError(f"{file}: expected a .py program or a .hpvm file")
    module = _import_program(path)
    graphs = _graphs_of(module)
    if graph is not None:
        if graph not in graphs:
            known = ", ".join(sorted(graphs)) or "none"
            raise UsageError(f"{file} has no @hpvm.graph named {graph!r} (graphs: {known})")
        return module, [(graph, graphs[graph])]
    roots = _roots(graphs)
    if not roots and need_graph:
        raise UsageError(f"{file} defines no @hpvm.graph")
    if need_one and len(roots) > 1:
        raise UsageError(f"{file} has several root graphs ({', '.join(sorted(roots))}): choose one "
                         "with --graph")
    return module, list(roots.items())


# ----------------------------------------------------------------------------------------------
# Commands


def cmd_check(args: argparse.Namespace) -> int:
    module, targets = _load(args.file, args.graph, need_one=False, need_graph=False)
    leaves: dict[str, Any] = {}
    if module is not None:  # every leaf and helper, used or not, must lower
        for obj in vars(module).values():
            if isinstance(obj, (LeafDef, HelperDef)) and obj.pyfunc.__module__ == module.__name__:
                ir = obj.ir
                if isinstance(obj, LeafDef):
                    leaves[ir.name] = ir
    if not targets and not leaves:
        raise UsageError(f"{args.file} defines no @hpvm.graph and no @hpvm.leaf")
    total_nodes = 0
    for name, graph in targets:
        ir = graph.module()
        verify_module(ir)
        run_passes(ir)
        for leaf in ir.leaves():
            leaves.setdefault(leaf.name, leaf)
        total_nodes += _count_nodes(ir)
        _progress(f"{name}: ok ({len(ir.functions)} functions, {_count_nodes(ir)} nodes)")
    for leaf in leaves.values():
        for loc, text in check_report(leaf):
            print(f"{loc}: {text}", file=sys.stderr)
    print(f"{args.file}: ok ({len(targets)} graph(s), {total_nodes} nodes)")
    return 0


def _count_nodes(module: Module) -> int:
    return sum(len(g.nodes) for g in module.graphs())


def cmd_compile(args: argparse.Namespace) -> int:
    emits: list[str] = args.emit
    target = emit_target(emits, args.target)  # before anything loads or compiles
    if args.after and "ir" not in emits:
        raise UsageError("--after PASS shows the IR after a backend pass: use it with --emit ir")
    if args.variants and all(EMITS[kind][1] is None for kind in emits):
        raise UsageError("--variants writes a leaf's other kernels: use it with --emit triton "
                         "(the cpu and nvptx targets make one kernel a leaf)")
    _, [(name, graph)] = _load(args.file, args.graph, need_one=True)
    out_dir = _output_dir(args.output) if args.output else None
    to_stdout: list[tuple[str, str, str]] = []  # (file name, kind, text)

    def write(filename: str, kind: str, text: str) -> None:
        if out_dir is None:
            to_stdout.append((filename, kind, text))
        else:
            _write_file(out_dir / filename, text)
            _progress(f"wrote {out_dir / filename}")

    module = graph.module()
    started = time.perf_counter()
    compiled = compile_graph(graph, target or "cpu")
    _progress(f"compiled {name} for {compiled.target} in {time.perf_counter() - started:.2f} s")
    for kind in emits:
        suffix, wanted = EMITS[kind]
        if kind == "ir" and args.after:
            _write_after(args.after, compiled, write)
        elif kind == "ir":
            write(f"{name}{suffix}", kind, print_module(module))
        elif kind == "dot":
            write(f"{name}{suffix}", kind, module_to_dot(module))
        else:
            backend = registry.get(compiled.target)
            assert backend is not None and compiled.target == wanted  # emit_target chose it
            written: set[str] = set()
            for leaf, ctx, _ in compiled.leaf_kernels():
                if leaf.name not in written:  # a leaf used by several nodes: its first context
                    written.add(leaf.name)
                    write(f"{leaf.name}{suffix}", kind, backend.emit(kind, leaf, ctx))
                    for variant, text in (backend.emit_variants(kind, leaf, ctx)
                                          if args.variants else {}).items():
                        write(f"{leaf.name}.{variant}{suffix}", kind, text)
    _print_emitted(to_stdout)
    return 0


def _output_dir(name: str) -> Path:
    """`-o DIR`, created if needed; a path that cannot be a folder is a usage error."""
    out_dir = Path(name)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"-o {name}: cannot create the folder ({exc.strerror or exc})") from None
    return out_dir


def _write_file(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {path} ({exc.strerror or exc})") from None


def _print_emitted(files: list[tuple[str, str, str]]) -> None:
    """What `compile` writes without -o: one file as it is; several, each after a header line
    `==> NAME (KIND) <==` (as `head` and `tail` separate files), with a blank line between."""
    for i, (filename, kind, text) in enumerate(files):
        if len(files) > 1:
            sys.stdout.write(("\n" if i else "") + f"==> {filename} ({kind}) <==\n")
        sys.stdout.write(text if text.endswith("\n") or not text else text + "\n")


def _write_after(stage: str, compiled: LoadedGraph, write: Callable[[str, str, str], None]) -> None:
    """`--emit ir --after PASS`: each leaf (in its first context) after one of the compile
    target's backend passes (passes.Pipeline), as a module of that leaf."""
    pipeline = PIPELINES.get(compiled.target)
    name = stage.split(".", 1)[1] if stage.startswith(f"{compiled.target}.") else stage
    if pipeline is None or name not in pipeline.names:
        known = ", ".join(pipeline.names) if pipeline is not None else "none"
        raise UsageError(f"--after: the {compiled.target} target has no backend pass {stage!r} "
                         f"(its passes: {known})")
    written: set[str] = set()
    for leaf, ctx, _ in compiled.leaf_kernels():
        if leaf.name not in written:  # a leaf used by several nodes: its first context
            written.add(leaf.name)
            after = pipeline.run(leaf, ctx, upto=name)
            write(f"{leaf.name}.{name}.hpvm", "ir", print_module(leaf_module(list(after.values())[-1])))


def cmd_run(args: argparse.Namespace) -> int:
    if not args.trace:
        return _cmd_run(args)
    problem = why_unwritable(Path(args.trace).absolute())
    if problem is not None:  # before the program runs; as a usage error (no user line to name)
        raise UsageError(f"--trace: {problem}")
    with profile(args.trace):  # written when the program ends, even when it fails
        code = _cmd_run(args)
    _progress(f"wrote the trace {args.trace} (open it in ui.perfetto.dev or chrome://tracing)")
    return code


def _cmd_run(args: argparse.Namespace) -> int:
    path = Path(args.file)
    if not path.exists():
        raise UsageError(f"{args.file}: no such file")
    if path.suffix == ".hpvm" or args.graph is not None:
        return _run_graph(args)
    if args.set or args.output:
        raise UsageError("--set and -o launch one graph: name it with --graph (or give a .hpvm file)")
    if path.suffix != ".py":
        raise UsageError(f"{args.file}: expected a .py program or a .hpvm file")
    if args.target:
        os.environ[settings.TARGET.name] = args.target
    _add_program_dir(path)
    sys.argv = [str(path)] + list(args.program_args)
    try:
        runpy.run_path(str(path), run_name="__main__")
    except HPVMError:
        raise
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return int(exc.code or 0)
        print(exc.code, file=sys.stderr)  # as Python does for sys.exit("message")
        return 1
    except Exception as exc:  # noqa: BLE001
        raise UserCodeError(_user_traceback(exc, path)) from None
    return 0


def _run_graph(args: argparse.Namespace) -> int:
    if args.program_args:
        raise UsageError(f"unexpected arguments {' '.join(args.program_args)}: a graph takes its "
                         "values from --set NAME=VALUE")
    _, [(_, graph)] = _load(args.file, args.graph, need_one=True)
    try:
        return run_graph(graph, args, _progress)
    except RunUsageError as exc:
        raise UsageError(str(exc)) from None


def cmd_viz(args: argparse.Namespace) -> int:
    out = Path(args.output)
    fmt = out.suffix.lstrip(".")
    if fmt not in ("dot", "svg", "png"):
        raise UsageError(f"viz writes .dot, .svg or .png, not {out.name}")
    # its folder made as compile -o and run --trace make theirs: Graphviz reported a missing one
    # as its own failure (exit status 1), a .dot file as a usage error
    _output_dir(str(out.parent))
    _, [(name, graph)] = _load(args.file, args.graph, need_one=True)
    text = module_to_dot(graph.module(), hide_scalars=args.hide_scalars, legend=args.legend,
                         profile=load_summary(args.profile) if args.profile else None)
    if fmt == "dot":
        _write_file(out, text)
    else:
        dot = shutil.which("dot")
        if dot is None:
            raise HPVMError(f"rendering {fmt} needs Graphviz's `dot` program, which is not installed: "
                            "install the `graphviz` package (apt install graphviz, brew install "
                            "graphviz, conda install graphviz), or write a .dot file")
        result = subprocess.run([dot, f"-T{fmt}", "-o", str(out)], input=text.encode(),
                                capture_output=True, timeout=120)
        if result.returncode != 0:
            raise HPVMError(f"Graphviz failed: {result.stderr.decode(errors='replace').strip()}")
    _progress(f"wrote {out} ({name})")
    return 0


# ----------------------------------------------------------------------------------------------


def cmd_config(args: argparse.Namespace) -> int:
    print(settings.describe())
    return 0


def cmd_cache(args: argparse.Namespace) -> int:
    root = cache.cache_dir()
    if cache.disabled():
        print(f"the disk cache is off ({settings.NO_CACHE.name}=1); its directory: {root}")
        return 0
    if args.clear:
        root, count, nbytes = cache.clear()
        print(f"{root}: {count} entries removed ({_size(nbytes)})")
        return 0
    root, held = cache.held()
    bound = cache.max_bytes()
    limit = f"at most {_size(bound)}" if bound else "no bound"
    print(f"{root}: {len(held)} entries, {_size(sum(e.nbytes for e in held))} "
          f"({limit}: {settings.CACHE_MAX_BYTES.name})")
    return 0


def _size(nbytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} bytes"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hpvmc", description="The hpvm-py compiler driver.",
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="Exit status: 0 ok, 1 error in the program, 2 usage error.")
    parser.add_argument("--version", action="version", version=f"hpvmc (hpvm-py) {VERSION}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, help_text: str, fn: Callable[[argparse.Namespace], int]) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(func=fn)
        p.add_argument("file", metavar="FILE", help="a .py program or a textual .hpvm file")
        return p

    p = add("check", "verify every graph, leaf and helper of a program against the language rules",
            cmd_check)
    p.add_argument("--graph", help="check only this graph")
    p = add("compile", "compile a graph and write its IR, generated code and picture", cmd_compile)
    p.add_argument("--graph", help="the root graph (when the file has several)")
    p.add_argument("--target", choices=tuple(registry.TARGETS), help="target of the generated code")
    p.add_argument("--emit", default=["ir", "dot"], type=parse_emits, metavar="KIND[,KIND...]",
                   help="comma-separated: ir (the graph's text), dot (its picture), llvm (cpu), "
                        "triton (gpu), ptx (nvptx); a leaf kind implies its target (default ir,dot); "
                        "without -o, several files go to stdout each after a '==> NAME (KIND) <==' line")
    p.add_argument("-o", "--output", metavar="DIR", help="write files to DIR (default: stdout)")
    p.add_argument("--after", metavar="PASS", help="with --emit ir: each leaf's IR after this "
                   "backend pass of the target (docs/debugging.md lists them per target)")
    p.add_argument("--variants", action="store_true",
                   help="with a leaf kind: also the other kernels a launch may run instead of the "
                        "one emitted (gpu: fixed, checked, literal, rows, quads), each in a file "
                        "NAME.VARIANT.SUFFIX that starts by saying when it runs")
    p = add("run", "run a program's host code on a target, or launch one graph (--graph NAME or a "
                   ".hpvm FILE) with values from --set", cmd_run)
    p.add_argument("--target", choices=tuple(registry.TARGETS),
                   help="the target (sets HPVM_TARGET for a program's host code)")
    p.add_argument("--graph", help="launch this graph of FILE once instead of running the host code")
    p.add_argument("--set", action="append", metavar="NAME=VALUE",
                   help="a graph parameter: a buffer's element count or .npy file, or a scalar "
                        "(buffer sizes in bytes are filled in); repeat for each parameter")
    p.add_argument("-o", "--output", metavar="DIR",
                   help="save the buffers the graph writes as DIR/NAME.npy (default: print a summary)")
    p.add_argument("--trace", metavar="FILE",
                   help="write a Chrome-trace/Perfetto JSON profile of the run to FILE "
                        "(docs/profiling.md)")
    p.add_argument("program_args", nargs="*", metavar="ARGS",
                   help="arguments for the program's host code: any argument that is not one of "
                        "these options, and everything after --")
    p = sub.add_parser("config", help="list the HPVM_* environment variables, their defaults and "
                       "values here", description="list the HPVM_* environment variables")
    p.set_defaults(func=cmd_config)
    p = sub.add_parser("cache", help="say where the disk cache is and how full; --clear empties it",
                       description="the disk cache of compiled code and timed decisions "
                                   f"({settings.CACHE_DIR.name}, bounded by "
                                   f"{settings.CACHE_MAX_BYTES.name})")
    p.add_argument("--clear", action="store_true", help="remove every entry")
    p.set_defaults(func=cmd_cache)
    p = add("viz", "draw the node hierarchy with Graphviz", cmd_viz)
    p.add_argument("--graph", help="the root graph (when the file has several)")
    p.add_argument("-o", "--output", required=True, metavar="OUT", help="OUT.dot, OUT.svg or OUT.png")
    scalars = p.add_mutually_exclusive_group()
    scalars.add_argument("--hide-scalars", dest="hide_scalars", action="store_true", default=None,
                         help="leave out the arrows of scalar and size inputs (a parent's non-pointer "
                              "parameters, constants: written into the node instead); the default "
                              f"for pictures of more than {HIDE_SCALARS_ABOVE} arrows")
    scalars.add_argument("--show-scalars", dest="hide_scalars", action="store_false",
                         help="draw every arrow, scalar and size inputs included")
    p.add_argument("--no-legend", dest="legend", action="store_false",
                   help="leave out the legend (node and arrow kinds)")
    p.add_argument("--profile", metavar="TRACE",
                   help="a trace of the graph (hpvmc run --trace, hpvm.profile): nodes coloured by "
                        "time, edges by bytes moved")
    return parser


_RUN_OPTIONS_WITH_VALUE = ("--target", "--graph", "--set", "-o", "--output", "--trace")


def _split_run(argv: list[str]) -> tuple[list[str], list[str]]:
    """`run`'s own options and FILE, and the program's arguments (in their order): hpvmc's
    options may come anywhere; `--` passes everything after it to the program."""
    own: list[str] = []
    program: list[str] = []
    have_file = False
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            program += argv[i + 1:]
            break
        if arg.split("=", 1)[0] in _RUN_OPTIONS_WITH_VALUE:
            own.append(arg)
            if "=" not in arg and i + 1 < len(argv):
                own.append(argv[i + 1])
                i += 1
        elif arg in ("-h", "--help") or (not have_file and not arg.startswith("-")):
            have_file = have_file or not arg.startswith("-")
            own.append(arg)
        else:
            program.append(arg)
        i += 1
    return own, program


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    program_args: list[str] = []
    if argv[:1] == ["run"]:
        own, program_args = _split_run(argv[1:])
        argv = ["run", *own]
    args = parser.parse_args(argv)
    if args.command == "run":
        args.program_args = program_args
    try:
        return args.func(args)
    except UsageError as exc:
        print(f"hpvmc {args.command}: {exc}", file=sys.stderr)
        return 2
    except UserCodeError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    except HPVMError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - never a raw traceback
        error = InternalError(f"internal error in hpvmc: {type(exc).__name__}: {exc} (please report it; "
                              "HPVM_DEBUG=1 shows the traceback)")
        if settings.DEBUG.on():
            traceback.print_exc()
        print(str(error), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
