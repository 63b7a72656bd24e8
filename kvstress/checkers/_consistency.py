"""Checks at quiescent points: the free queue, the counter and conservation of blocks."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence

from kvstress._violation import InvariantViolation
from kvstress.pool._state import BlockState


def check_queue(free_ids: Sequence[int], num_blocks: int, states: Mapping[int, BlockState]) -> None:
    """The queue holds each id once, only ids in range, and only blocks whose state is FREE."""
    dupes = sorted(i for i, n in Counter(free_ids).items() if n > 1)
    if dupes:
        raise InvariantViolation("queue-corruption", f"the free queue holds block(s) {dupes} more than once")
    bad = [i for i in free_ids if not isinstance(i, int) or not 0 <= i < num_blocks]
    if bad:
        raise InvariantViolation(
            "queue-corruption", f"the free queue holds id(s) {bad!r} outside 0..{num_blocks - 1}"
        )
    not_free = {i: states[i].name for i in free_ids if i in states and states[i] is not BlockState.FREE}
    if not_free:
        raise InvariantViolation(
            "queue-corruption", f"the free queue holds block(s) that are not FREE: {not_free}"
        )


def check_held_not_queued(free_ids: Collection[int], held: Mapping[int, tuple[str, ...]]) -> None:
    """No block is in the free queue while a holder still has a reference to it."""
    freed = sorted(set(free_ids) & set(held))
    if freed:
        who = {b: list(held[b]) for b in freed}
        raise InvariantViolation(
            "refcount", f"block(s) {freed} are back in the free queue while still held: {who}"
        )


def on_its_way_back(num_blocks: int, held: Collection[int], free_ids: Collection[int]) -> set[int]:
    """Blocks nobody holds that are not in the free queue either. At rest there are none; a pool
    that finishes a release after it returned (a reset worker, a task, a stream callback) has
    such blocks for a moment, and a quiet check waits for them (the harness) or leaves them to
    whoever can wait (the audit). A block that never arrives is lost (``check_conservation``)."""
    queued = set(free_ids)
    return {b for b in range(num_blocks) if b not in held and b not in queued}


def check_conservation(num_blocks: int, held: Collection[int], free_ids: Collection[int]) -> None:
    """Every block is either held by someone or in the free queue: none leaked."""
    lost = sorted(set(range(num_blocks)) - set(held) - set(free_ids))
    if lost:
        raise InvariantViolation(
            "lost-block", f"block(s) {lost} are neither held by anyone nor in the free queue (leaked)"
        )


def check_counter(free_count: int, free_ids: Sequence[int], free_states: int) -> None:
    """free_count() equals the queue's length and the number of FREE blocks."""
    if free_count != len(free_ids) or free_count != free_states:
        raise InvariantViolation(
            "counter-mismatch",
            f"free_count() is {free_count}, but the free queue holds {len(free_ids)} and "
            f"{free_states} blocks are FREE",
        )
