"""Timeouts of the calls that wait for a stream's threads (push, pop, wait, cleanup): a user's
timeout checked and turned into a deadline, and threads joined until one."""
from __future__ import annotations

import math
import numbers
import threading
import time

from ...errors import LaunchError
from ...frontend.callsite import caller_loc


def deadline_after(timeout: float | None) -> float | None:
    """When a wait of `timeout` seconds (push, pop, wait, cleanup) ends; None: it never does.
    A timeout longer than a thread can wait (threading.TIMEOUT_MAX, about 292 years; inf too) waits
    for ever as None does: its remainder went on to Lock.acquire or Condition.wait, whose
    OverflowError surfaced as an internal error. NaN means no length of time: refused. The
    deadline is a float: a NumPy float32 or float16 kept its type through the sum, which
    Lock.acquire and Condition.wait refuse (an internal TypeError), and a negative int beyond a
    float's range failed in the sum (an internal OverflowError)."""
    check_timeout(timeout)
    if timeout is None:
        return None
    try:
        seconds = float(timeout)
    except OverflowError:  # a whole number beyond a float's range: for ever, or no time at all
        seconds = math.inf if timeout > 0 else -math.inf
    if seconds >= threading.TIMEOUT_MAX:
        return None
    return time.monotonic() + seconds


def check_timeout(timeout: float | None) -> None:
    """A LaunchError at the user's call for a timeout that means no length of time: NaN (it
    compared false with every clock reading, so a wait timed out at once saying "within nan s"),
    or not a number at all (a string failed inside the comparisons as an internal error)."""
    if timeout is None:
        return
    if not isinstance(timeout, (int, float)) and not isinstance(timeout, numbers.Real):
        raise LaunchError(f"timeout={timeout!r}: give the seconds to wait at most, or None to wait "
                          "for ever", caller_loc())
    if timeout != timeout:
        raise LaunchError("timeout=nan: give the seconds to wait at most, or None to wait for ever",
                          caller_loc())


def join_threads(threads: list[threading.Thread], deadline: float | None) -> list[threading.Thread]:
    """Join each thread until the deadline; returns those still running."""
    for t in threads:
        t.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
    return [t for t in threads if t.is_alive()]
