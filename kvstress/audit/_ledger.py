"""The audit's own account of the calls made through it: leases (tenancies) and a bounded history.

Everything here is plain bookkeeping under one ``threading.Lock``. The lock guards the ledger
only: it is taken around ledger updates and never held across a call into the pool, so a pool
that blocks (or deadlocks) never holds up the ledger, and the ledger never holds up the pool.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from types import CodeType
from typing import Any

from kvstress._violation import Operation
from kvstress.controlled._baton import HarnessLock, active_controller

Op = list[Any]  # one operation of the history, completed in place
Stack = tuple[tuple[CodeType, int], ...]  # (code, instruction offset) per frame, innermost first


class Lease:
    """One tenancy of one block, as the audit sees it: from the acquire that returned the block
    to the release of its last reference.

    Invariants: ``refs >= 0``; the lease has ended exactly when ``refs == 0`` (it never reopens,
    except when a release that ended it is undone because the pool shows it never took effect).
    A plain class with slots, not a dataclass: one is made per acquire, on the hot path.
    """

    __slots__ = (
        "answer_lost",
        "answered_true",
        "block_id",
        "ended_by",
        "ended_op",
        "holder",
        "inner",
        "marked",
        "number",
        "refs",
        "released_by",
        "releasing",
        "retain_raced",
        "retaining",
        "sharers",
        "stack",
        "view",
        "zero_at_release",
    )

    def __init__(self, block_id: int, number: int, inner: Any, holder: str, stack: Stack) -> None:
        self.block_id = block_id
        self.number = number  # the block's tenancies so far, this one included
        self.inner = inner  # the pool's own handle
        self.holder = holder  # who acquired it
        self.stack = stack  # where it was acquired
        self.refs = 1  # references not yet given up: the acquire's and one per retain
        self.sharers: tuple[str, ...] = ()  # who retained it
        self.released_by: tuple[str, ...] = ()  # who gave up a reference that was not the last
        self.marked = False
        self.ended_by: str | None = None  # who released the last reference
        self.ended_op: int | None = None  # the index of that release in the history
        self.releasing = 0  # release calls in flight
        self.retaining = 0  # retain calls in flight (begun while the lease was open)
        self.retain_raced = False  # a retain reached the pool as the last reference went
        self.answered_true = 0  # releases of this lease that answered True
        self.answer_lost = False  # a release raised or was cancelled: its answer is unknown
        self.zero_at_release: bool | None = None  # memory all zero when its last release returned
        self.view: Any = None  # the memory as acquire returned it, held until the last release


class AuditLedger:
    """Open leases by block, the latest lease of every block, calls in flight and the history.

    ``begun`` counts calls begun: a reader that saw ``in_flight == 0`` and the same ``begun``
    before and after its reads of the pool knows no call overlapped them (a quiet point).
    """

    def __init__(self, num_blocks: int, history: int) -> None:
        self.num_blocks = num_blocks
        # Inside a controlled threads run (an explored test), kvstress's lock: no switch while
        # it is held. Elsewhere a plain lock, at a plain lock's cost on every audited call.
        self.lock: Any = HarnessLock() if active_controller() is not None else threading.Lock()
        self.open: dict[int, Lease] = {}
        self.latest: dict[int, Lease] = {}
        # Blocks not in the free queue when the audit began (held by code that ran before it,
        # a prefix cache warmed at startup): held outside the audit until the queue has them
        # again or the pool hands them out through the audit.
        self.outside: set[int] = set()
        self.in_flight = 0
        self.begun = 0
        self.since_full_check = 0  # calls ended since the last full quiet check
        self._clock0 = time.perf_counter()
        # The latest operations, each [index, worker, name, args, start, end, outcome, result]:
        # appended as it begins, completed in place as it ends (so one in flight shows too).
        self._ops: deque[Op] = deque(maxlen=history)

    # -- the history (call these with the lock held) -------------------------------------------

    def begin(self, worker: str, name: str, args: dict[str, Any]) -> Op:
        """Record an invocation; a call is in flight until ``end``. Returns its record."""
        op = [self.begun, worker, name, args, time.perf_counter(), None, "pending", None]
        self._ops.append(op)
        self.in_flight += 1
        self.begun += 1
        return op

    def end(self, op: Op, outcome: str, result: Any = None) -> None:
        """Record the response to the invocation ``op``."""
        op[5], op[6], op[7] = time.perf_counter(), outcome, result
        self.in_flight -= 1
        self.since_full_check += 1

    def snapshot(self) -> tuple[Operation, ...]:
        """The operations kept (the latest ones, those in flight included), in invocation order;
        times in seconds since the audit began."""
        with self.lock:
            ops = [tuple(op) for op in self._ops]
        t0 = self._clock0
        return tuple(
            Operation(i, w, n, a, s - t0, None if e is None else e - t0, o, r)
            for i, w, n, a, s, e, o, r in ops
        )

    # -- leases (call these with the lock held) ------------------------------------------------

    def take(
        self, block_id: int, inner: Any, holder: str, stack: Stack
    ) -> tuple[Lease, Lease | None, Lease | None]:
        """Open a lease for a block acquire returned: (the new lease, the open lease it clashes
        with if the block is held, the block's previous lease)."""
        clash = self.open.get(block_id)
        previous = self.latest.get(block_id)
        self.outside.discard(block_id)
        lease = Lease(block_id, 1 if previous is None else previous.number + 1, inner, holder, stack)
        self.latest[block_id] = lease
        if clash is None:
            self.open[block_id] = lease
        return lease, clash, previous

    def give_up(self, lease: Lease, holder: str, op: Op) -> bool:
        """A release was called: one reference less. True when it was the lease's last."""
        lease.refs -= 1
        lease.releasing += 1
        if lease.refs > 0:
            lease.released_by += (holder,)
            return False
        lease.ended_by, lease.ended_op = holder, op[0]
        if self.open.get(lease.block_id) is lease:
            del self.open[lease.block_id]
        return True

    def undo_give_up(self, lease: Lease) -> None:
        """Take back a ``give_up`` whose release the pool shows never took effect."""
        lease.refs += 1
        if lease.refs > 1 and lease.released_by:
            lease.released_by = lease.released_by[:-1]
        if lease.refs == 1 and lease.block_id not in self.open:
            self.open[lease.block_id] = lease
            lease.ended_by = lease.ended_op = None
