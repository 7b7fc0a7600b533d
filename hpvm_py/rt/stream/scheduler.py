"""The one interface of the ways a stream's stages are run: a thread per stage and one scheduler
thread (stages.py), whole items of a stream of Triton leaves (items.py). streaming.SCHEDULERS
lists them in order of preference; the first whose fit() takes the stream runs it."""
from __future__ import annotations

import abc
import threading
from typing import Any

THREAD_PREFIX = "hpvm-stage-"  # a runner thread's name: the prefix, then its stages' names


class StreamScheduler(abc.ABC):
    """Runs the stages (stages.py's `Stage`, one per child of the root) of one stream until its
    end, a failed item or cleanup(), on threads of its own (started by the stream's handle)."""

    stages: list[Any]

    @classmethod
    @abc.abstractmethod
    def fit(cls, stages: list[Any]) -> StreamScheduler | None:
        """A scheduler of this kind for the stages, or None when this kind cannot run them."""

    @abc.abstractmethod
    def threads(self) -> list[threading.Thread]:
        """The threads that run the stages (made, not started), each named THREAD_PREFIX and the
        names of the stages it runs."""

    @abc.abstractmethod
    def busy(self) -> list[str]:
        """The names of the stages at work now (items in flight), for a timed-out wait()."""

    def help(self) -> bool:
        """Called by the host thread's push() and pop(): do now, on that thread, what a scheduler
        thread would; True when it did (the scheduler needs no wake-up), False by default."""
        return False

    def one_thread(self) -> list[threading.Thread]:
        """`threads()` of a scheduler that runs every stage from one thread (calling itself)."""
        names = ",".join(stage.name for stage in self.stages)
        return [threading.Thread(target=self, daemon=True, name=f"{THREAD_PREFIX}{names}")]
