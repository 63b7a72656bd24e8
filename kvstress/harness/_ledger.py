"""The harness's own account of what it did: who holds which block, with how many references.

A pool is judged against this ledger, never against its own bookkeeping. To stay free of false
alarms under concurrency, a holder gives up a reference when it *calls* release (the pool may
hand the block to someone else before that call returns), and takes one when acquire *returns*.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from kvstress.controlled._baton import HarnessLock


@dataclass
class Tenancy:
    """One stretch of a block's life between an acquire and the release of its last reference.

    Invariant: ``refs`` holds only positive counts; the tenancy ends when it is empty.
    """

    block_id: int
    number: int
    refs: Counter[str] = field(default_factory=Counter)
    marked: bool = False
    canary: float | None = None

    @property
    def holders(self) -> tuple[str, ...]:
        """Who holds a reference, in a stable order."""
        return tuple(sorted(self.refs))

    @property
    def total_refs(self) -> int:
        """References held in all."""
        return sum(self.refs.values())


class Ledger:
    """Open tenancies by block, the last handle seen for each id, and counts of ended tenancies.

    Thread-safe: batch workers update it from several threads.
    """

    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        self.lock = HarnessLock(reentrant=True)
        self.open: dict[int, Tenancy] = {}
        self.handles: dict[int, object] = {}
        # The handle of each block's tenancy before its latest, where the pool gave that one a
        # handle of its own (a stale handle to try while the block is held again).
        self.previous: dict[int, object] = {}
        # The first handle the pool gave each block: a tenancy counter that wraps (8 bits) lets
        # a handle of 256 tenancies ago pass for the current one (the contract's long history).
        self.first: dict[int, object] = {}
        self.ended: Counter[int] = Counter()  # tenancies whose last reference was released
        self.returned: Counter[int] = Counter()  # releases that answered True
        # Last references dropped by a release_many that gave no per-block answer (the protocol
        # asks none): each may be a True the accounting lacks.
        self.unanswered: Counter[int] = Counter()
        self._tenancies: Counter[int] = Counter()
        self._canaries = 0
        self.releasing: Counter[int] = Counter()  # release calls in flight, by block
        # Cancelled releases whose effect waits on the other releases of the block in flight:
        # (holder, its tenancy, the release's history index), by block.
        self.doubtful: dict[int, list[tuple[str, Tenancy, int]]] = {}

    def take(self, holder: str, block_id: int, handle: object) -> Tenancy | None:
        """Record an acquire's return. Returns the tenancy it collides with, if the block is held.

        The handle this replaces as the block's previous one is let go only after the lock: its
        last reference may be this ledger's, and a pool's finalizer on it (a leak guard that
        gives the block back when a handle is dropped) takes the pool's lock, which a thread
        parked on the baton may hold; under the ledger's lock nobody else could run, and the
        process deadlocked (a blind user's correct pool)."""
        dropped = None
        with self.lock:
            clash = self.open.get(block_id)
            earlier = self.handles.get(block_id)
            if earlier is not None and earlier is not handle:
                dropped = self.previous.get(block_id)
                self.previous[block_id] = earlier
            self.handles[block_id] = handle
            self.first.setdefault(block_id, handle)
            if clash is None:
                self._tenancies[block_id] += 1
                tenancy = Tenancy(block_id, self._tenancies[block_id])
                tenancy.refs[holder] = 1
                self.open[block_id] = tenancy
        del dropped  # here, the lock released (see above)
        return clash

    def share(self, block_id: int, to_holder: str) -> Tenancy:
        """Record a retain: ``to_holder`` gets one more reference."""
        with self.lock:
            tenancy = self.open[block_id]
            tenancy.refs[to_holder] += 1
            return tenancy

    def answered(self) -> Counter[int]:
        """``returned``, with each ``unanswered`` last reference counted as the True it may have
        been, where a True is missing (a True too many is still one too many)."""
        counted = Counter(self.returned)
        for block_id, count in self.unanswered.items():
            counted[block_id] += min(count, max(0, self.ended[block_id] - counted[block_id]))
        return counted

    def give_up(self, holder: str, block_id: int) -> bool:
        """Record a release call; True when it drops the tenancy's last reference."""
        with self.lock:
            tenancy = self.open[block_id]
            tenancy.refs[holder] -= 1
            if tenancy.refs[holder] <= 0:
                del tenancy.refs[holder]
            if tenancy.refs:
                return False
            del self.open[block_id]
            self.ended[block_id] += 1
            return True

    def undo_give_up(self, holder: str, tenancy: Tenancy) -> None:
        """Take back a ``give_up`` whose release was cancelled before it took effect."""
        with self.lock:
            if self.open.get(tenancy.block_id) is not tenancy:
                self.open[tenancy.block_id] = tenancy
                self.ended[tenancy.block_id] -= 1
            tenancy.refs[holder] += 1

    def next_canary(self) -> float:
        """A fill value unique enough to tell writers apart, exact in every float dtype (1..250)."""
        with self.lock:
            self._canaries += 1
            return float(1 + self._canaries % 250)

    def holders_of(self, block_id: int) -> tuple[str, ...]:
        """Who holds the block now (empty when nobody)."""
        with self.lock:
            tenancy = self.open.get(block_id)
            return () if tenancy is None else tenancy.holders

    def held_by(self, holder: str) -> list[int]:
        """Blocks in which ``holder`` has a reference."""
        with self.lock:
            return [b for b, t in self.open.items() if holder in t.refs]

    def unheld_seen(self) -> list[int]:
        """Blocks seen before and held by nobody now (fit for double release and misuse)."""
        with self.lock:
            return [b for b in self.handles if b not in self.open]
