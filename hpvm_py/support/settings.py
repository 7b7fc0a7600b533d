"""Every environment variable hpvm-py reads, declared once: name, kind, default and one line of help.

Code reads a variable through its `Setting` (`settings.TARGET.get()`), at the moment it reads it
today: a few at import (noted in their help), most per call, so that a test or a program may change
one while it runs. `hpvmc config` prints the table with the
values seen now; docs/settings.md is the same table.
"""
from __future__ import annotations

import difflib
import functools
import os
import sys
import warnings
from dataclasses import dataclass

from ..errors import HPVMError, HPVMWarning


@dataclass(frozen=True)
class Setting:
    """One environment variable. kind: "flag" (unset or empty: the default; 0/false/no/off: off;
    1/true/yes/on: on; anything else: on, with a warning), "text" (the string as it is, or the default when unset or empty), or "number",
    "bytes" (byte_count: digits, a K/M/G/T suffix allowed), "seconds", "path", "list" (read as
    text; the code that uses them checks the value and names the variable in its error)."""

    name: str
    kind: str
    default: str
    help: str

    def text(self) -> str | None:
        """The variable's value, or None when it is unset or empty."""
        if _ENVIRON is not None:  # hot paths read settings per call: skip os.environ's wrapping
            value = _ENVIRON.get(_encoded(self.name))
            return os.fsdecode(value) if value else None
        return os.environ.get(self.name) or None

    def get(self) -> str:
        """The value as text, else the default ("" for none)."""
        return self.text() or self.default

    def on(self) -> bool:
        """A flag's value: 0 and 1, or false/no/off and true/yes/on in any case; anything else is
        on, with a warning that names the setting (once per value)."""
        text = self.text()
        if text is None:
            return self.default == "1"
        if text == "1" or text == "0":  # the hot path: flags are read per launch
            return text == "1"
        word = text.strip().lower()
        if word in _OFF:
            return False
        if word not in _ON:
            _warn_once(self, text, f"{self.name}={text!r} is not a flag value (0 or 1, false or "
                       "true, no or yes, off or on): it counts as on")
        return True


@functools.cache
def _encoded(name: str) -> bytes:
    return os.fsencode(name)


_ON = ("1", "true", "yes", "on")
_OFF = ("0", "false", "no", "off")  # HPVM_AUTOTUNE=false turning tuning on surprised everyone
_warned: set[tuple[str, str]] = set()  # (setting, value) already warned about


def _warn_once(setting: Setting, value: str, text: str) -> None:
    """A warning about a setting's value, once per value and process (most are read per launch)."""
    if (setting.name, value) in _warned:
        return
    _warned.add((setting.name, value))
    warnings.warn(text, HPVMWarning, stacklevel=user_level())


def warn(setting: Setting, text: str) -> None:
    """A warning about the value a setting has now (an unknown name in a list, say), once per
    value: for the code that reads a "text" or "list" setting and tolerates the value."""
    _warn_once(setting, setting.get(), text)


def is_decimal(text: str) -> bool:
    """Whether `text` is a whole number written in ASCII digits, the only form the number settings
    take. str.isdigit() alone also passes superscripts ("2\u00b2"), which int() then rejects with a
    ValueError instead of the setting's own error, and other scripts' digits, which int() reads."""
    return text.isascii() and text.isdigit()


# The longest wait a "seconds" setting or argument may ask for (about 31 years). Timeouts become
# datetime.timedelta (gloo's, at most 999999999 days) and int64 nanoseconds (the GPU kernels'
# %globaltimer deadlines): "inf" or 1e14 passed float() and then failed there as an OverflowError.
MAX_SECONDS = 1e9


def valid_seconds(value: float) -> bool:
    """Whether `value` is a timeout every consumer can take: positive, finite, at most MAX_SECONDS
    (NaN is none)."""
    return 0 < value <= MAX_SECONDS


_SCALES = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
# the most bytes a "bytes" setting may name: a file offset (off_t), what a heap segment's size
# becomes; HPVM_HEAP_BYTES=99999999999999T failed there as an internal OverflowError
MAX_BYTES = (1 << 63) - 1


