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


def _cases() -> list[tuple[Path, str]]:
    """(reproducer, compiled target) pairs whose nodes' hinted targets are all available here."""
    compiled = [t for t in TARGETS if t != "python"] or ["python"]
    return [(path, target) for path in REPRODUCERS for target in compiled
            if all(t in TARGETS for t in load_case(path).params.get("needs", []))]


@pytest.mark.parametrize("path, target", _cases(), ids=lambda v: getattr(v, "stem", v))
def test_reproducer_agrees_with_python(path: Path, target: str) -> None:
    case = load_case(path)
    found, rejection = runner.check(case, [target])
    assert rejection is None, f"the python target rejects {path.name}: {rejection}"
    assert not found, f"{path.name}:\n" + "\n".join(f"[{t}] {p}" for t, ps in found.items() for p in ps)
