"""Adversarial .hpvm text: every outcome is success or a located hpvm_py error, never an internal
traceback (RecursionError, LLVM's parse error, a UnicodeEncodeError) or an error at <unknown>."""
from __future__ import annotations

import random

import pytest

from hpvm_py.errors import HPVMError, ParseError, VerificationError
from hpvm_py.ir.dfg import DimBin, DimExpr, DimParam
from hpvm_py.ir.parser import parse_module
from hpvm_py.ir.printer import print_module
from hpvm_py.ir.verify import verify_module
from hpvm_py.support.loc import TextLoc

# A vector addition as `hpvmc compile examples/vadd.py --emit ir` writes it, without locations.
VADD = """module @root

graph @root(%a: in ptr<f32>, %a_bytes: i64, %b: in ptr<f32>, %b_bytes: i64, %c: out ptr<f32>, %c_bytes: i64, %n: i64) -> () {
  node %vadd = @vadd [%n]
  bind_in %a -> %vadd.0
  bind_in %a_bytes -> %vadd.1
  bind_in %b -> %vadd.2
  bind_in %b_bytes -> %vadd.3
  bind_in %c -> %vadd.4
  bind_in %c_bytes -> %vadd.5
}

leaf @vadd(%a: in ptr<f32>, %a_bytes: i64, %b: in ptr<f32>, %b_bytes: i64, %c: out ptr<f32>, %c_bytes: i64) -> () target(any) {
  local %i: i64
  %i = instance_id.x(0)
  store %c[%i] = add<f32>(load<f32>(%a, %i), load<f32>(%b, %i))
}
"""


def load_and_verify(text: str) -> None:
    verify_module(parse_module(text, "adversarial.hpvm"))


def located(error: HPVMError, text: str = VADD) -> tuple[int, int]:
    """(line, column) of a located error, which prints its text line with a caret (where the
    text has that line: an empty file has none)."""
    assert error.loc is not None and error.loc.line > 0, str(error)
    if error.loc.line <= len(text.splitlines()):
        assert "^" in str(error), str(error)
    return error.loc.line, error.loc.col


# -- instance counts too deep for Python's stack ------------------------------------------------


@pytest.mark.parametrize("count", [
    " + ".join(["%n"] * 5000),  # left-nested, as the grammar reads a sum
    "(%n + " * 3000 + "1" + ")" * 3000,  # right-nested through parentheses
])
def test_a_deep_instance_count_is_refused_where_it_goes_too_deep(count: str) -> None:
    with pytest.raises(VerificationError) as info:
        load_and_verify(VADD.replace("[%n]", f"[{count}]"))
    assert info.value.rule == "instance-counts"
    line, _ = located(info.value)
    assert line == 4


def test_a_deep_bound_expression_is_refused() -> None:
    total = " + ".join(["%n"] * 3000)
    text = VADD.replace("bind_in %c_bytes -> %vadd.5", f"bind_expr {total} -> %vadd.5")
    with pytest.raises(VerificationError) as info:
        load_and_verify(text)
    assert located(info.value)[0] == 10


def test_an_instance_count_as_deep_as_allowed_still_reads() -> None:
    load_and_verify(VADD.replace("[%n]", "[" + " + ".join(["%n"] * 129) + "]"))  # 128 deep


# -- control characters and lone surrogates in quoted names and strings ------------------------


@pytest.mark.parametrize("old, new", [
    ("%i", '%"i\\u0000"'),  # a local: NUL broke the LLVM value name
    ("%b_bytes", '%"b\\u0000"'),  # a parameter
    ("%vadd", '%"v\\u0000"'),  # a node
    ("@vadd", '@"v\\n"'),  # a leaf: a newline broke the LLVM module id line
    ("@vadd", '@"v\\u0001"'),
    ("@root", '@"r\\u007f"'),
    ("%i", '%"i\\ud800"'),  # half a surrogate pair: no UTF-8 for it
    ("@vadd", '@"v\\udfff"'),
])
def test_names_that_break_code_generation_are_refused_at_their_position(old: str, new: str) -> None:
    text = VADD.replace(old, new)
    with pytest.raises(ParseError) as info:
        parse_module(text, "adversarial.hpvm")
    line, col = located(info.value)
    assert text.splitlines()[line - 1][col:].startswith(new)


def test_a_file_path_with_nul_is_refused() -> None:
    # it used to fail later, as the error's snippet looked the file up (ValueError: embedded null)
    text = VADD.replace("module @root\n", 'module @root\nfile 0 "a\\u0000.py"\n')
    with pytest.raises(ParseError) as info:
        parse_module(text, "adversarial.hpvm")
    assert located(info.value) == (2, 7)


def test_a_print_string_with_a_lone_surrogate_is_refused() -> None:
    text = VADD.replace("  store", '  print("x\\ud800", %i)\n  store')
    with pytest.raises(ParseError) as info:
        parse_module(text, "adversarial.hpvm")
    assert "surrogate" in str(info.value) and located(info.value)[0] == 16