def byte_count(setting: Setting, error: type[HPVMError] = HPVMError) -> int | None:
    """A "bytes" setting's value (its default when unset or empty; None when that is empty too): a
    whole number of bytes in ASCII digits, a K, M, G or T suffix multiplying it by a power of 1024,
    at most MAX_BYTES; `error`, naming the setting, for anything else."""
    text = setting.get()
    if not text:
        return None
    scale = _SCALES.get(text[-1].lower(), 1)
    digits = text[:-1] if scale != 1 else text
    if not is_decimal(digits) or int(digits) * scale > MAX_BYTES:
        raise error(f"{setting.name}={text!r} must be a number of bytes, at most 2**63 - 1 (a K, "
                    "M, G or T suffix allowed: 64M)")
    return int(digits) * scale


def positive_seconds(setting: Setting, error: type[HPVMError] = HPVMError) -> float:
    """A "seconds" setting's value (its default when unset or empty); `error`, naming the setting,
    when it is no positive number of at most MAX_SECONDS."""
    text = setting.get()
    try:
        # in ASCII, as every number setting: float() also reads other scripts' digits ("\u0665"),
        # digits grouped by underscores ("1_0") and spaces around them
        value = float(text) if text.isascii() and "_" not in text and text == text.strip() else -1.0
    except ValueError:
        value = -1.0
    if not valid_seconds(value):
        raise error(f"{setting.name}={text!r} must be a positive number of seconds, at most "
                    f"{MAX_SECONDS:g}")
    return value


def choice(setting: Setting, values: tuple[str, ...], error: type[HPVMError] = HPVMError) -> str:
    """A "text" setting that names one of `values` (its default when unset or empty); `error`,
    naming the setting, for anything else."""
    value = setting.get()
    if value not in values:
        raise error(f"{setting.name}={value!r}: expected {', '.join(values[:-1])} or {values[-1]}")
    return value


_ALL: list[Setting] = []
# os.environ's own dict on POSIX (bytes -> bytes; os.environ and monkeypatching keep it current),
# read directly: a setting read per launch then costs a tenth of os.environ.get's microsecond
_ENVIRON: dict[bytes, bytes] | None = getattr(os.environ, "_data", None) if os.name == "posix" \
    and isinstance(getattr(os.environ, "_data", None), dict) else None


def _declare(name: str, kind: str, default: str, help: str) -> Setting:
    setting = Setting(name, kind, default, help)
    _ALL.append(setting)
    return setting


# choosing where code runs
TARGET = _declare("HPVM_TARGET", "text", "", "target when init()/launch() name none: cpu, gpu, "
                  "nvptx or python (default: gpu when a CUDA GPU is here, else cpu; Triton's "
                  "interpreter runs gpu when named)")
GPU_DEVICE = _declare("HPVM_GPU_DEVICE", "text", "", "the device the GPU targets run on: cuda:N or "
                      "fake:N (default: this rank's GPU, else cuda:0, else fake:0)")
# two fake GPUs by default: enough to test placement on two devices without CUDA
FAKE_DEVICES = _declare("HPVM_FAKE_DEVICES", "number", "2", "how many fake GPUs stand in for CUDA "
                        "when there is none (CI)")
NUM_THREADS = _declare("HPVM_NUM_THREADS", "number", "", "worker threads of the cpu target, "
                       "at most 4096, read when the pool starts (the process's first cpu launch) "
                       "(default: every core this process may run on)")
CPU_SPINS = _declare("HPVM_CPU_SPINS", "number", "", "pause-loop iterations an idle worker of the "
                     "cpu target's pool spins before it sleeps, read when the pool starts "
                     "(default: 20000, about 0.5-1 ms, for up to 32 threads; 2000 above)")
CPU_NONTEMPORAL = _declare("HPVM_CPU_NONTEMPORAL", "text", "auto", "cpu target's stores to large "
                            "write-only outputs: auto (time both from 4 MiB written, keep the "
                            "faster, remembered in the disk cache for this CPU and thread count), "
                            "on (whenever a store qualifies) or off")
CPU_LEVEL = _declare("HPVM_CPU_LEVEL", "text", "", "the x86-64 level the cpu target generates code "
                     "for: x86-64, x86-64-v2, x86-64-v3 (AVX2) or x86-64-v4 (AVX-512), at most what "
                     "this CPU runs (below v3, f16 converts in software), read when a graph is "
                     "compiled (its first launch, or hpvm.compile): a graph compiled before keeps "
                     "its code (default: this CPU, every feature it has)")
