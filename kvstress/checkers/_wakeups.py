"""Wake-ups, judged on a whole history: no acquire keeps waiting while a block sits free.

A block is *surely free* from the end of a release that returned True until the earliest moment
anything could have taken it again: the start of any acquire that answered with that block after
the release began (the pool may offer it before the release returns), or of any acquire whose
effect is unknown (raised, pending). A cancelled acquire holds nothing once it returned (the
quiet checks' ``lost-block`` otherwise), so it only holds the block back until its return
(plus ``settle``: it may give it back through a reset worker); or, where the pool still serves
it after its return (a worker thread or an actor that waits on its behalf until its deadline),
from the block's release until ``settle`` after. For the waiter itself, its own take counts at
its return: once it holds the block it has no reason to wait on. An acquire that was waiting
through such a stretch for longer than the pool's backoff bound plus the slack, plus the time
its thread could not run (``observed["excused_s"]``), missed a wake-up. Fair pools are allowed
for (docs/protocol.md, "Fairness and hand-off"): a block another waiter took is not free, and a
block released while other acquires were waiting may have been handed to one of them that then
gave up (timed out or was cancelled as the hand-off reached it), so it counts as free only from
that one's return on. As it gave up: a hand-off that reached a waiter still waiting wakes it
within the bound, so one that timed out held the block back from no earlier than the bound
(plus its own excused time) before its return. The waiter is judged on the longest stretch
outside every such hold.

``acquire_many`` (an optional member): a batch that answered with the block took it, like an
acquire; one whose effect is unknown may have. A FIFO-fair pool serves a batch at the head of
its line before a single acquirer behind it, and holds the blocks back for it. Where a caller
stands in line is not seen from outside: a batch that began after a waiter may have entered the
line first (the waiter was switched out between its call and the pool's lock). So for a waiter,
a block counts as free only from the return of every batch that was in flight after the block
was freed and began before the waiter returned, whatever the batch answered. Only single
acquires are judged here; a batch waiter's own wake-up is the batch probe's to judge.

A release that returned with its block still RELEASING (``observed["deferred"]``: the pool's
reset worker offers it later) does not say when the block became free: it counts as free from
``settle`` seconds after the release returned, the time the quiet checks give such a pool to
offer a released block.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvstress._violation import InvariantViolation, Operation
from kvstress.linearize._model import may_linger, served_until


def check_wakeups(
    history: Sequence[Operation], backoff_bound: float, slack: float, settle: float = 0.0
) -> None:
    """Raise ``lost-wakeup`` for an acquire that waited past a surely free block (see above);
    a deferred release's block counts as free ``settle`` seconds after its release returned."""
    bound = backoff_bound + slack
    acquires = [op for op in history if op.name == "acquire"]
    batches = [op for op in history if op.name == "acquire_many"]
    for release in history:
        if release.name != "release" or release.outcome != "ok" or release.result is not True:
            continue
        block = release.args.get("block")
        freed = release.end
        if freed is None:
            continue
        late = ""
        if release.observed and release.observed.get("deferred"):
            freed += settle  # the pool's reset worker has that long to offer it
            late = f", offered later by the pool: counted free from {freed:.6f} s"
        takers = [op for op in (*acquires, *batches) if _may_take(op, block, release.start)]
        # Each acquire that gave up while the block was being handed on, with its return; and
        # each cancelled one still in flight once the block was freed, which may have held it
        # until it returned (and then for ``settle``, should it go back through a reset worker):
        # a cancelled acquire holds nothing after (the quiet checks' lost-block).
        # Each as (op, from, until): a hand-off that reached a waiter still waiting wakes it
        # within the bound, so one that timed out held the block back from no earlier than the
        # bound (and its own excused time) before its return; held longer, it kept waiting
        # beside its own block, and two waiters that both time out beside one free block do
        # not excuse each other (a notify dropped by a timed-out waiter, two others parked).
        handed = [
            (op, freed, op.end + settle)
            if op.result == "cancelled"
            else (op, _handed_from(op, freed, bound), op.end)
            for op in acquires
            if op.end is not None
            and _gave_up(op)
            and freed <= op.end
            and (op.start <= freed or op.result == "cancelled")
        ]
        # And each cancelled one that returned before, but which the pool may still serve (a
        # worker or an actor waits for a block on its behalf until its deadline): it may take
        # the block as it is freed, find its caller gone, and give it back within ``settle``.
        handed += [(op, freed, freed + settle) for op in acquires if _served_after_return(op, freed, settle)]
        # Each batch still waiting once the block was freed, with its start and return.
        queued = [(op.start, op.end) for op in batches if op.end is not None and op.end >= freed]
        for waiter in acquires:
            if waiter.end is None or waiter.outcome not in ("ok", "info") or waiter.result == "cancelled":
                continue
            # The waiter's own take counts at its return: holding a block, it has no reason
            # to keep waiting.
            taken = min((op.start for op in takers if op is not waiter), default=float("inf"))
            held = [(since, until) for op, since, until in handed if op is not waiter]
            held += [(freed, end) for start, end in queued if start < waiter.end]
            free_from, free_to = _longest_free(max(freed, waiter.start), min(taken, waiter.end), held)
            # Time the waiter's own thread could not run (an OS stall, a jump for a sleeper
            # while it sat runnable) is not a missed wake-up.
            excused = waiter.observed.get("excused_s", 0.0) if waiter.observed else 0.0
            if free_to - free_from > bound + excused:
                reserved = max((until for _, until in held if until <= free_from), default=freed)
                until = (
                    _until(waiter, block, taken)
                    if free_to >= min(taken, waiter.end)
                    else f"until {free_to:.6f} s, when another acquire that then timed out may have "
                    "been handed it"
                )
                raise InvariantViolation(
                    "lost-wakeup",
                    f"{waiter.describe()} kept waiting for {free_to - free_from:.6g} s while block "
                    f"{block} sat free (released by {release.worker} at {release.end:.6f} s{late}"
                    f"{_from(waiter, freed, reserved, free_from, bool(batches))}, {until}); "
                    f"the bound is {bound:.6g} s (backoff {backoff_bound:g} + slack {slack:g})",
                    history=tuple(history),
                )


