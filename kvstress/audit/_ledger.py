"""The audit's own account of the calls made through it: leases (tenancies) and a bounded history.

Everything here is plain bookkeeping under one ``threading.Lock``. The lock guards the ledger
only: it is taken around ledger updates and never held across a call into the pool, so a pool
that blocks (or deadlocks) never holds up the ledger, and the ledger never holds up the pool.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from kvstress._violation import Operation

Frame = tuple[str, int, str]  # (file, line, function)


@dataclass(eq=False, slots=True)
class Lease:
    """One tenancy of one block, as the audit sees it: from the acquire that returned the block
    to the release of its last reference.

    Invariants: ``refs >= 0``; the lease has ended exactly when ``refs == 0`` (it never reopens,
    except when a release that ended it is undone because the pool shows it never took effect).
    """

    block_id: int
    number: int  # the block's tenancies so far, this one included
    inner: Any  # the pool's own handle
    holder: str  # who acquired it
    stack: tuple[Frame, ...]  # where it was acquired, innermost first
    refs: int = 1  # references not yet given up: the acquire's and one per retain
    sharers: list[str] = field(default_factory=list)  # who retained it
    marked: bool = False
    ended_by: str | None = None  # who released the last reference
    ended_op: int | None = None  # the index of that release in the history
    releasing: int = 0  # release calls in flight
    retaining: int = 0  # retain calls in flight
    answered_true: int = 0  # releases of this lease that answered True
    answer_lost: bool = False  # a release raised or was cancelled: its answer is unknown
    zero_at_release: bool | None = None  # memory all zero when its last release returned


class AuditLedger:
    """Open leases by block, the latest lease of every block, calls in flight and the history.

    ``begun`` counts calls begun: a reader that saw ``in_flight == 0`` and the same ``begun``
    before and after its reads of the pool knows no call overlapped them (a quiet point).
    """

    def __init__(self, num_blocks: int, history: int) -> None:
        self.num_blocks = num_blocks
        self.lock = threading.Lock()
        self.open: dict[int, Lease] = {}
        self.latest: dict[int, Lease] = {}
        self.in_flight = 0
        self.begun = 0
        self.since_full_check = 0  # calls ended since the last full quiet check
        self._clock0 = time.perf_counter()
        self._next = 0
        self._pending: dict[int, tuple[Any, ...]] = {}
        self._done: deque[tuple[Any, ...]] = deque(maxlen=history)

    def now(self) -> float:
        """Seconds since the audit began (the history's clock)."""
        return time.perf_counter() - self._clock0

    # -- the history (call these with the lock held) -------------------------------------------

    def begin(self, worker: str, name: str, args: dict[str, Any]) -> int:
        """Record an invocation; a call is in flight until ``end``. Returns its index."""
        index = self._next
        self._next += 1
        self._pending[index] = (index, worker, name, args, self.now())
        self.in_flight += 1
        self.begun += 1
        return index

    def end(self, index: int, outcome: str, result: Any = None) -> None:
        """Record the response to invocation ``index``."""
        self._done.append((*self._pending.pop(index), self.now(), outcome, result))
        self.in_flight -= 1
        self.since_full_check += 1

    def snapshot(self) -> tuple[Operation, ...]:
        """The operations kept (the most recent ones) and those in flight, in invocation order."""
        with self.lock:
            done = list(self._done)
            pending = list(self._pending.values())
        ops = [Operation(i, w, n, a, s, e, o, r) for i, w, n, a, s, e, o, r in done]
        ops += [Operation(i, w, n, a, s, None, "pending") for i, w, n, a, s in pending]
        return tuple(sorted(ops, key=lambda op: op.index))

    # -- leases (call these with the lock held) ------------------------------------------------

    def take(
        self, block_id: int, inner: Any, holder: str, stack: tuple[Frame, ...]
    ) -> tuple[Lease, Lease | None, Lease | None]:
        """Open a lease for a block acquire returned: (the new lease, the open lease it clashes
        with if the block is held, the block's previous lease)."""
        clash = self.open.get(block_id)
        previous = self.latest.get(block_id)
        lease = Lease(block_id, 1 if previous is None else previous.number + 1, inner, holder, stack)
        self.latest[block_id] = lease
        if clash is None:
            self.open[block_id] = lease
        return lease, clash, previous

    def give_up(self, lease: Lease, holder: str, index: int) -> bool:
        """A release was called: one reference less. True when it was the lease's last."""
        lease.refs -= 1
        lease.releasing += 1
        if lease.refs > 0:
            return False
        lease.ended_by, lease.ended_op = holder, index
        if self.open.get(lease.block_id) is lease:
            del self.open[lease.block_id]
        return True

    def undo_give_up(self, lease: Lease) -> None:
        """Take back a ``give_up`` whose release the pool shows never took effect."""
        lease.refs += 1
        if lease.refs == 1 and lease.block_id not in self.open:
            self.open[lease.block_id] = lease
            lease.ended_by = lease.ended_op = None
