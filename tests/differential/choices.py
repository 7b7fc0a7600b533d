"""Where a generator's random decisions come from: hypothesis (pytest, which shrinks failures) or a
seeded `random.Random` (tests/differential/runner.py, which must run on the GPU machines without
hypothesis and rebuild any program from its seed alone)."""
from __future__ import annotations

import random
from typing import Any, Callable, Protocol, Sequence, TypeVar

T = TypeVar("T")


class Choices(Protocol):
    def pick(self, options: Sequence[T]) -> T: ...

    def integer(self, lo: int, hi: int) -> int:
        """An integer in [lo, hi], both included."""
        ...

    def flag(self) -> bool: ...


class RandomChoices:
    def __init__(self, seed: int):
        self.random = random.Random(seed)

    def pick(self, options: Sequence[T]) -> T:
        return self.random.choice(list(options))

    def integer(self, lo: int, hi: int) -> int:
        return self.random.randint(lo, hi)

    def flag(self) -> bool:
        return self.random.random() < 0.5


class HypothesisChoices:
    """Draws through a `@st.composite` function's `draw`, so that hypothesis can shrink."""

    def __init__(self, draw: Callable[[Any], Any]):
        from hypothesis import strategies as st  # only here: the runner works without hypothesis

        self.draw = draw
        self.st = st

    def pick(self, options: Sequence[T]) -> T:
        return self.draw(self.st.sampled_from(list(options)))

    def integer(self, lo: int, hi: int) -> int:
        return self.draw(self.st.integers(lo, hi))

    def flag(self) -> bool:
        return self.draw(self.st.booleans())
