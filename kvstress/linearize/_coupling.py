"""Where every linearization pins a block, and what that leaves for acquires that returned None.

An acquire that answered None needs one instant of its call where every block is HELD. This
module sweeps over positions: a block is surely HELD (in every linearization of its own
operations) from after an acquire's end until the first start of a release that could follow
it, and surely FREE from after a True release (or the start) until the first start of an
acquire that could follow it. A wildcard may take one surely FREE block, so an instant is ruled
out only when surely FREE blocks outnumber the wildcards begun by then: a call with no instant
left is a violation. Otherwise the sweep proposes the instant to try first.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from kvstress.linearize._model import OPEN, BlockOp, Kind, Translation
from kvstress.linearize._wg import slack


@dataclass(frozen=True, slots=True)
class _Stretch:
    """Positions ``first..last`` where a block is FREE in every linearization; ``proof`` are the
    history indices that show it (the acquire and the release that ended the last tenancy)."""

    first: int
    last: int
    proof: tuple[int, ...]


class Coupling:
    """The sweep over one translated history: per position, which blocks are surely HELD, how
    many surely FREE, and whether an empty pool is still possible there."""

    def __init__(self, model: Translation) -> None:
        size = model.positions
        self._empty_ops = model.empties
        self._empty_at = {e.index: k for k, e in enumerate(model.empties)}
        self._held: list[tuple[list[int], list[int]]] = []  # per block, merged (firsts, lasts)
        self._free: list[_Stretch] = []
        held = [0] * (size + 1)
        free = [0] * (size + 1)  # difference arrays, summed below
        for ops in model.blocks:
            merged = _merge(_held_stretches(ops, size))
            self._held.append(([f for f, _ in merged], [last for _, last in merged]))
            _spread(held, merged)
            stretches = _free_stretches(ops, size)
            self._free += stretches
            _spread(free, _merge((s.first, s.last) for s in stretches))
        surely_free = _running(free)
        for w in model.wildcards:
            free[w.lo] -= 1  # from its start on, a wildcard may hold one of the FREE blocks
        self._surely_free = surely_free
        # Acquires as calls (from start to return, whatever effect they may have later): the
        # block each answered (-1: none anyone saw), its index, start and return positions.
        returns = dict(model.returns)
        calls = [(b, op) for b, ops in enumerate(model.blocks) for op in ops if op.kind in _TAKES]
        calls += [(-1, op) for op in (*model.wildcards, *model.empties)]
        self._calls = [(b, op.index, op.lo, returns.get(op.index, op.hi)) for b, op in calls]
        # In flight as units: a cancelled acquire the pool may still serve lingers past its return.
        lingering = dict(model.lingering)
        self._units = [(b, i, lo, max(end, lingering.get(i, end))) for b, i, lo, end in self._calls]
        frees = [(b, op) for b, ops in enumerate(model.blocks) for op in ops if op.kind in _FREES]
        self._handoffs = _handoffs([op.hi for _, op in frees], model, returns)
        self._queued = _queued(self._calls, self._handoffs, model.patient, model.waited)
        self._patient = model.patient
        self._start = {index: lo for _, index, lo, _ in self._calls}
        self._start.update((index, lo) for index, lo, _ in model.waited)
        # Releases as calls: until one returns, the pool may not have given its unit back.
        self._freeing = [(b, op.lo, returns.get(op.index, op.hi)) for b, op in frees]
        # Per block, the returns of the acquires that answered it: one that returned after a
        # release of the block began shows that release offered it (its tenancy came after).
        self._taken = [sorted(op.hi for op in ops if op.kind == Kind.ACQUIRE) for ops in model.blocks]
        self._free_spans = [[(s.first, s.last) for s in _free_stretches(ops, size)] for ops in model.blocks]
        # Each surely FREE block needs a wildcard to be HELD, and wildcards are scarce: prefer
        # instants with the fewest of them, then with the most surely HELD blocks (the fewest to
        # search for).
        weight = len(model.blocks) + 1
        self._score = [h - weight * f for h, f in zip(_running(held), surely_free, strict=True)][:size]
        room = [int(n <= 0) for n in _running(free)[:size]]
        self._room = room
        self._room_before = [0, *_running(room)]  # _room_before[p]: positions below p with room

    def reserved(self, empty: BlockOp) -> bool:
        """Some position of the call where the FREE blocks may all be reserved for other acquires
        in flight, so a fair pool may answer None (docs/protocol.md, "Fairness and hand-off"): either

        - every surely FREE block is matched by a spare unit of capacity in flight: an acquire
          that may hold one without a block yet (as after a semaphore's acquire, before the
          block is taken from the queue; ``_spare``), or a release that has not returned, which
          may not have given its unit back yet though it offered its block (``_offered_units``); or
        - a hand-off is in flight: another acquire, begun before a release ended, is still in
          flight after it, so a FIFO pool may have handed it that block, and a newcomer that
          finds the queue busy fails. A waiter that gave up (timed out, cancelled) while such a
          hand-off may have reached it passes its unit on at its return: that is a hand-off too
          (``_handoffs``).

        A cancelled acquire counts as in flight until the pool may have stopped serving it
        (``Translation.lingering``), not only until its caller's return.
        """
        last = min(empty.hi, len(self._surely_free) - 2)
        starts = {empty.lo, *(lo for _, index, lo, _ in self._calls if index != empty.index)}
        starts.update(lo for _, lo, _ in self._freeing)
        for p in sorted(at for at in starts if empty.lo <= at <= last):  # where in-flight sets grow
            in_flight = [(b, lo) for b, i, lo, end in self._units if i != empty.index and lo <= p <= end]
            # A release in flight holds back at most one unit, and that only once it has offered
            # its block: where the block is surely FREE (another tenancy of it already came and
            # went), or taken again by an acquire begun after the release began. Units are
            # alike: the one it holds back may be the one another FREE block lacks (a semaphore
            # over a set of ids, where the acquirer took the block that release offered).
            released = [(b, lo) for b, lo, end in self._freeing if lo <= p <= end]
            freeing = self._offered_units(p, released)
            if not in_flight and not freeing:
                continue
            releasing = {b for b, _ in released}
            if self._surely_free[p] <= self._spare(p, [b for b, _ in in_flight], releasing) + freeing:
                return True
            ended = bisect_right(self._handoffs, p)  # hand-offs that were over by p
            if in_flight and ended and self._handoffs[ended - 1] >= min(lo for _, lo in in_flight):
                return True
        return self._queue_busy(empty, last)

    def _queue_busy(self, empty: BlockOp, last: int) -> bool:
        """Another acquire that may have stood in a FIFO pool's queue (``_queued``) was in flight
        during the call: a try-once finds the queue busy and fails, whatever blocks are FREE, as
        on ``asyncio.Semaphore``, which refuses a newcomer while any waiter is queued; a waiter
        fails behind one queued before it began."""
        patient = empty.index in self._patient
        return any(
            index != empty.index
            and since <= last
            and end >= empty.lo
            and (not patient or self._start[index] < empty.lo)
            for index, since, end in self._queued
        )

    def _surely_free_block(self, block: int, at: int) -> bool:
        return any(first <= at <= last for first, last in self._free_spans[block])

    def _offered_units(self, at: int, released: list[tuple[int, int]]) -> int:
        """How many of the releases in flight at ``at`` (``released``: block, start) have surely
        offered their block there: all of a block's where it is surely FREE; else as many as
        acquires of it returned after the earliest of them began (each such take is a later
        tenancy, so one of them offered it)."""
        starts: dict[int, list[int]] = {}
        for block, lo in released:
            starts.setdefault(block, []).append(lo)
        offered = 0
        for block, los in starts.items():
            if self._surely_free_block(block, at):
                offered += len(los)
                continue
            returns = self._taken[block]
            retaken = bisect_right(returns, at) - bisect_left(returns, min(los))
            offered += min(len(los), max(retaken, 0))
        return offered

    def _spare(self, at: int, answered: list[int], releasing: set[int]) -> int:
        """How many of the acquires in flight at ``at`` (the blocks they answered, -1: none seen)
        may be holding a unit of capacity there rather than taking a FREE block: those that took
        no block anyone saw, all of those answering a block someone else may still hold there
        (surely HELD, or in ``releasing``: its release has not returned), and all but one of
        those answering any other block (one tenancy comes first)."""
        counts = Counter(answered)
        spare = counts.pop(-1, 0)
        for block, count in counts.items():
            held = block in releasing or self.surely_held(block, at)
            spare += count if held else count - 1
        return spare

    def surely_held(self, block: int, at: int) -> bool:
        """Block ``block`` is HELD at position ``at`` in every linearization."""
        firsts, lasts = self._held[block]
        i = bisect_right(firsts, at) - 1
        return i >= 0 and lasts[i] >= at

    def has_room(self, empty: BlockOp) -> bool:
        """Some position of the call leaves room for every block to be HELD."""
        return self._room_before[empty.hi + 1] - self._room_before[empty.lo] > 0

    def best_instant(self, empty: BlockOp, lo: int = 0, hi: int = 1 << 62) -> int | None:
        """The position of the call within ``lo..hi`` with room and the best score (see above);
        the latest on a tie. None when no position has room."""
        best, top = None, -(1 << 62)
        for p in range(min(empty.hi, hi), max(empty.lo, lo) - 1, -1):
            if self._room[p] and self._score[p] > top:
                best, top = p, self._score[p]
        return best

    def first_instant(self, empty: BlockOp) -> int:
        """The instant to try first for an empty pool (the call has room: decide checked)."""
        at = self.best_instant(empty)
        return empty.hi if at is None else at

    def free_proof(self, empty: BlockOp) -> tuple[int, ...]:
        """The call plus stretches of surely FREE blocks covering its interval (it has no room)."""
        proof = {empty.index}
        at = empty.lo
        while at <= empty.hi:
            cover = max((s for s in self._free if s.first <= at <= s.last), key=lambda s: s.last)
            proof.update(cover.proof)
            at = cover.last + 1
        return tuple(sorted(proof))

    def moved_instants(
        self, choice: list[int], orders: Iterable[list[tuple[BlockOp, int]]]
    ) -> list[int] | None:
        """Instants moved to where every given block order can be HELD; None if none moves."""
        windows: dict[int, tuple[int, int]] = {}
        for order in orders:
            ops = [op for op, _ in order]
            for op, (before, after) in zip(ops, slack(ops), strict=True):
                lo, hi = max(before, op.lo), min(after, op.hi)
                k = self._empty_at.get(op.index)
                if k is not None:
                    old = windows.get(k, (lo, hi))
                    windows[k] = (max(old[0], lo), min(old[1], hi))
        moved = list(choice)
        for k, (lo, hi) in windows.items():
            at = self.best_instant(self._empty_ops[k], lo, hi)
            moved[k] = choice[k] if at is None else at
        return None if moved == choice else moved


_TAKES = (Kind.ACQUIRE, Kind.MAYBE_ACQUIRE)
_FREES = (Kind.RELEASE_TRUE, Kind.MAYBE_RELEASE)


def _handoffs(release_ends: list[int], model: Translation, returns: dict[int, int]) -> list[int]:
    """Positions where a unit may have been handed to a waiter, sorted: each release's end, and
    the return of each acquire that could wait and gave up without a block (None, or cancelled)
    after a hand-off may have reached it during its call: a fair primitive passes the unit on
    as the waiter leaves (asyncio's Semaphore does so in the waiter's own cleanup)."""
    handoffs = sorted(release_ends)
    quitters = sorted(
        (returns[op.index], op.lo)
        for op in (*model.empties, *model.wildcards)
        if op.index in model.patient and returns.get(op.index, OPEN) < OPEN
    )
    for end, start in quitters:  # by return: a hand-off it passed on can reach a later quitter
        i = bisect_left(handoffs, start)
        if i < len(handoffs) and handoffs[i] <= end:
            handoffs.insert(bisect_right(handoffs, end), end)
    return handoffs


def _queued(
    calls: Sequence[tuple[int, int, int, int]],
    handoffs: Sequence[int],
    patient: frozenset[int],
    waited: Sequence[tuple[int, int, int]] = (),
) -> list[tuple[int, int, int]]:
    """The acquires that may have stood in a FIFO pool's queue, as (index, start, return): one in
    flight across a hand-off (it may have waited for that unit), one that gave up without a
    block after waiting (``Translation.waited``: a batch too big for what was FREE waits at the
    head from its start, with no hand-off at all), and, in turn, one that could wait and began
    while such an acquire was still in flight: a pool that refuses newcomers while anyone is
    queued (``asyncio.Semaphore``; a FIFO batch pool's ``if not self._waiters and len(free) >=
    n``) queued it behind, whatever was FREE, and a newcomer then found the queue busy too
    (blind testers' pools on ``Semaphore.locked()`` and on such a gate: the second, a waiter
    woken as a batch ahead of it timed out and not yet run, refused a try-once beside five FREE
    blocks)."""
    gave_up = {index for index, _, _ in waited}
    waiting = sorted(
        [(lo, end, index) for _, index, lo, end in calls if index in patient and index not in gave_up]
        + [(lo, end, index) for index, lo, end in waited]
    )
    queued: list[tuple[int, int, int]] = []  # (index, from when it may hold the queue, return)
    for lo, end, index in waiting:
        if index in gave_up or any(since <= lo <= until for _, since, until in queued):
            queued.append((index, lo, end))  # began behind a queued one: queued from its start
            continue
        h = bisect_left(handoffs, lo)
        if h < len(handoffs) and handoffs[h] <= end:  # a hand-off came during its call
            queued.append((index, handoffs[h], end))
    return queued


def _held_stretches(ops: Sequence[BlockOp], size: int) -> list[tuple[int, int]]:
    frees = _first_start_from([op for op in ops if op.kind in (Kind.RELEASE_TRUE, Kind.MAYBE_RELEASE)], size)
    return [(x.hi + 1, frees(x.lo) - 1) for x in ops if x.kind == Kind.ACQUIRE] + _counted_held(ops, size)


def _counted_held(ops: Sequence[BlockOp], size: int) -> list[tuple[int, int]]:
    """Where more acquires of the block have surely taken effect (returned before the position)
    than releases may have (begun by it), the block is HELD: takes and frees alternate on a
    block, and other takes (cancelled acquires, wildcards) only add to the takes. This catches
    what the per-acquire stretches above miss when tenancies overlap in time: a waiter handed
    the block while a newcomer's acquire of the same block is already in flight."""
    diff = [0] * (size + 2)
    for op in ops:
        if op.kind == Kind.ACQUIRE:
            diff[op.hi + 1] += 1
        elif op.kind in (Kind.RELEASE_TRUE, Kind.MAYBE_RELEASE):
            diff[op.lo] -= 1
    stretches: list[tuple[int, int]] = []
    balance, start = 0, None
    for at in range(size):  # positions 0..size-1, as the other stretches
        balance += diff[at]
        if balance > 0 and start is None:
            start = at
        elif balance <= 0 and start is not None:
            stretches.append((start, at - 1))
            start = None
    if start is not None:
        stretches.append((start, size - 1))
    return stretches


