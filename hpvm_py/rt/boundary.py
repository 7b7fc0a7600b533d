"""The error boundary of every public function: a user mistake arrives as an HPVMError whose
traceback starts at the user's call (not deep inside hpvm-py) and that names a file:line (the
call's, when the error has no source of its own), and an unexpected internal failure arrives as
an InternalError rather than a bare Python exception."""
from __future__ import annotations

import bdb
import functools
import inspect
from typing import Any, Callable, TypeVar

from ..errors import HPVMError, InternalError, LaunchError
from ..frontend.callsite import caller_loc
from ..support import settings

F = TypeVar("F", bound=Callable[..., Any])


def api_boundary(fn: F) -> F:
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except HPVMError as exc:
            error: HPVMError = exc
            if error.loc is None:  # (raised where no source is known: a setting, a device) the
                error.loc = caller_loc()  # user's call is the line to show
        except TypeError as exc:
            try:  # a call that does not fit the signature is the user's mistake
                signature.bind(*args, **kwargs)
            except TypeError as bad_call:
                error = LaunchError(f"hpvm.{fn.__name__}(): {bad_call}", caller_loc())
            else:
                error = _internal(exc)
        except (KeyboardInterrupt, bdb.BdbQuit, SystemExit):
            raise
        except Exception as exc:  # noqa: BLE001 - turned into a reportable error
            error = _internal(exc)
        raise error.with_traceback(None)

    return wrapper  # type: ignore[return-value]


def _internal(exc: BaseException) -> InternalError:
    error = InternalError(f"internal error in hpvm-py: {type(exc).__name__}: {exc} (please report "
                          "this with the program that triggered it; set HPVM_DEBUG=1 for the "
                          "internal traceback)", caller_loc())
    if settings.DEBUG.on():
        raise error from exc
    return error