def _from(waiter: Operation, freed: float, reserved: float, free_from: float, batches: bool) -> str:
    """Where the free stretch began, when not at the release: the waiter's own call, or the
    moment a waiter that gave up (or, in a history with ``batches``, a batch ahead) may have
    held the block until (the stretch read as 0.8995 s between 0.001 and 1.0005 s, a blind
    user's; "a batch ahead" named to a pool without acquire_many was noise, another's)."""
    if free_from <= freed:
        return ""
    if free_from == waiter.start and free_from >= reserved:
        return f", counted from this acquire's call at {free_from:.6f} s"
    ahead = ", or a batch ahead," if batches else ""
    return (
        f", counted free from {free_from:.6f} s: another acquire that gave up{ahead} may have held "
        "it until then"
    )


def _until(waiter: Operation, block: object, taken: float) -> str:
    """Where the free stretch ended: the waiter's own return (with the block, or without), or
    another call's take (a later acquire named as "taken again" when the waiter had taken the
    block itself read as a 10 ms acquire answering at 60 ms, a blind user's report)."""
    end = waiter.end if waiter.end is not None else float("inf")
    if end <= taken:
        if waiter.outcome == "ok" and waiter.result == block:
            # Its own block all along, maybe: a pool that set it aside for this waiter (or handed
            # it part of a batch) and did not wake it holds it back the same (a blind user looked
            # for a missed notify to another waiter first).
            return (
                f"until this acquire took it itself at {end:.6f} s; set aside for this acquire "
                "or not, it sat unused while this acquire waited"
            )
        return f"until this acquire returned at {end:.6f} s"
    if waiter.outcome == "ok" and waiter.result == block:
        # The waiter's "-> 1" is its answer at its return, after the block came back once more.
        return (
            f"until another call took it at {taken:.6f} s; this acquire got it only when it came "
            f"back again, returning at {end:.6f} s"
        )
    return f"until another call took it at {taken:.6f} s"


def _may_take(op: Operation, block: object, since: float) -> bool:
    """Could ``op`` have taken ``block`` after ``since`` (when its release began: a pool may
    offer it before the release returns)?"""
    if op.end is not None and op.end < since:
        return False
    if op.outcome == "ok":
        if op.name == "acquire_many":
            return isinstance(op.result, list) and block in op.result
        return bool(op.result == block)
    # A cancelled call holds nothing once it returned: it is no taker, only a reservation until
    # then (an acquire's, above; a batch's, in the queue of batches).
    return op.outcome in ("pending", "raised")


def _served_after_return(op: Operation, at: float, settle: float) -> bool:
    """An acquire that returned before ``at`` without a block, cancelled or timed out, and that
    the pool may still be serving then: until its deadline plus ``settle``, or for good without
    a timeout (as the linearizability model's ``may_linger`` and ``served_until``)."""
    if not may_linger(op) or op.end is None or op.end >= at:
        return False
    until = served_until(op, settle)
    return until is None or at <= until


def _longest_free(start: float, end: float, held: list[tuple[float, float]]) -> tuple[float, float]:
    """The longest stretch of ``start``..``end`` outside every ``held`` (from, until) interval
    (``start``, ``start``: none)."""
    best = (start, start)
    at = start
    for since, until in sorted(held):
        if since > at and min(since, end) - at > best[1] - best[0]:
            best = (at, min(since, end))
        at = max(at, until)
        if at >= end:
            return best
    if end - at > best[1] - best[0]:
        best = (at, end)
    return best


def _handed_from(op: Operation, freed: float, bound: float) -> float:
    """The earliest a block freed at ``freed`` may have been held for ``op``, an acquire that
    timed out: a hand-off as it gave up, within the bound (and the time its thread could not
    run) before its return."""
    assert op.end is not None
    excused = op.observed.get("excused_s", 0.0) if op.observed else 0.0
    return max(freed, op.end - bound - excused)


def _gave_up(op: Operation) -> bool:
    """An acquire that returned without a block: timed out (None) or cancelled."""
    return (
        op.end is not None
        and op.outcome in ("ok", "info")
        and (op.result is None or op.result == "cancelled")
    )
