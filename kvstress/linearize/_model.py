"""The sequential model of one block (and of the whole pool), and how a history maps onto it.

A block's whole state is its refcount: 0 is FREE, n > 0 is HELD by n references. Each protocol
operation becomes a ``BlockOp`` on the one block it names; an acquire that may have taken a block
nobody saw is a *wildcard* (any block), and an acquire that returned None is an *empty-pool*
constraint on every block at once (all of them HELD at one instant of its interval).

Times become positions: the k-th distinct time of the history is position 2k and the gap after
it is 2k + 1, so "some instant strictly between two recorded times" is a position too. Equal
times count as concurrent: an operation may take effect anywhere in ``[lo, hi]``.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import IntEnum
from typing import Any

from kvstress._violation import Operation

FREE = 0
# The end position of an operation that may still take effect at any later time (Jepsen's info).
OPEN = 1 << 62
ANY_BLOCK = -1  # target of a wildcard acquire
EMPTY_POOL = -2  # target of an acquire that returned None


class Kind(IntEnum):
    """What one operation does to one block; the MAYBE_ kinds may also do nothing."""

    ACQUIRE = 0  # FREE -> 1
    RELEASE_TRUE = 1  # 1 -> FREE
    RELEASE_FALSE = 2  # n >= 2 -> n - 1, or FREE -> FREE
    RETAIN = 3  # n >= 1 -> n + 1
    HELD = 4  # n >= 1, unchanged: mark_in_use, or one block's share of an empty-pool instant
    MAYBE_ACQUIRE = 5
    MAYBE_RELEASE = 6
    MAYBE_RETAIN = 7


def step(kind: int, rc: int) -> tuple[int, ...]:
    """The refcounts ``kind`` may leave from ``rc``, doing nothing first; () when it cannot run."""
    if kind == Kind.ACQUIRE:
        return (1,) if rc == FREE else ()
    if kind == Kind.RELEASE_TRUE:
        return (FREE,) if rc == 1 else ()
    if kind == Kind.RELEASE_FALSE:
        return (rc - 1,) if rc >= 2 else ((FREE,) if rc == FREE else ())
    if kind == Kind.RETAIN:
        return (rc + 1,) if rc >= 1 else ()
    if kind == Kind.HELD:
        return (rc,) if rc >= 1 else ()
    if kind == Kind.MAYBE_ACQUIRE:
        return (FREE, 1) if rc == FREE else (rc,)
    if kind == Kind.MAYBE_RELEASE:
        return (rc, rc - 1) if rc >= 1 else (FREE,)
    return (rc, rc + 1) if rc >= 1 else (FREE,)  # MAYBE_RETAIN: a refused retain changes nothing


@dataclass(frozen=True, slots=True)
class BlockOp:
    """History operation ``index`` as a block's model sees it, taking effect in positions [lo, hi]."""

    index: int
    kind: Kind
    lo: int
    hi: int


@dataclass(frozen=True, slots=True)
class Translation:
    """A history in model terms: per-block operations, wildcards, empty-pool constraints, bad results."""

    blocks: tuple[tuple[BlockOp, ...], ...]
    wildcards: tuple[BlockOp, ...]  # MAYBE_ACQUIRE of some block, nobody knows which
    empties: tuple[BlockOp, ...]  # HELD for every block at one shared position
    bad: tuple[tuple[int, str], ...]  # (index, why): answers no correct pool gives
    positions: int  # every finite position is below this
    returns: tuple[tuple[int, int], ...] = ()  # (index, position of its return; OPEN: none)
    patient: frozenset[int] = frozenset()  # acquires that could wait (timeout not 0): a unit may reach them
    unseen: frozenset[int] = frozenset()  # timed Nones that may not have looked (``_timed_out_unseen``)
    # (index, position): acquires, cancelled or timed out, the pool may still serve after they
    # returned (``may_linger``, ``served_until``), each a unit in flight until then
    lingering: tuple[tuple[int, int], ...] = ()
    # (index, start, return positions): acquires that could wait and gave up without a block
    # (timed out, cancelled): they waited, so a FIFO pool had them in its queue
    waited: tuple[tuple[int, int, int], ...] = ()


