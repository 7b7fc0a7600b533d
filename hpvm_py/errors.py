"""Exceptions raised by hpvm-py. Every one is an HPVMError that names the user's file:line."""
from __future__ import annotations

from .support.loc import Loc


class HPVMError(Exception):
    """Base class: a message, the source location it is about, and the language rule broken."""

    def __init__(self, message: str, loc: Loc | None = None, rule: str | None = None):
        super().__init__(message)
        self.message = message
        self.loc = loc
        self.rule = rule

    def __str__(self) -> str:
        head = self.message
        if self.rule:
            head += f" [rule: {self.rule}]"
        if self.loc is None:
            return head
        snippet = self.loc.snippet()
        text = f"{self.loc}: error: {head}"
        return f"{text}\n{snippet}" if snippet else text


class FrontendError(HPVMError):
    """Python source that hpvm-py cannot compile: an unsupported construct or a type error."""


class ParseError(FrontendError):
    """Textual IR (.hpvm) that does not parse."""


class VerificationError(HPVMError):
    """A program that breaks a rule of the HPVM language reference."""


class CompileError(HPVMError):
    """A backend cannot compile a node for the chosen target."""


class HPVMRuntimeError(HPVMError):
    """Base of errors raised while graphs are launched and run."""


class LaunchError(HPVMRuntimeError):
    """Arguments that do not match the graph's parameters, or a launch in the wrong state."""


class ExecutionError(HPVMRuntimeError):
    """A node failed while it ran (out-of-bounds access, a failing stage of a stream)."""


class MemoryTrackingError(HPVMRuntimeError):
    """Misuse of track/untrack/request_memory."""


class StreamError(HPVMRuntimeError):
    """Misuse of push/pop/wait on a streaming launch."""


class HPVMTimeoutError(HPVMRuntimeError, TimeoutError):
    """A blocking wait ran past its timeout."""


class DistributedError(HPVMRuntimeError):
    """Rank setup or collective misuse."""


class InternalError(HPVMError):
    """A bug in hpvm-py itself: please report it with the program that triggered it."""


class HPVMWarning(UserWarning):
    """A program that runs, but perhaps not as its author thinks (a `warnings` category: filter
    it as any other). The message names the user's file:line."""
