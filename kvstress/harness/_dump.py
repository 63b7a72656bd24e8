"""A dump of every block, as the harness sees it through the protocol and its ledger.

A dump is taken when something already went wrong, so it must never fail or hang: each read
runs on a throwaway daemon thread with a bound, and what cannot be read is shown as unknown.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from kvstress._violation import BlockRecord
from kvstress.harness._ledger import Ledger, Tenancy
from kvstress.harness._runner import run_on_a_thread
from kvstress.pool._state import BlockState

T = TypeVar("T")


def dump_blocks(pool: Any, num_blocks: int, ledger: Ledger) -> tuple[BlockRecord, ...]:
    """Every block: state and refcount through the last handle seen, holders, queued or not,
    and the state and refcount the ledger expects."""
    queued = _bounded(lambda: set(pool.free_ids()), 1.0)
    records = []
    for block_id in range(num_blocks):
        handle = ledger.handles.get(block_id)
        state, refcount = "unseen", None
        if handle is not None:
            raw = _bounded(lambda h=handle: (h.state, h.refcount), 0.5)  # type: ignore[misc]
            if raw is not None:
                state = _state_name(raw[0])
                refcount = raw[1] if isinstance(raw[1], int) else None
        tenancy = ledger.open.get(block_id)
        records.append(
            BlockRecord(
                block_id,
                state,
                refcount,
                ledger.holders_of(block_id),
                None if queued is None else block_id in queued,
                _expected_state(tenancy),
                0 if tenancy is None else tenancy.total_refs,
            )
        )
    return tuple(records)


def _expected_state(tenancy: Tenancy | None) -> str:
    """What the ledger says the block should be: FREE, ACQUIRED, or IN_USE once marked."""
    if tenancy is None:
        return BlockState.FREE.name
    return (BlockState.IN_USE if tenancy.marked else BlockState.ACQUIRED).name


def _state_name(raw: object) -> str:
    try:
        return BlockState(int(raw)).name  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return repr(raw)


def _bounded(fn: Callable[[], T], bound: float) -> T | None:
    """``fn()`` on a throwaway daemon thread; None if it raises or overruns ``bound``."""
    try:
        return run_on_a_thread(fn, bound, name="kvstress-dump")
    except Exception:  # a dump must never fail the report it belongs to
        return None
