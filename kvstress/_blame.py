"""Whose error it is: the pool's (a ``crash`` finding) or kvstress's own (never a finding).

An exception that escapes an execution, or the fuzzing child, is a ``crash`` of the pool only
if the pool's code is on its way: some frame of it, of an exception it was raised from, or of
one in a group, lies in the pool's source files or anywhere outside kvstress and the Python
installation (the user's code, wherever it lives). One raised and passed on by kvstress, the
standard library and installed packages alone is kvstress's failure: reported as such, with
its traceback, and never against the pool.
"""

from __future__ import annotations

import asyncio
import os
import sysconfig
import traceback
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from kvstress._format import error_text
from kvstress._violation import InvariantViolation

_KVSTRESS = str(Path(__file__).resolve().parent) + os.sep
_INSTALLED = tuple(
    sorted(
        {
            str(Path(path).resolve()) + os.sep
            for key in ("stdlib", "platstdlib", "purelib", "platlib")
            if (path := sysconfig.get_paths().get(key))
        }
    )
)


class InternalError(RuntimeError):
    """kvstress failed in its own code while checking a pool: no finding against the pool.

    Raised from the original error (``__cause__``), whose traceback says where. A bug in
    kvstress: report it with that traceback.
    """


def _pool_side(filename: str, pool_files: Collection[str]) -> bool:
    if filename in pool_files:
        return True
    if filename.startswith("<"):  # frozen modules, exec'd strings: not the user's files
        return False
    path = str(Path(filename).resolve())
    return not path.startswith(_KVSTRESS) and not path.startswith(_INSTALLED)


def raised_in_kvstress(error: BaseException, pool_files: Collection[str] = ()) -> bool:
    """Whether ``error`` came from kvstress's own code, with no frame of the pool's on its way
    (see the module). An error with no frames of kvstress at all is not kvstress's."""
    seen: set[int] = set()
    pending: list[BaseException | None] = [error]
    ours = False
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        for frame in traceback.extract_tb(current.__traceback__):
            if _pool_side(frame.filename, pool_files):
                return False
            ours = ours or str(Path(frame.filename).resolve()).startswith(_KVSTRESS)
        pending += [current.__cause__, current.__context__]
        if isinstance(current, BaseExceptionGroup):
            pending += current.exceptions
    return ours


def describe(error: BaseException) -> str:
    """``KeyError: 3 (at _ledger.py:120)``: the error and the line that raised it."""
    where = traceback.extract_tb(error.__traceback__)
    last = f" (at {Path(where[-1].filename).name}:{where[-1].lineno})" if where else ""
    return " ".join(f"{type(error).__name__}: {error}{last}".splitlines())


def internal_error(error: BaseException) -> InternalError:
    """The InternalError to raise from ``error`` (``raise internal_error(e) from e``)."""
    return InternalError(
        f"kvstress failed in its own code, not the pool's: {describe(error)}; no finding against "
        "the pool (a bug in kvstress: please report it with this traceback)"
    )


MAX_LOOP_ERRORS = 3
"""What the event loop caught in a run that its finding names, at most."""

NEVER_RETRIEVED = "Task exception was never retrieved"
"""asyncio's message for a task that ended by raising and was freed with nothing having read its
exception (``Task.__del__`` hands it to the loop's exception handler)."""

UNRETRIEVED_NOTE = (
    f"asyncio logs it as {NEVER_RETRIEVED!r}: nothing awaited the task to its end; one awaited "
    "through asyncio.shield runs on alone once its awaiter is cancelled, and what it raises then "
    "is read by no one"
)


def loop_error_line(context: dict[str, Any], pool_files: Collection[str] = ()) -> str | None:
    """What an event loop's exception handler was given, in one line, if it is the pool's: an
    exception (not a cancellation, not one kvstress's own code alone raised). A task nobody
    retrieved is named with its coroutine: the exception alone did not say whose it was."""
    error = context.get("exception")
    if not isinstance(error, Exception) or (pool_files and raised_in_kvstress(error, pool_files)):
        return None
    task = context.get("future")
    if context.get("message") == NEVER_RETRIEVED and isinstance(task, asyncio.Task):
        coroutine = getattr(task.get_coro(), "__qualname__", None)
        named = f"{task.get_name()!r} ({coroutine})" if coroutine else repr(task.get_name())
        return f"{named} with {error_text(error)}, never retrieved"
    return error_text(error)


def loop_errors_violation(lines: Sequence[str], history: Any = ()) -> InvariantViolation:
    """A ``crash``: a task or callback of the pool's own raised, and the loop only logged it."""
    note = f" ({UNRETRIEVED_NOTE})" if any(line.endswith(", never retrieved") for line in lines) else ""
    return InvariantViolation(
        "crash",
        "a task or callback of the pool's own raised, and the event loop caught it: "
        + "; ".join(lines)
        + note,
        history=history,
    )