GPU_LOWERING = _declare("HPVM_GPU_LOWERING", "text", "auto", "which lowering runs a leaf placed "
                        "on gpu or nvptx by the runtime's target (not by a hint or its target=): "
                        "auto (time Triton's and NVPTX's on the first large launch of each size "
                        "class, keep the faster), triton, nvptx, or off (its target's)")
# compiling
CACHE_DIR = _declare("HPVM_CACHE_DIR", "path", "", "the on-disk compile cache (default: "
                     "$XDG_CACHE_HOME/hpvm-py, else ~/.cache/hpvm-py)")
NO_CACHE = _declare("HPVM_NO_CACHE", "flag", "0", "1: neither read nor write the disk cache")
CACHE_MAX_BYTES = _declare("HPVM_CACHE_MAX_BYTES", "bytes", "2G", "the disk cache's size at most: "
                           "past it, the entries used least recently are removed (0: no limit)")
DOT_PRECISION = _declare("HPVM_DOT_PRECISION", "text", "ieee", "how the gpu target's tl.dot kernels "
                         "multiply f32: ieee (FMA units, IEEE products: the default) or tf32x3 "
                         "(three TF32 tensor-core products per pair, about f32's accuracy but "
                         "not its rounding: opt in)")
AUTOTUNE = _declare("HPVM_AUTOTUNE", "flag", "1", "0: the gpu target does not time block shapes "
                    "of large launches")
GPU_CHECK = _declare("HPVM_GPU_CHECK", "flag", "0", "1: every nvptx kernel is bounds-checked, "
                     "proven safe or not")
NVPTX_ARCH = _declare("HPVM_NVPTX_ARCH", "text", "", "the GPU architecture nvptx kernels are "
                      "assembled for, e.g. sm_90 (default: the first GPU's, else sm_90)")
LIBDEVICE = _declare("HPVM_LIBDEVICE", "path", "", "libdevice.10.bc for nvptx math (default: the "
                     "copy inside the triton wheel)")
PTXAS = _declare("HPVM_PTXAS", "path", "", "the ptxas the nvptx target assembles with (default: "
                 "triton's, else one on PATH)")
PYTHON_VECTOR = _declare("HPVM_PYTHON_VECTOR", "flag", "1", "0: the python target runs every leaf "
                         "instance by instance")
# running
STREAM_ITEMS = _declare("HPVM_STREAM_ITEMS", "flag", "1", "0: GPU streams never run whole items "
                        "as one unit")
STREAM_GRAPHS = _declare("HPVM_STREAM_GRAPHS", "flag", "1", "0: a slot of whole stream items "
                         "launches its kernels one by one, not as one CUDA graph")
REBIND = _declare("HPVM_REBIND", "flag", "1", "0: a launch whose buffers differ from every "
                  "recorded launch's takes the normal path (no copies of recorded launches pointed "
                  "at its buffers)")
TRITON_LAUNCHER = _declare("HPVM_TRITON_LAUNCHER", "text", "own", "how the gpu target relaunches a "
                            "compiled kernel: own (cuLaunchKernel on parameters packed once; "
                            "Triton's launcher for kernels it cannot launch) or triton (Triton's "
                            "launcher)")
POISON_OUT = _declare("HPVM_POISON_OUT", "flag", "0", "1 (read at import): fill partly written Out "
                      "buffers with NaN or 0xAB bytes first on host targets")
# diagnostics
LOG = _declare("HPVM_LOG", "text", "", "info or debug (read on first use): print hpvm_py's log (progress such as "
               "autotuning) to stderr (default: quiet)")
DUMP_IR = _declare("HPVM_DUMP_IR", "list", "", "print the IR after these stages to stderr: "
                   "frontend, inline, fold, a backend pass (clip, or cpu.clip: "
                   "docs/debugging.md lists them), or all")
DEBUG = _declare("HPVM_DEBUG", "flag", "0", "1: an internal error keeps its traceback")
QUIET = _declare("HPVMC_QUIET", "flag", "0", "1: hpvmc prints no progress messages")
# ranks and collectives
DIST_LAUNCHER = _declare("HPVM_DIST_LAUNCHER", "text", "", "mpi, torch or single: overrides how "
                         "hpvm.distributed detects its launcher")
