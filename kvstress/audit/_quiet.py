"""The checks at quiet points: moments the audit knows no call is in flight through it.

At every quiet point the pool's free counter is compared with the ledger (O(1)): with no call in
flight, ``free_count()`` must equal the blocks that nobody holds. Every ``queue_check_every``
calls, and whenever that comparison fails, the full check reads the free queue too (O(blocks)):
queue against counter, queue against the held blocks, states and refcounts, as the harness's
quiet check does. A released block not yet queued but RELEASING or FREE is taken to be on its
way back (a pool may finish a release after ``release`` returned): the audit does not wait for
it, so a block that never arrives is the harness's to find (its quiet check waits).

A quiet point is confirmed as a seqlock read is: the reads of the pool are kept only if no call
began between the moment the audit saw nothing in flight and the end of the reads, so no pool
call is ever made with the ledger lock held.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from kvstress import checkers
from kvstress._format import error_text
from kvstress._violation import InvariantViolation
from kvstress.audit._report import state_of, still_holding
from kvstress.pool._state import HELD_STATES, BlockState

if TYPE_CHECKING:
    from kvstress.audit._core import AuditCore

Due = tuple[int, int, bool] | None  # (calls begun, blocks held, full check due), or not quiet


class Held(NamedTuple):
    """A held lease as it was at a quiet point."""

    holder: str
    holders: tuple[str, ...]
    refs: int
    marked: bool


class QuietCheck:
    """When and how the quiet checks run for one audit."""

    def __init__(self, audit: AuditCore, every: int | None) -> None:
        if every is not None and (not isinstance(every, int) or isinstance(every, bool) or every < 1):
            raise ValueError(f"queue_check_every must be a positive int or None, got {every!r}")
        self._audit = audit
        # The full check reads every block, O(blocks): spread over 4 * num_blocks calls by
        # default, its share of each call stays the same whatever the pool's size.
        self.every = every if every is not None else 4 * audit.num_blocks

    def due(self) -> Due:
        """Called as a call ends, with the ledger lock held: what to check, if nothing is in flight."""
        ledger = self._audit._ledger
        if ledger.in_flight or self._audit.cut_short is not None:
            return None
        return ledger.begun, len(ledger.open) + len(ledger.outside), ledger.since_full_check >= self.every

    def run(self, due: Due) -> None:
        """The O(1) counter check, and the full one when it is due or the counter disagrees."""
        __tracebackhide__ = True
        if due is None:
            return
        begun, held, full = due
        if not full and self._audit.pool.free_count() == self._audit.num_blocks - held:
            return
        self.full(begun)

    def full(self, begun: int) -> None:
        """Queue, counter, conservation, states and refcounts, if no call began since ``begun``."""
        __tracebackhide__ = True
        audit, ledger = self._audit, self._audit._ledger
        with ledger.lock:
            if ledger.begun != begun or ledger.in_flight:
                return
            ledger.since_full_check = 0
            # Copies, not the leases: calls that begin after the reads below change the leases.
            held = {
                b: Held(lease.holder, still_holding(lease), lease.refs, lease.marked)
                for b, lease in ledger.open.items()
            }
            handles = {b: lease.inner for b, lease in ledger.latest.items()}
            outside = set(ledger.outside)
        try:
            count, ids, states, refcounts = self._read(handles, held)
        except Exception as error:
            raise audit.violation(
                "crash", f"reading the pool at a quiet point raised {error_text(error)}"
            ) from error
        with ledger.lock:
            if ledger.begun != begun:
                return  # a call overlapped the reads: this was no quiet point after all
            outside -= set(ids)  # given back outside the audit, by whoever held them before it
            ledger.outside &= outside
        try:
            _check(audit.num_blocks, count, ids, states, refcounts, held, outside)
        except InvariantViolation as found:
            raise audit.violation(
                found.invariant, f"{found.message} (a pool bug, seen at a quiet point)"
            ) from None

    def _read(
        self, handles: dict[int, Any], held: dict[int, Held]
    ) -> tuple[int, list[int], dict[int, BlockState], dict[int, Any]]:
        pool = self._audit.pool
        # The queue before the counter: a reset worker that offers a block between the two
        # reads (in one lock section, as a correct pool does) leaves it out of ``ids``, on its
        # way back, and the counter is then not judged (_check).
        ids = list(pool.free_ids())
        count = pool.free_count()
        states = {}
        for block_id, handle in handles.items():
            raw = handle.state
            state = raw if raw.__class__ is BlockState else state_of(raw)  # most pools' own type
            if state is not None:
                states[block_id] = state
        refcounts = {block_id: handles[block_id].refcount for block_id in held}
        return count, ids, states, refcounts


def _check(
    num_blocks: int,
    count: int,
    ids: list[int],
    states: dict[int, BlockState],
    refcounts: dict[int, Any],
    held: dict[int, Held],
    outside: frozenset[int] | set[int] = frozenset(),
) -> None:
    checkers.check_queue(ids, num_blocks, states)
    checkers.check_held_not_queued(ids, {b: lease.holders for b, lease in held.items()})
    # A block nobody holds, not queued, and RELEASING or FREE is on its way back: a pool may
    # finish a release after it returned (a worker thread, a task, a stream callback), and the
    # audit cannot wait for it inside the caller's call. Only a block left in a held state
    # without a holder is lost here; the harness finds the rest. A block held since before the
    # audit began is held (``outside``).
    away = checkers.on_its_way_back(num_blocks, set(held) | outside, ids)
    in_transit = {b for b in away if b in states and states[b] not in HELD_STATES}
    checkers.check_conservation(num_blocks, set(held) | outside | in_transit, ids)
    # A block whose state was not read counts as FREE: only the states read can say otherwise
    # (a block held since before the audit, with no handle through it, is not FREE).
    not_free = sum(1 for b, state in states.items() if state is not BlockState.FREE and 0 <= b < num_blocks)
    not_free += sum(1 for b in outside if b not in states)
    if not in_transit:  # a pool still finishing a release is not at rest: its counter may lead
        checkers.check_counter(count, ids, num_blocks - not_free)
    for block_id, lease in held.items():
        expected = BlockState.IN_USE if lease.marked else BlockState.ACQUIRED
        if block_id in states:
            checkers.check_state(block_id, states[block_id], expected, f"{lease.holder} took it")
        checkers.check_refcount(block_id, refcounts[block_id], lease.refs, "the last operation")