def _free_stretches(ops: Sequence[BlockOp], size: int) -> list[_Stretch]:
    takes = _first_start_from([op for op in ops if op.kind in (Kind.ACQUIRE, Kind.MAYBE_ACQUIRE)], size)
    acquires = sorted((op for op in ops if op.kind == Kind.ACQUIRE), key=lambda op: op.hi)
    ends = [op.hi for op in acquires]
    stretches = [_Stretch(0, takes(-1) - 1, ())]  # a fresh pool: every block FREE
    for release in (op for op in ops if op.kind == Kind.RELEASE_TRUE):
        before = bisect_left(ends, release.lo)
        proof = (acquires[before - 1].index, release.index) if before else (release.index,)
        stretches.append(_Stretch(release.hi + 1, takes(release.lo) - 1, proof))
    return [s for s in stretches if s.first <= s.last]


def _first_start_from(ops: Sequence[BlockOp], default: int) -> Callable[[int], int]:
    """A query: the earliest start among ``ops`` that end at or after a position (may follow it)."""
    ops = sorted(ops, key=lambda op: op.hi)
    ends = [op.hi for op in ops]
    suffix = [default] * (len(ops) + 1)
    for i in range(len(ops) - 1, -1, -1):
        suffix[i] = min(suffix[i + 1], ops[i].lo)
    return lambda at: suffix[bisect_left(ends, at)]


def _merge(stretches: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for first, last in sorted(s for s in stretches if s[0] <= s[1]):
        if merged and first <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], last))
        else:
            merged.append((first, last))
    return merged


def _spread(diff: list[int], merged: list[tuple[int, int]]) -> None:
    for first, last in merged:
        diff[first] += 1
        diff[last + 1] -= 1


def _running(diff: list[int]) -> list[int]:
    total, out = 0, []
    for d in diff:
        total += d
        out.append(total)
    return out
