"""What an audit shows when it finds something: where a block was acquired, leaks, the block table."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from types import CodeType, FrameType
from typing import Any

from kvstress._violation import BlockRecord
from kvstress.audit._ledger import Lease, Stack
from kvstress.harness._runner import run_on_a_thread
from kvstress.pool._state import BlockState


def capture_stack(limit: int, skip: int) -> Stack:
    """The caller's stack, innermost first, at most ``limit`` frames, the innermost ``skip``
    (the audit's own calls) left out.

    Frames are kept as (code, instruction offset): no frame is kept alive, and the line
    number (which Python works out from the offset each time it is asked) and the names are
    only looked up when a leak is shown. A fraction of a microsecond a frame.
    """
    try:
        frame: FrameType | None = sys._getframe(skip + 1)  # CPython's public frame accessor
    except ValueError:  # fewer than skip + 1 frames: nothing of the caller's to keep
        return ()
    frames: list[tuple[CodeType, int]] = []
    append = frames.append
    while frame is not None and limit:
        append((frame.f_code, frame.f_lasti))
        frame = frame.f_back
        limit -= 1
    return tuple(frames)


_MACHINERY = ("kvstress.controlled", "asyncio", "pluggy", "_pytest", "pytest_asyncio")
"""Packages whose frames sit between a thread's or task's start and the user's code: an
explored run's controlled threads (the baton, the cooperative ``Thread`` and executor), the
event loop that steps a task, and pytest running a test. Their frames are left out of a shown
stack (those of a package not imported are not there to leave out)."""


def _machinery() -> tuple[str, ...]:
    found = []
    for name in _MACHINERY:
        module = sys.modules.get(name)
        where = getattr(module, "__file__", None)
        if where:
            found.append(os.path.dirname(where) + os.sep)
    return tuple(found)


def format_stack(stack: Stack, indent: str = "    ") -> str:
    """The stack as traceback lines, outermost first; frames of the machinery that ran the
    caller's thread or task (``_MACHINERY``) left out."""
    if not stack:
        return f"{indent}(no stack captured)"
    machinery = _machinery()
    return (
        "\n".join(
            f'{indent}File "{code.co_filename}", line {_line(code, offset)}, in {code.co_name}'
            for code, offset in reversed(stack)
            if not code.co_filename.startswith(machinery)
        )
        or f"{indent}(only event-loop and test-runner frames were captured)"
    )


def _line(code: CodeType, offset: int) -> int:
    """The source line of the instruction at ``offset`` (as ``frame.f_lineno`` gives it)."""
    for start, end, line in code.co_lines():
        if start <= offset < end and line is not None:
            return line
    return code.co_firstlineno


def holders(lease: Lease) -> tuple[str, ...]:
    """Who took references to the lease: its acquirer, then each retainer."""
    return (lease.holder, *lease.sharers)


def still_holding(lease: Lease) -> tuple[str, ...]:
    """Who of those that took references to an open lease has not given one back: each release
    that was not the last takes its caller off once (a reference handed to another task or
    thread and released there takes the first taker off: who kept which is not seen)."""
    left = list(holders(lease))
    for name in lease.released_by:
        left.remove(name if name in left else left[0])
    return tuple(left)


def describe_lease(lease: Lease) -> str:
    """``block 3 (acquired by w1, retained by w2, released by w1; 1 reference left)``."""
    shared = f", retained by {', '.join(lease.sharers)}" if lease.sharers else ""
    gone = f", released by {', '.join(lease.released_by)}" if lease.released_by else ""
    left = f"{lease.refs} reference{'s' if lease.refs != 1 else ''} left"
    return f"block {lease.block_id} (acquired by {lease.holder}{shared}{gone}; {left})"


def leak_message(leases: list[Lease]) -> str:
    """One line naming every leaked block, then the stack of each one's acquire."""
    leases = sorted(leases, key=lambda lease: lease.block_id)
    head = (
        f"{len(leases)} block(s) never came back: {', '.join(describe_lease(x) for x in leases)}. "
        "Their holders did not release every reference (a caller bug; a release cancelled or "
        "failed before it took effect gives nothing back)"
    )
    stacks = [f"  block {x.block_id} acquired by {x.holder} at:\n{format_stack(x.stack)}" for x in leases]
    return "\n".join([head, *stacks])


def block_table(
    pool: Any, num_blocks: int, handles: Mapping[int, Any], held: Mapping[int, Lease]
) -> tuple[BlockRecord, ...]:
    """Every block: state and refcount through the last handle seen, who holds it, queued or not.

    It is read on a throwaway daemon thread with a bound: a table is made when something already
    went wrong, so it must never fail or hang; what cannot be read shows as unknown.
    """

    def read() -> tuple[set[int] | None, dict[int, tuple[str, int | None]]]:
        try:
            queued: set[int] | None = set(pool.free_ids())
        except Exception:  # a table must never fail the violation it belongs to
            queued = None
        seen = {}
        for block_id, handle in handles.items():
            try:
                seen[block_id] = (_state_name(handle.state), _int_or_none(handle.refcount))
            except Exception:
                seen[block_id] = ("unknown", None)
        return queued, seen

    try:
        queued, seen = run_on_a_thread(read, 1.0, name="kvstress-audit-table")
    except Exception:
        queued, seen = None, {}
    records = []
    for block_id in range(num_blocks):
        state, refcount = seen.get(block_id, ("unseen", None))
        lease = held.get(block_id)
        records.append(
            BlockRecord(
                block_id,
                state,
                refcount,
                () if lease is None else still_holding(lease),
                None if queued is None else block_id in queued,
            )
        )
    return tuple(records)


def state_of(raw: object) -> BlockState | None:
    """A state read through a handle, as a BlockState (None when it is not one)."""
    try:
        return BlockState(int(raw))  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return None


def _state_name(raw: object) -> str:
    state = state_of(raw)
    return repr(raw) if state is None else state.name


def _int_or_none(raw: object) -> int | None:
    return raw if isinstance(raw, int) else None
