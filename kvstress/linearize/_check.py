"""Check a pool's history for linearizability against the block model.

P-compositionality does the heavy lifting: each block's operations are checked on their own
(``_wg``), and a pool whose blocks all pass is linearizable, but for two couplings:

- an acquire that returned None needs one instant of its call where *every* block is HELD. The
  sweep in ``_coupling`` rules out instants where some block is surely FREE (no instant left:
  a violation) and proposes one; each block is then checked HELD there.
- an acquire that may have taken a block nobody saw (cancelled, pending, raised: a wildcard)
  may serve one block only; blocks that need one are matched to distinct ones.

A violation is reported only from a proof: a block that fails with every relaxation (all the
wildcards, each instant anywhere in its call), blocks that need more distinct wildcards than
there are, or the sweep. When the proposed instants and matching cannot be made to work, a
search over the whole pool without partitions decides exactly; the time limit makes the
answer "unknown", never a violation.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial

from kvstress._violation import Operation
from kvstress.linearize._coupling import Coupling
from kvstress.linearize._model import (
    FREE,
    BlockOp,
    Kind,
    PoolOp,
    State,
    Translation,
    operation_index,
    pool_classes,
    pool_moves,
    pool_ops,
    translate,
)
from kvstress.linearize._wg import TimeUp, linearize, search, shrink_failing, slack

STATUSES = ("ok", "violation", "unknown")
_OK_MESSAGE = "a linearization exists"
_SHOWN = 8  # operations described in a violation's message
_REPAIR_ROUNDS = 8  # moves of the empty-pool instants before the whole-pool search takes over


@dataclass(frozen=True, slots=True)
class LinearizabilityResult:
    """The verdict on one history.

    ``status`` is "ok" (a linearization exists), "violation" (none exists: ``witness`` holds the
    indices of a small sub-history that already has none, ``block`` the block it fails on, or
    None when the pool as a whole fails) or "unknown" (the time limit passed first).
    """

    status: str
    block: int | None = None
    message: str = ""
    witness: tuple[int, ...] = field(default=())

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")


def check_history(
    history: Sequence[Operation], num_blocks: int, *, time_limit: float = 1.0, settle: float = 0.0
) -> LinearizabilityResult:
    """Is ``history``, run on a fresh pool of ``num_blocks`` blocks, linearizable?

    ``time_limit`` is in seconds; when it passes the answer is "unknown", never a violation.
    Info and pending operations may take effect at any time after their invocation, or never;
    raised ones before they returned, or never. A cancelled acquire may still be served in the
    pool until its deadline plus ``settle`` seconds (a worker that gives the block back once it
    finds its caller gone). See docs/design.md for the model.
    """
    if isinstance(num_blocks, bool) or not isinstance(num_blocks, int) or num_blocks < 0:
        raise ValueError(f"num_blocks must be an int >= 0, got {num_blocks!r} ({type(num_blocks).__name__})")
    if not isinstance(time_limit, int | float) or time_limit < 0:
        raise ValueError(f"time_limit must be a number of seconds >= 0, got {time_limit!r}")
    if isinstance(settle, bool) or not isinstance(settle, int | float) or not settle >= 0:
        raise ValueError(f"settle must be a number of seconds >= 0, got {settle!r}")
    deadline = time.monotonic() + time_limit
    try:
        if time.monotonic() >= deadline:
            raise TimeUp
        return _Checker(tuple(history), num_blocks, deadline, settle).decide(shrink=True)
    except TimeUp:
        return LinearizabilityResult("unknown", None, f"undecided within the time limit of {time_limit} s")


def fair_excused(history: Sequence[Operation], num_blocks: int, settle: float = 0.0) -> frozenset[int]:
    """The indices of the acquires in ``history`` that answered None while every FREE block may
    have been reserved for another acquire in flight: a fair pool may answer so (docs/protocol.md,
    "Fairness and hand-off"), so the check does not model them as an empty pool."""
    model = translate(history, num_blocks, settle)
    return reserved_nones(model, Coupling(model))


def reserved_nones(model: Translation, coupling: Coupling) -> frozenset[int]:
    """``fair_excused`` on a translated history."""
    return frozenset(e.index for e in model.empties if coupling.reserved(e))


class _Checker:
    """One history under check; everything here is derived from it once, except the deadline."""

    def __init__(
        self, history: tuple[Operation, ...], num_blocks: int, deadline: float, settle: float = 0.0
    ) -> None:
        self.history = history
        self.num_blocks = num_blocks
        self.deadline = deadline
        self.settle = settle
        model = translate(history, num_blocks, settle)
        coupling = Coupling(model)
        # Judged with every None in flight (one that may not have looked may still have held a
        # unit meanwhile), then neither kind of None is judged itself.
        excused = reserved_nones(model, coupling) | model.unseen
        if excused & {e.index for e in model.empties}:
            model = replace(model, empties=tuple(e for e in model.empties if e.index not in excused))
            coupling = Coupling(model)
        self.model: Translation = model
        self.coupling = coupling

    def decide(self, shrink: bool) -> LinearizabilityResult:
        """The verdict; ``shrink`` minimizes a violation's witness (and confirms it)."""
        if self.model.bad:
            index, why = self.model.bad[0]
            return LinearizabilityResult("violation", None, self._describe(why, (index,)), (index,))
        for empty in self.model.empties:
            if not self.coupling.has_room(empty):
                return self._empty_pool_violation(empty, shrink)
        choice = [self.coupling.first_instant(e) for e in self.model.empties]
        failing = self._failing(choice)
        if not failing:
            return _OK
        orders: dict[int, list[tuple[BlockOp, int]]] = {}
        for block in failing:
            relaxed = self._relaxed(block, choice, self.model.wildcards)
            order = linearize(relaxed, self.deadline)
            if order is None:
                return self._block_violation(block, relaxed, shrink)
            orders[block] = [(relaxed[i], rc) for i, rc in order]
        short = self._wildcard_shortage(choice, orders)
        if short:
            return self._shortage_violation(short, shrink)
        if self._repair(choice, failing, orders):
            return _OK
        return self._whole_pool(shrink)

    # -- certifying a choice of empty-pool instants and wildcards ---------------------------------

    def _failing(self, choice: list[int]) -> list[int]:
        return [b for b in range(self.num_blocks) if self._solve(b, choice, ()) is None]

    def _solve(
        self, block: int, choice: list[int], wildcards: Sequence[BlockOp]
    ) -> list[tuple[BlockOp, int]] | None:
        """An order of the block's operations, HELD at every chosen instant, where ``wildcards``
        may take it; (operation, refcount after) pairs, or None."""
        ops = [*self.model.blocks[block], *wildcards]
        for empty, at in zip(self.model.empties, choice, strict=True):
            if not self.coupling.surely_held(block, at):  # implied: no need to search for it
                ops.append(BlockOp(empty.index, Kind.HELD, at, at))
        order = linearize(ops, self.deadline) if ops else ()
        return None if order is None else [(ops[i], rc) for i, rc in order]

    def _relaxed(self, block: int, choice: list[int], wildcards: Sequence[BlockOp]) -> list[BlockOp]:
        """The block's operations where each empty-pool instant ``choice`` did not settle may fall
        anywhere in its call, and ``wildcards`` may take it: true of any linearization of the
        pool, so failing this is a proof; a legal order shows where the block can be HELD."""
        ops = [*self.model.blocks[block], *wildcards]
        for empty, at in zip(self.model.empties, choice, strict=True):
            if not self.coupling.surely_held(block, at):
                ops.append(empty)
        return ops

    def _wildcard_shortage(
        self, choice: list[int], orders: dict[int, list[tuple[BlockOp, int]]]
    ) -> tuple[int, ...]:
        """Blocks that provably need more distinct wildcards than there are; () if none found.
        ``orders`` are the failing blocks' relaxed orders: a wildcard one of them does not use
        is not one that block needs."""
        wild = self.model.wildcards

        def passes(block: int, wildcards: Sequence[BlockOp]) -> bool:
            return linearize(self._relaxed(block, choice, wildcards), self.deadline) is not None

        needy = [b for b in orders if not passes(b, ())]
        if len(needy) > len(wild):
            return tuple(needy)
        needed_by: dict[int, int] = {}  # wildcard index -> the block that cannot do without it
        for block in needy:
            for used in _taken(orders[block], {w.index for w in wild}):
                if not passes(block, [w for w in wild if w.index != used]):
                    if used in needed_by:
                        return (needed_by[used], block)
                    needed_by[used] = block
        for block in needy:  # the wildcards other blocks cannot do without are not left for it
            taken = {i for i, b in needed_by.items() if b != block}
            if taken and not passes(block, [w for w in wild if w.index not in taken]):
                return (block, *sorted({needed_by[i] for i in taken}))
        return ()

    def _repair(
        self, choice: list[int], failing: list[int], orders: dict[int, list[tuple[BlockOp, int]]]
    ) -> bool:
        """Give failing blocks distinct wildcards, else move instants to where the failing blocks'
        relaxed orders put them: True once every block holds, False when that runs out."""
        tried = {tuple(choice)}
        for _ in range(_REPAIR_ROUNDS):
            unmatched = self._assign_wildcards(choice, failing)
            if not unmatched:
                return True
            moved = self.coupling.moved_instants(choice, [orders[b] for b in unmatched if b in orders])
            if moved is None or tuple(moved) in tried:
                return False
            tried.add(tuple(moved))
            choice = moved
            failing = self._failing(choice)
            for block in failing:
                if block not in orders:
                    relaxed = self._relaxed(block, choice, self.model.wildcards)
                    order = linearize(relaxed, self.deadline)
                    if order is None:
                        return False  # a proof, but the whole-pool search will find it too
                    orders[block] = [(relaxed[i], rc) for i, rc in order]
        return False

    def _assign_wildcards(self, choice: list[int], failing: list[int]) -> list[int]:
        """Failing blocks left over when every take of a block by a wildcard in its order gets a
        distinct wildcard that fits where the take sits (a bipartite matching, Kuhn's)."""
        wild = sorted(self.model.wildcards, key=lambda w: w.lo)
        unmatched: list[int] = []
        takes: list[tuple[int, int, int]] = []  # (block, latest start before, earliest end after)
        for block in failing:
            order = self._fewest_takes(block, choice, wild)
            if order is None:
                unmatched.append(block)
            else:
                takes += [(block, *window) for window in _takes(order, {w.index for w in wild})]
        owner: dict[int, int] = {}  # wildcard -> take

        def claim(take: int, visited: set[int]) -> bool:
            _, before, after = takes[take]
            for k, w in enumerate(wild):
                if w.lo <= after and w.hi >= before and k not in visited:
                    visited.add(k)
                    if k not in owner or claim(owner[k], visited):
                        owner[k] = take
                        return True
            return False

        for take, (block, _, _) in enumerate(takes):
            if not claim(take, set()) and block not in unmatched:
                unmatched.append(block)
        return unmatched

    def _fewest_takes(
        self, block: int, choice: list[int], wild: list[BlockOp]
    ) -> list[tuple[BlockOp, int]] | None:
        """An order for the block using the fewest of the wildcards (sorted by start), or None.
        The k earliest open wildcards can do whatever any k of them can, so k is bisected."""
        best = self._solve(block, choice, wild)
        none_enough, enough = 0, len(wild)  # the first k wildcards are (not) enough
        while best is not None and none_enough + 1 < enough:
            k = (none_enough + enough) // 2
            order = self._solve(block, choice, wild[:k])
            if order is None:
                none_enough = k
            else:
                best, enough = order, k
        return best

    # -- reporting a violation -------------------------------------------------------------------

    def _whole_pool(self, shrink: bool) -> LinearizabilityResult:
        """Wing & Gong over every operation at once: exact, and slower, for what partitions
        could not settle (wildcards and empty-pool instants pulling blocks different ways)."""
        ops = pool_ops(self.model)

        start: State = (FREE,) * self.num_blocks

        def solve(sub: Sequence[PoolOp]) -> tuple[tuple[int, State], ...] | None:
            spans = [(p.op.lo, p.op.hi) for p in sub]
            return search(spans, pool_moves(sub), start, pool_classes(sub), self.deadline)

        if solve(ops) is not None:
            return _OK
        if shrink:
            ops = list(shrink_failing(ops, lambda p: (p.op.lo, p.op.hi), solve, start))
        witness = _operations(p.op.index for p in ops)
        why = "no order of the pool's operations that respects real time keeps the model"
        return LinearizabilityResult("violation", None, self._describe(why, witness), witness)

    def _block_violation(self, block: int, ops: list[BlockOp], shrink: bool) -> LinearizabilityResult:
        if shrink:
            ops = sorted(ops, key=lambda op: (op.lo, op.hi, op.index))
            solve = partial(linearize, deadline=self.deadline)
            ops = list(shrink_failing(ops, lambda op: (op.lo, op.hi), solve, FREE))
        witness = _operations(op.index for op in ops)
        why = f"block {block}: no order of its operations that respects real time keeps the block model"
        return LinearizabilityResult("violation", block, self._describe(why, witness), witness)

    def _empty_pool_violation(self, empty: BlockOp, shrink: bool) -> LinearizabilityResult:
        witness = _operations(self.coupling.free_proof(empty))
        if shrink and not self._confirms(witness):
            witness = tuple(sorted(op.index for op in self.history))  # the whole history is the proof
        call = next((op.name for op in self.history if op.index == empty.index), "acquire")
        why = f"{call} returned None, but at every instant of its call some block was FREE"
        return LinearizabilityResult("violation", None, self._describe(why, witness), witness)

    def _shortage_violation(self, blocks: tuple[int, ...], shrink: bool) -> LinearizabilityResult:
        proof = {w.index for w in self.model.wildcards} | {e.index for e in self.model.empties}
        proof |= {op.index for b in blocks for op in self.model.blocks[b]}
        witness = _operations(proof)
        if shrink and not self._confirms(witness):
            witness = tuple(sorted(op.index for op in self.history))
        why = f"blocks {list(blocks)} each need one of the same cancelled or pending acquires"
        return LinearizabilityResult("violation", blocks[0], self._describe(why, witness), witness)

    def _confirms(self, witness: tuple[int, ...]) -> bool:
        """The sub-history ``witness`` is a violation on its own."""
        keep = set(witness)
        sub = tuple(op for op in self.history if op.index in keep)
        try:
            return (
                _Checker(sub, self.num_blocks, self.deadline, self.settle).decide(shrink=False).status
                == "violation"
            )
        except TimeUp:
            return False  # the violation stands; only its witness stays the whole history

    def _describe(self, why: str, witness: tuple[int, ...]) -> str:
        by_index = {op.index: op for op in self.history}
        shown = [by_index[i].describe() for i in witness[:_SHOWN] if i in by_index]
        more = f"; and {len(witness) - _SHOWN} more" if len(witness) > _SHOWN else ""
        return f"{why}; failing sub-history of {len(witness)}: " + "; ".join(shown) + more


