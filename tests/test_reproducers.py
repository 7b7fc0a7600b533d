"""Every graph on which tests/differential/runner.py saw a target disagree with the python target
(tests/differential/reproducers/*.json: the source, the seed its inputs come from, the sizes) is
replayed on every target here: a fixed bug stays fixed."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import TARGETS
from differential import runner

REPRODUCERS = sorted((Path(__file__).parent / "differential" / "reproducers").glob("*.json"))


def load_case(path: Path) -> runner.Case:
    record = json.loads(path.read_text())
    return runner.Case(record["category"], record["seed"], record["source"], record["params"])


@pytest.mark.parametrize("path", REPRODUCERS, ids=[p.stem for p in REPRODUCERS])
def test_reproducer_agrees_with_python(path: Path, compiled_target: str) -> None:
    case = load_case(path)
    missing = [t for t in case.params.get("needs", []) if t not in TARGETS]
    if missing:
        pytest.skip(f"its nodes are hinted to {missing}, not available here")
    found, rejection = runner.check(case, [compiled_target])
    assert rejection is None, f"the python target rejects {path.name}: {rejection}"
    assert not found, f"{path.name}:\n" + "\n".join(f"[{t}] {p}" for t, ps in found.items() for p in ps)