def test_local_names_with_other_control_characters_still_read() -> None:
    module = parse_module(VADD.replace("%i", '%"i\\n\\t\\u001b"'))
    assert "i\n\t\x1b" in module.functions["vadd"].locals


# -- unlocated graph items are reported at their position in the text ---------------------------


@pytest.mark.parametrize("old, new, rule, line, col", [
    ("%vadd.5", "%vadd.7", "ports-exist", 10, 10),  # bind_in: at its source
    ("node %vadd = @vadd [%n]", "node %vadd = @vadd [%n, %n, %n, %n]", "max-three-dims", 4, 7),
    ("bind_in %c_bytes -> %vadd.5", "bind_const 1.5:f32 -> %vadd.5", "bind-types", 10, 13),
    ("bind_in %c_bytes -> %vadd.5", "bind_expr %n * 2 -> %vadd.4", "node-inputs", 10, 22),
    ("  bind_in %c_bytes -> %vadd.5\n", "  bind_in %c_bytes -> %vadd.5\n  edge %vadd.0 -> %vadd.1 "
     "one_to_one\n", "ports-exist", 11, 7),
    ("  bind_in %c_bytes -> %vadd.5\n", "  bind_in %c_bytes -> %vadd.5\n  bind_out %vadd.0 -> 0\n",
     "ports-exist", 11, 11),
])
def test_unlocated_graph_items_are_reported_where_they_are(old: str, new: str, rule: str, line: int,
                                                           col: int) -> None:
    text = VADD.replace(old, new)
    assert text != VADD
    with pytest.raises(VerificationError) as info:
        load_and_verify(text)
    assert info.value.rule == rule, str(info.value)
    assert located(info.value) == (line, col)
    assert isinstance(info.value.loc, TextLoc)


def test_positions_are_not_printed_back() -> None:
    module = parse_module(VADD)
    assert isinstance(module.root_func.nodes[0].loc, TextLoc)
    printed = print_module(module)
    assert "@0:" not in printed and "file 0" not in printed
    assert print_module(parse_module(printed)) == printed


# -- mutated text: located errors only ----------------------------------------------------------


def _mutations(text: str, rng: random.Random, count: int) -> list[str]:
    """Token and line edits: delete, duplicate, swap; odd numbers; unicode; layout changes."""
    lines = text.splitlines(keepends=True)
    words = text.split(" ")
    odd = ["-1", "99999999999999999999999", "1.5", "1e400", "nan", "-0", "%\"é\"", "ü", "\t",
           "\ufeff", ";", "{", "}", "(", ")", "->", "@9:1:1", "[", "]", "<", ">", ":", ",", "\x00"]
    out: list[str] = ["", "; only a comment\n", "\ufeff" + text, text.replace("\n", "\r\n"),
                      text.replace("  ", "\t"), text.replace("[%n]", "[" + "%n + " * 400 + "1]")]
    for _ in range(count):
        kind = rng.randrange(5)
        if kind == 0:
            i = rng.randrange(len(lines))
            out.append("".join(lines[:i] + lines[i + 1:]))
        elif kind == 1:
            i = rng.randrange(len(lines))
            out.append("".join(lines[:i + 1] + lines[i:]))
        elif kind == 2:
            i, j = rng.randrange(len(words)), rng.randrange(len(words))
            swapped = list(words)
            swapped[i], swapped[j] = swapped[j], swapped[i]
            out.append(" ".join(swapped))
        elif kind == 3:
            i = rng.randrange(len(words))
            out.append(" ".join(words[:i] + [rng.choice(odd)] + words[i + 1:]))
        else:
            i = rng.randrange(len(words))
            out.append(" ".join(words[:i] + words[i + 1:]))
    return out


def test_mutated_text_fails_only_with_located_errors() -> None:
    rng = random.Random(20240611)
    for text in _mutations(VADD, rng, 400):
        try:
            load_and_verify(text)
        except HPVMError as error:
            located(error, text)


def test_a_traced_instance_count_too_large_written_out_is_refused() -> None:
    # `m = m + m` sixty times in a graph body: 60 objects, 2**60 operations written out (the
    # verifier used to walk it as a tree, without end)
    module = parse_module(VADD)
    count: DimExpr = DimParam("n")
    for _ in range(60):
        count = DimBin("+", count, count)
    module.root_func.nodes[0].dims = [count]
    with pytest.raises(VerificationError, match="operations written out") as info:
        verify_module(module)
    assert located(info.value) == (4, 7)


def test_a_float_instance_count_names_the_number_not_the_token() -> None:
    with pytest.raises(ParseError) as info:
        parse_module(VADD.replace("[%n]", "[1.5]"))
    assert "malformed number '1.5'" in str(info.value) and "Token(" not in str(info.value)