DIST_DEVICE = _declare("HPVM_DIST_DEVICE", "text", "", "cpu or cuda: where ranks keep their heaps "
                       "(default: cuda when torch sees a GPU)")
DIST_SHARE_GPUS = _declare("HPVM_DIST_SHARE_GPUS", "flag", "0", "1: ranks of one host may share "
                           "GPUs (correct, not fast)")
HEAP_BYTES = _declare("HPVM_HEAP_BYTES", "bytes", "128M", "size of each rank's symmetric heap "
                      "(K, M or G suffix allowed)")
HEAP_DIR = _declare("HPVM_HEAP_DIR", "path", "/dev/shm", "where CPU ranks create their heap "
                    "segments")
COMM_TIMEOUT = _declare("HPVM_COMM_TIMEOUT", "seconds", "60", "how long any wait for other ranks "
                        "may take")
COMM_ONESHOT_BYTES = _declare("HPVM_COMM_ONESHOT_BYTES", "bytes", "", "the largest all-reduce that "
                              "runs one-shot (default: measured per device and world size)")
COMM_QUANTIZE_BYTES = _declare("HPVM_COMM_QUANTIZE_BYTES", "bytes", "", "the smallest all-reduce "
                               "that a node with quantize= runs quantized, for every format (default: measured "
                               "per format, 16 MiB fp8, 32 MiB int8, 128 MiB int4; smaller ones run exact)")
COMM_STREAM_BYTES = _declare("HPVM_COMM_STREAM_BYTES", "bytes", "", "two GPU ranks run all-reduces "
                             "larger than this with the stream kernel (default: none; two-shot was faster at every size measured)")
COMM_ONE_SHOT_PUSH_BYTES = _declare("HPVM_COMM_ONE_SHOT_PUSH_BYTES", "bytes", "", "GPU ranks on one host run "
                                    "all-reduces up to this size (at most 512 KiB) one-shot by stores (default: "
                                    "measured per world size: 512 KiB on 2 and 4 GPUs)")
COMM_PUSH_BYTES = _declare("HPVM_COMM_PUSH_BYTES", "bytes", "", "GPU ranks on one host run all-reduces "
                           "larger than this with two-shot by stores (default: measured per world "
                           "size: 1 MiB on 2 GPUs, 4 MiB on 4, 1 MiB for 4-byte elements there)")
COMM_FORCE_REMOTE = _declare("HPVM_COMM_FORCE_REMOTE", "flag", "0", "1: every rank counts as a "
                             "host of its own (tests the between-host collectives on one machine)")

SETTINGS: tuple[Setting, ...] = tuple(_ALL)


def warn_misspelled() -> None:
    """A warning for each HPVM_* variable of the environment that is no setting but nearly one
    (HPVM_NO_CACHE without its second underscore): such a typo is otherwise silently ignored. Other HPVM_*
    names (a test's or a benchmark's own) pass, as do names already warned about."""
    declared = [s.name for s in SETTINGS]
    for name in os.environ:
        if not name.startswith("HPVM_") or name in declared or ("", name) in _warned:
            continue
        close = difflib.get_close_matches(name, declared, n=1, cutoff=0.85)
        if close:
            _warned.add(("", name))
            warnings.warn(f"{name} is not a setting of hpvm-py, and is ignored: did you mean "
                          f"{close[0]}? (`hpvmc config` lists them)", HPVMWarning,
                          stacklevel=user_level())


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # (not hpvm_py_x/)


def user_level() -> int:
    """The stacklevel of warnings.warn, called from the caller of this, that names the user's line
    (the first frame outside hpvm_py and contextlib: init() comes through several of them)."""
    frame, level = sys._getframe(1), 1
    while frame is not None and (frame.f_code.co_filename.startswith(_PACKAGE) or
                                 frame.f_code.co_filename.endswith("contextlib.py")):
        frame, level = frame.f_back, level + 1
    return level


def describe() -> str:
    """Every setting with its value here (what `hpvmc config` prints)."""
    lines = [("variable", "kind", "default", "value", "help")] + [
        (s.name, s.kind, s.default or "-", s.text() or "-", s.help) for s in SETTINGS]
    widths = [max(len(row[i]) for row in lines) for i in range(4)]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row[:4], widths)) + "  " + row[4]
                     for row in lines)