@dataclass(frozen=True, slots=True)
class _Mapped:
    target: int  # a block id, ANY_BLOCK or EMPTY_POOL
    kind: Kind
    settled: bool  # False: may take effect after its end (info or pending), so hi is OPEN
    part: int = 0  # which of a batch's blocks (acquire_many): its wildcards need distinct indices


_MODELLED = frozenset({"acquire", "acquire_many", "release", "retain", "mark_in_use"})
_TAKING = frozenset({"acquire", "acquire_many"})


def part_index(index: int, part: int) -> int:
    """The index a batch's ``part``-th wildcard goes by (the first keeps the operation's own;
    the others are negative, unique, and name no history operation)."""
    return index if part == 0 else -(index * 1024 + part)


def operation_index(index: int) -> int:
    """The history operation a model index stands for: ``part_index`` undone (a batch's part
    goes by the batch's own index)."""
    return index if index >= 0 else -index // 1024


def translate(history: Sequence[Operation], num_blocks: int, settle: float = 0.0) -> Translation:
    """Map the operations the model knows; write, verify and check carry no state and are skipped.
    ``settle``: how long after its deadline an acquire that returned without a block may still
    be in flight in the pool (``may_linger``, ``served_until``)."""
    ops = [op for op in history if op.name in _MODELLED]
    times = sorted({op.start for op in ops} | {op.end for op in ops if op.end is not None})
    position = {t: 2 * k for k, t in enumerate(times)}

    def at(time: float | None) -> int:
        if time is None:
            return OPEN
        k = bisect_right(times, time) - 1  # the last recorded time at or before it
        return 2 * k if times[k] == time else 2 * k + 1

    blocks: list[list[BlockOp]] = [[] for _ in range(num_blocks)]
    wildcards: list[BlockOp] = []
    empties: list[BlockOp] = []
    bad: list[tuple[int, str]] = []
    extra_returns: list[tuple[int, int]] = []
    for op in ops:
        found = _map_many(op, num_blocks) if op.name == "acquire_many" else _map(op, num_blocks)
        if isinstance(found, str):
            bad.append((op.index, found))
            continue
        lo = position[op.start]
        for mapped in [] if found is None else found if isinstance(found, list) else [found]:
            hi = position[op.end] if mapped.settled and op.end is not None else OPEN
            block_op = BlockOp(op.index, mapped.kind, lo, max(lo, hi))
            if mapped.target == ANY_BLOCK:
                wildcards.append(replace(block_op, index=part_index(op.index, mapped.part)))
                if mapped.part:
                    extra_returns.append((part_index(op.index, mapped.part), at(op.end)))
            elif mapped.target == EMPTY_POOL:
                empties.append(block_op)
            else:
                blocks[mapped.target].append(block_op)
    returns = tuple((op.index, at(op.end)) for op in ops)
    returns += tuple(extra_returns)
    lingering = tuple((op.index, at(served_until(op, settle))) for op in ops if may_linger(op))
    patient = frozenset(op.index for op in ops if op.name in _TAKING and op.args.get("timeout") != 0)
    unseen = frozenset(op.index for op in ops if op.name in _TAKING and _timed_out_unseen(op))
    waited = tuple(
        (op.index, position[op.start], at(op.end))
        for op in ops
        if op.index in patient and op.end is not None and op.result in (None, "cancelled")
    )
    return Translation(
        tuple(map(tuple, blocks)),
        tuple(wildcards),
        tuple(empties),
        tuple(bad),
        2 * len(times),
        returns,
        patient,
        unseen,
        lingering,
        waited,
    )


def may_linger(op: Operation) -> bool:
    """Whether acquire (or acquire_many) ``op`` returned without a block and the pool may still
    serve it afterwards (``served_until``): cancelled, or timed out after waiting (timeout not
    0). A timed-out waiter may leave the pool's queue a moment after its call returned, as
    poolboy's: the caller's timeout sends a cancel message the pool's actor handles on its next
    turn, and a block released in between goes to the stale entry, then comes straight back."""
    if op.name not in _TAKING or op.end is None:
        return False
    if op.result == "cancelled":
        return True
    timeout = op.args.get("timeout")
    timed = isinstance(timeout, int | float) and not isinstance(timeout, bool) and timeout > 0
    return timed and op.result is None and op.outcome in ("ok", "info")


