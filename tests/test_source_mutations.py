"""Bad input is refused with an hpvm_py.errors exception, never an internal traceback: the
examples' leaves and graphs with one token replaced, dropped or extended (a number for a name, an
undefined name, a subscript, a call, a tuple, a huge literal ...), compiled for python, cpu and
gpu. Each mutant compiles, or fails with an HPVMError, or fails in Python's own execution of the
user's module (a syntax error, an unpacking at module level); an exception raised inside
hpvm_py that is not an HPVMError fails the test. The one exception: `hpvm.<no such name>`, whose
AttributeError is the module's own answer."""
from __future__ import annotations

import io
import random
import tokenize
import traceback
import warnings
from pathlib import Path

import pytest

import hpvm_py as hpvm
from differential.data import load
from hpvm_py.errors import HPVMError

ROOT = Path(__file__).resolve().parent.parent
SOURCES = [(ROOT / "examples" / name).read_text().split("\ndef main(")[0]
           for name in ("stencil.py", "sgemm.py", "histogram.py")]
REPLACEMENTS = ["0", "1.5", "-1", "nx", "i", "a0", "hpvm.get_node()", "None", "True", "(1, 2)", "[1]",
                "undefined", "f32", "i64", "hpvm", "1 << 70", "2.5e400", "'s'", "lambda: 0"]
KEYWORDS = {"def", "import", "from", "return", "if", "for", "in", "and", "or", "not", "else", "elif",
            "class", "as"}
CASES = 90


def mutant(source: str, rng: random.Random) -> str:
    """source with one name or number token replaced, dropped or extended."""
    tokens = [t for t in tokenize.generate_tokens(io.StringIO(source).readline)
              if t.type in (tokenize.NAME, tokenize.NUMBER) and t.string not in KEYWORDS
              and t.start[0] > 10]
    token = rng.choice(tokens)
    lines = source.splitlines(True)
    line = lines[token.start[0] - 1]
    head, tail = line[:token.start[1]], line[token.end[1]:]
    roll = rng.random()
    if roll < 0.6:
        line = head + rng.choice(REPLACEMENTS) + tail
    elif roll < 0.8:
        line = head + tail
    else:
        line = head + token.string + rng.choice([" + 1", "[0]", ".x", "(1)", " * nx", ", 3"]) + tail
    lines[token.start[0] - 1] = line
    return "".join(lines)


def _internal(error: BaseException) -> traceback.FrameSummary | None:
    """The innermost frame inside hpvm_py of an exception that is not the user's to read."""
    if isinstance(error, (HPVMError, SyntaxError)):
        return None
    frames = traceback.extract_tb(error.__traceback__)
    if not frames or "/hpvm_py/" not in frames[-1].filename:
        return None  # Python's own error in the user's module (its last frame is the user's)
    if isinstance(error, AttributeError) and frames[-1].filename.endswith("hpvm_py/__init__.py"):
        return None  # `hpvm.<no such name>`
    return frames[-1]


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("seed", range(3))
def test_mutated_programs_fail_with_hpvm_errors_or_compile(seed: int) -> None:
    rng = random.Random(5300 + seed)
    outcomes = {"compiled": 0, "refused": 0, "python": 0}
    for _ in range(CASES // 3):
        source = mutant(rng.choice(SOURCES), rng)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                module = load(source)
                for target in ("python", "cpu", "gpu"):
                    hpvm.compile(module.root, target=target)
            outcomes["compiled"] += 1
        except HPVMError:
            outcomes["refused"] += 1
        except Exception as error:  # noqa: BLE001 - what is raised is the test's subject
            frame = _internal(error)
            assert frame is None, (f"{type(error).__name__}: {error} at {frame.filename}:"
                                   f"{frame.lineno}\n{source}")
            outcomes["python"] += 1
    assert outcomes["refused"] > 0 and outcomes["compiled"] > 0, outcomes  # (the mutants vary)
