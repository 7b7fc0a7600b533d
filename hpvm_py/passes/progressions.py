"""Index sets of the form start + stride * m (0 <= m < count), and which index of [0, n) none of a
few of them holds: passes/coverage.py's question for an Out buffer written by several stores
(`out[2 * i] = re; out[2 * i + 1] = im`)."""
from __future__ import annotations

import math
from dataclasses import dataclass

# the least common multiple of the strides beyond which a union is not worked out (it is walked
# once per residue class)
MAX_PERIOD = 64


class TooIrregular(Exception):
    """The sets' strides have a least common multiple above MAX_PERIOD."""


@dataclass(frozen=True)
class Progression:
    start: int
    stride: int  # at least 1; 1 when count <= 1
    count: int  # 0: the empty set

    @staticmethod
    def of(start: int, stride: int, count: int) -> "Progression":
        return Progression(start, stride if count > 1 else 1, max(count, 0))

    def covers(self, n: int) -> bool:
        """Whether it holds every index of [0, n)."""
        if n <= 0:
            return True
        if self.count == 0 or self.start > 0 or self.start + self.stride * (self.count - 1) < n - 1:
            return False
        return (n == 1 and -self.start % self.stride == 0) or self.stride == 1


def first_missing(sets: list[Progression], n: int) -> int | None:
    """The smallest index of [0, n) that no set holds; None when they hold them all. Raises
    TooIrregular when the strides' period is above MAX_PERIOD."""
    sets = [s for s in sets if s.count > 0]
    period = 1
    for s in sets:
        period = math.lcm(period, s.stride)
        if period > MAX_PERIOD:
            raise TooIrregular
    missing: int | None = None
    for r in range(min(period, max(n, 0))):  # the indices r + period * m, 0 <= m <= last
        last = (n - 1 - r) // period
        spans = [span for s in sets if (span := _in_class(s, r, period)) is not None]
        gap = _first_gap(spans, last)
        if gap is not None and (missing is None or r + period * gap < missing):
            missing = r + period * gap
    return missing


def _in_class(s: Progression, r: int, period: int) -> tuple[int, int] | None:
    """The m with r + period * m in s, as a range [first, last]; None when there are none."""
    if (r - s.start) % s.stride:
        return None
    step = period // s.stride  # s's elements in class r: k0, k0 + step, k0 + 2 * step, ...
    k0 = ((r - s.start) // s.stride) % step
    if k0 >= s.count:
        return None
    first = (s.start + s.stride * k0 - r) // period
    return first, first + (s.count - 1 - k0) // step


def _first_gap(spans: list[tuple[int, int]], last: int) -> int | None:
    """The smallest m of [0, last] in no span; None when they cover it."""
    reach = -1  # [0, reach] is covered
    for lo, hi in sorted(spans):
        if lo > reach + 1:
            break
        reach = max(reach, hi)
    return reach + 1 if reach < last else None