def served_until(op: Operation, settle: float) -> float | None:
    """Until when the pool may still be serving acquire ``op``, cancelled or timed out
    (``may_linger``; None: for good). It may live on in the pool past its caller's return: a
    worker thread or an actor task still waits for a block on its behalf until its deadline,
    takes one, finds the caller gone and gives it back a moment later (``settle``, the time the
    quiet checks give a pool to offer a block back). Meanwhile the block it holds is a unit in
    flight, and an acquire that finds no block free is no violation (an async face over worker
    threads, an actor's late cancel message). Without a timeout it may wait for good."""
    timeout = op.args.get("timeout")
    if op.end is None or not isinstance(timeout, int | float) or isinstance(timeout, bool):
        return None
    return max(op.end, op.start + timeout) + settle


def _map(op: Operation, num_blocks: int) -> _Mapped | str | None:
    """The model's view of one operation; a string says why no correct pool answers so; None: no effect."""
    # "raised" ops returned, so whatever they did happened before their end; "info", "pending"
    # and outcomes we do not know may take effect at any later time, or never.
    settled = op.outcome in ("ok", "raised")
    if op.name == "acquire":
        return _map_acquire(op, num_blocks, settled)
    block = _block_arg(op.args, num_blocks)
    if block is None:
        return None  # no block of this pool: the call cannot have changed one
    if op.name == "release":
        kind = _release_kind(op)
        # A release that returned with its block still RELEASING (a reset worker offers it
        # later) puts the block back at some time after its call, not within it.
        deferred = bool(op.observed and op.observed.get("deferred"))
        return None if kind is None else _Mapped(block, kind, settled and not deferred)
    if op.name == "retain":
        return _Mapped(block, Kind.RETAIN if op.outcome == "ok" else Kind.MAYBE_RETAIN, settled)
    # mark_in_use changes no count: only a successful one says something (the block was held).
    return _Mapped(block, Kind.HELD, True) if op.outcome == "ok" else None


def _map_acquire(op: Operation, num_blocks: int, settled: bool) -> _Mapped | str:
    result = op.result
    if op.outcome in ("ok", "info") and result is None:
        # It answered None: it took nothing, and the pool was empty at some instant it waited.
        return _Mapped(EMPTY_POOL, Kind.HELD, True)
    if isinstance(result, int) and not isinstance(result, bool) and 0 <= result < num_blocks:
        kind = Kind.ACQUIRE if op.outcome == "ok" else Kind.MAYBE_ACQUIRE
        return _Mapped(result, kind, settled)
    if op.outcome == "ok":
        return f"acquire returned {result!r} ({type(result).__name__}), not a block id in 0..{num_blocks - 1}"
    # Cancelled, raised or never returned: it may have taken a block the caller never saw.
    return _Mapped(ANY_BLOCK, Kind.MAYBE_ACQUIRE, settled)


def _map_many(op: Operation, num_blocks: int) -> list[_Mapped] | str | None:
    """acquire_many(n): a batch it returned is n acquires, each a block's own (that they were
    taken at one instant is not modelled: sound, it only leaves some bugs to the other checks).
    None says the pool was empty at some instant only for n == 1. For n > 1 it says fewer than
    n were FREE, which no one block's model can express; and a FIFO-fair pool may have kept
    blocks for the waiting batch meanwhile, so it is n wildcards within its call (units in
    flight that may excuse another acquire's None; taking nothing is allowed too). Cancelled,
    raised or never returned: it may have taken up to n blocks nobody saw, n wildcards."""
    n, result = op.args.get("n"), op.result
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        return None
    if op.outcome in ("ok", "info") and result is None:
        if n == 1:
            return [_Mapped(EMPTY_POOL, Kind.HELD, True)]
        return [_Mapped(ANY_BLOCK, Kind.MAYBE_ACQUIRE, True, part) for part in range(n)]
    if op.outcome == "ok":
        ids = result if isinstance(result, list) else None
        if (
            ids is None
            or len(ids) != n
            or len(set(ids)) != n
            or not all(_is_block(b, num_blocks) for b in ids)
        ):
            wanted = f"{n} distinct block ids in 0..{num_blocks - 1}"
            return f"acquire_many({n}) returned {result!r}, not {wanted}"
        return [_Mapped(block, Kind.ACQUIRE, True) for block in ids]
    settled = op.outcome == "raised"
    return [_Mapped(ANY_BLOCK, Kind.MAYBE_ACQUIRE, settled, part) for part in range(n)]


