"""A time bound for tests of work that could run for ever (a compile that explodes): the test
fails with a TimeoutError instead of hanging the suite. SIGALRM: the main thread, on POSIX."""
from __future__ import annotations

import signal
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def deadline(seconds: int) -> Iterator[None]:
    """Fail, instead of hanging, when the body runs longer than `seconds`."""
    def too_slow(*_: object) -> None:
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, too_slow)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