_OK = LinearizabilityResult("ok", None, _OK_MESSAGE)


def _operations(indices: Iterable[int]) -> tuple[int, ...]:
    """A witness: the history operations behind model ``indices``, sorted (a batch's parts
    stand for the batch: their own indexes name no operation)."""
    return tuple(sorted({operation_index(index) for index in indices}))


def _taken(order: list[tuple[BlockOp, int]], wildcards: set[int]) -> list[int]:
    """The wildcards that took the block in ``order`` (FREE before, HELD after)."""
    taken, rc = [], FREE
    for op, after in order:
        if op.index in wildcards and op.kind == Kind.MAYBE_ACQUIRE and rc == FREE and after == 1:
            taken.append(op.index)
        rc = after
    return taken


def _takes(order: list[tuple[BlockOp, int]], wildcards: set[int]) -> list[tuple[int, int]]:
    """Where each take of the block by a wildcard in ``order`` (FREE before, HELD after) sits:
    (the latest start of the operations before it, the earliest end of those after it). Any
    wildcard that can fall between those two can stand in for it, and the order stays legal."""
    windows, rc = [], FREE
    for (op, after), window in zip(order, slack([op for op, _ in order]), strict=True):
        if op.index in wildcards and op.kind == Kind.MAYBE_ACQUIRE and rc == FREE and after == 1:
            windows.append(window)
        rc = after
    return windows