def _timed_out_unseen(op: Operation) -> bool:
    """Whether a timed acquire that answered None may have seen its deadline pass while it sat
    ready to run, before it looked at the pool: time jumped meanwhile for a timer fired early
    under control, or the process stalled (``observed["excused_s"]``). A real loop or OS that
    keeps a woken waiter waiting past its deadline lets it time out so, whatever is free; its
    None then says nothing of the pool (the checker does not judge it, but it still counts as
    an acquire in flight, which may have held a unit meanwhile). A try-once is judged as ever."""
    if op.outcome not in ("ok", "info") or op.result is not None:
        return False
    timeout = op.args.get("timeout")
    excused = op.observed.get("excused_s", 0.0) if op.observed else 0.0
    return isinstance(timeout, int | float) and timeout > 0 and isinstance(excused, float) and excused > 0


def _is_block(value: object, num_blocks: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < num_blocks


def _release_kind(op: Operation) -> Kind | None:
    # A double release goes through a handle from an earlier tenancy, which cannot touch the
    # block's next holder (docs/protocol.md): refused (False, or an exception) is right in any
    # state and changes nothing. Modelled as a release of whatever the block holds now, it would
    # blame the pool for a stale handle.
    if op.args.get("double") and (op.outcome == "raised" or op.result is False):
        return None
    if op.observed and op.observed.get("kept"):
        return None  # cancelled before it changed anything: the harness saw the reference stay
    if op.outcome != "ok" or not isinstance(op.result, bool):
        return Kind.MAYBE_RELEASE
    return Kind.RELEASE_TRUE if op.result else Kind.RELEASE_FALSE


def _block_arg(args: Mapping[str, Any], num_blocks: int) -> int | None:
    block = args.get("block")
    if isinstance(block, int) and not isinstance(block, bool) and 0 <= block < num_blocks:
        return block
    return None


@dataclass(frozen=True, slots=True)
class PoolOp:
    """An operation as the whole pool's model sees it: on ``target``, a block id, ANY_BLOCK or
    EMPTY_POOL. For the search that needs no partition, when the partitioned one cannot decide."""

    target: int
    op: BlockOp


State = tuple[int, ...]


def pool_ops(model: Translation) -> list[PoolOp]:
    """Every operation of the translation, in start order."""
    ops = [PoolOp(b, op) for b, block in enumerate(model.blocks) for op in block]
    ops += [PoolOp(ANY_BLOCK, op) for op in model.wildcards]
    ops += [PoolOp(EMPTY_POOL, op) for op in model.empties]
    return sorted(ops, key=lambda p: (p.op.lo, p.op.hi, p.op.index))


def pool_moves(ops: Sequence[PoolOp]) -> Callable[[int, State], tuple[State, ...]]:
    """The whole pool's transitions: a state is every block's refcount."""

    def moves(i: int, state: State) -> tuple[State, ...]:
        target, kind = ops[i].target, ops[i].op.kind
        if target >= 0:
            return tuple((*state[:target], rc, *state[target + 1 :]) for rc in step(kind, state[target]))
        if target == EMPTY_POOL:
            return (state,) if all(state) else ()
        takes = tuple((*state[:b], 1, *state[b + 1 :]) for b, rc in enumerate(state) if rc == FREE)
        return (state, *takes)

    return moves


def pool_classes(ops: Sequence[PoolOp]) -> list[int]:
    """Open operations with the same target and kind are interchangeable once begun."""
    ids: dict[tuple[int, Kind], int] = {}
    return [ids.setdefault((p.target, p.op.kind), len(ids)) for p in ops]
