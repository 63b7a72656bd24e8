"""Per-operation postconditions: states after each call, refcounts, release results, misuse."""

from __future__ import annotations

from collections.abc import Mapping

from kvstress._violation import InvariantViolation
from kvstress.pool._state import BlockState


def check_acquired(block_id: object, num_blocks: int, clash: tuple[str, ...]) -> None:
    """acquire returned a valid id of a block nobody holds."""
    if not isinstance(block_id, int) or not 0 <= block_id < num_blocks:
        raise InvariantViolation(
            "queue-corruption", f"acquire returned a block with id {block_id!r}, outside 0..{num_blocks - 1}"
        )
    if clash:
        raise InvariantViolation(
            "shared-block", f"acquire handed out block {block_id}, which {_holds(clash)}"
        )


def check_fresh_state(block_id: int, state: BlockState, refcount: int) -> None:
    """A block returned by acquire is ACQUIRED with refcount 1."""
    if state is not BlockState.ACQUIRED:
        raise InvariantViolation(
            "illegal-transition", f"acquire returned block {block_id} in state {state.name}, not ACQUIRED"
        )
    if refcount != 1:
        raise InvariantViolation(
            "refcount", f"acquire returned block {block_id} with refcount {refcount}, not 1"
        )


def check_state(block_id: int, state: BlockState, expected: BlockState, after: str) -> None:
    """After ``after``, the block is in ``expected``."""
    if state is not expected:
        raise InvariantViolation(
            "illegal-transition",
            f"after {after}, block {block_id} is {state.name}, not {expected.name}",
        )


def check_refcount(block_id: int, refcount: int, expected: int, after: str) -> None:
    """The block's refcount is what the references handed out add up to."""
    if refcount != expected:
        raise InvariantViolation(
            "refcount", f"after {after}, block {block_id} has refcount {refcount}, expected {expected}"
        )


def check_refcount_at_least(block_id: int, refcount: int, least: int, after: str) -> None:
    """While others may act: the references the caller alone knows are held set a floor."""
    if refcount < least:
        raise InvariantViolation(
            "refcount", f"after {after}, block {block_id} has refcount {refcount}, expected at least {least}"
        )


def check_release_result(block_id: int, returned: object, last: bool) -> None:
    """release answers True exactly when it dropped the last reference (sequential runs)."""
    if returned is True and not last:
        raise InvariantViolation(
            "refcount",
            f"release of block {block_id} returned True although another holder still retains it",
        )
    if returned is not True and last:
        raise InvariantViolation(
            "lost-block",
            f"release of the last reference to block {block_id} returned {returned!r}, not True",
        )


def check_release_accounting(ended: Mapping[int, int], returned: Mapping[int, int]) -> None:
    """Over a concurrent batch, each ended tenancy had exactly one release answering True."""
    for block_id in sorted(set(ended) | set(returned)):
        e, r = ended.get(block_id, 0), returned.get(block_id, 0)
        if r > e:
            raise InvariantViolation(
                "double-release",
                f"releases of block {block_id} answered True {r} times for {e} ended tenancies",
            )
        if r < e:
            raise InvariantViolation(
                "lost-block",
                f"block {block_id} had {e} tenancies ended but its releases answered True only {r} times",
            )


def check_double_release(block_id: int, returned: object, before: object, after: object) -> None:
    """A release of a block nobody holds answers False and changes nothing."""
    if returned is not False:
        raise InvariantViolation(
            "double-release", f"a second release of block {block_id} returned {returned!r}, not False"
        )
    if before != after:
        raise InvariantViolation(
            "double-release",
            f"a second release of block {block_id} changed the pool: (free_count, free_ids) "
            f"went from {before} to {after}",
        )


def check_stale_refused(
    block_id: int, operation: str, raised: bool, returned: object, before: object, after: object
) -> None:
    """retain, mark_in_use or release through the handle of a block's earlier tenancy, while
    the block is held again through another handle, is refused (retain and mark_in_use raise,
    release answers False or raises) and changes nothing."""
    what = (
        f"{operation} of block {block_id} through a stale handle (its earlier tenancy's; the block "
        "is held again, through another handle)"
    )
    release = operation == "release"
    kind = "double-release" if release else "illegal-transition"
    if release and not raised and returned is not False:
        raise InvariantViolation(
            kind, f"{what} returned {returned!r}, not False: it would free another holder's block"
        )
    if not release and not raised:
        raise InvariantViolation(kind, f"{what} did not raise")
    if before != after:
        raise InvariantViolation(
            kind, f"{what} changed the pool: (free_count, free_ids) went from {before} to {after}"
        )


def check_misuse_raised(block_id: int, operation: str, raised: bool, state: BlockState) -> None:
    """retain or mark_in_use on a block that is not held must raise."""
    if not raised:
        raise InvariantViolation(
            "illegal-transition",
            f"{operation} on block {block_id}, which nobody holds ({state.name}), did not raise",
        )


def _holds(holders: list[str] | tuple[str, ...]) -> str:
    """``b1 still holds`` or ``b1, b2 still hold``."""
    return f"{', '.join(holders)} still {'holds' if len(holders) == 1 else 'hold'}"
