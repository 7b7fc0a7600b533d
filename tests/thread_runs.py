"""Running a test's body on a thread of its own, with a time limit that turns a hang into a
failure (the test's own thread never blocks past it)."""
from __future__ import annotations

import threading
from typing import Any, Callable


def run_in_thread(body: Callable[..., Any], *args: Any, seconds: float, what: str) -> None:
    """Run body(*args) on a new thread and wait for it at most `seconds`: still running then is
    an assertion error saying `what` hung; its exception is raised again here."""
    failures: list[BaseException] = []

    def run() -> None:
        try:
            body(*args)
        except BaseException as exc:  # noqa: BLE001 - raised again in the test's thread
            failures.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"{what} hung"
    if failures:
        raise failures[0]
