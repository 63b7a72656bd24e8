"""check_wakeups: a waiter that sleeps through a free block is caught; fair races are not."""

from __future__ import annotations

from typing import Any

import pytest

from kvstress._violation import InvariantViolation, Operation
from kvstress.checkers import check_wakeups


def op(
    index: int,
    worker: str,
    name: str,
    start: float,
    end: float | None,
    outcome: str = "ok",
    result: Any = None,
    **args: Any,
) -> Operation:
    return Operation(index, worker, name, args, start, end, outcome, result)


def test_a_waiter_sleeping_past_a_released_block_is_a_lost_wakeup() -> None:
    """Block 0 is released at 1.0 and nobody takes it; a waiter since 0.5 times out at 2.0."""
    history = [
        op(0, "a", "acquire", 0.0, 0.1, result=0, timeout=0.0),
        op(1, "b", "acquire", 0.5, 2.0, "info", None, timeout=1.5),
        op(2, "a", "release", 0.9, 1.0, result=True, block=0),
    ]
    with pytest.raises(InvariantViolation) as caught:
        check_wakeups(history, backoff_bound=0.0, slack=0.01)
    assert caught.value.invariant == "lost-wakeup"
    assert "block 0 sat free" in caught.value.message


def test_a_waiter_woken_late_but_given_the_block_is_still_a_lost_wakeup() -> None:
    """Getting the block at its own deadline, long after the release, is still a missed wake-up."""
    history = [
        op(0, "a", "acquire", 0.0, 0.1, result=0, timeout=0.0),
        op(1, "b", "acquire", 0.5, 2.0, result=0, timeout=1.5),
        op(2, "a", "release", 0.9, 1.0, result=True, block=0),
    ]
    with pytest.raises(InvariantViolation, match="lost-wakeup") as caught:
        check_wakeups(history, backoff_bound=0.0, slack=0.01)
    assert "until this acquire took it itself at 2.000000 s" in caught.value.message


def test_the_message_says_where_the_free_stretch_ended() -> None:
    """A waiter that took the block itself at its deadline was reported "taken again at" a later
    acquire's start (the harness's end check): a 10 ms acquire seemed to answer at 60 ms (a blind
    user's report). The stretch ends at the waiter's own take, its return, or another's take."""
    took_it = [
        op(0, "a", "acquire", 0.0, 0.001, result=0, timeout=0.0),
        op(1, "b", "acquire", 0.0, 0.01, result=0, timeout=0.01),
        op(2, "a", "release", 0.0015, 0.002, result=True, block=0),
        op(3, "harness", "acquire", 0.06, 0.0601, result=0, timeout=0),
    ]
    gave_up = [*took_it[:1], op(1, "b", "acquire", 0.0, 0.01, "info", None, timeout=0.01), *took_it[2:]]
    other = [*gave_up[:3], op(3, "c", "acquire", 0.008, 0.0081, result=0, timeout=0)]
    said = []
    for history in (took_it, gave_up, other):
        with pytest.raises(InvariantViolation) as caught:
            check_wakeups(history, backoff_bound=0.0, slack=0.001)
        said.append(caught.value.message)
    assert "until this acquire took it itself at 0.010000 s" in said[0] and "0.06" not in said[0]
    assert "until this acquire returned at 0.010000 s" in said[1]
    assert "until another call took it at 0.008000 s" in said[2]
    # The waiter's own "-> 0" came later, once the other call gave the block back (a blind
    # user read "-> 1 ... until another call took it" as a contradiction).
    again = [
        *took_it[:1],
        op(1, "b", "acquire", 0.0, 0.05, result=0, timeout=0.1),
        took_it[2],
        op(3, "c", "acquire", 0.02, 0.0201, result=0, timeout=0),
        op(4, "c", "release", 0.04, 0.041, result=True, block=0),
    ]
    with pytest.raises(InvariantViolation) as caught:
        check_wakeups(again, backoff_bound=0.0, slack=0.001)
    assert "until another call took it at 0.020000 s; this acquire got it only when it came back" in (
        caught.value.message
    )


def test_a_block_taken_by_another_acquirer_is_not_free() -> None:
    """Fairness is not required: another acquirer may take the released block first."""
    history = [
        op(0, "a", "acquire", 0.0, 0.1, result=0, timeout=0.0),
        op(1, "b", "acquire", 0.5, 2.0, "info", None, timeout=1.5),
        op(2, "a", "release", 0.9, 1.0, result=True, block=0),
        op(3, "c", "acquire", 1.0, 1.0001, result=0, timeout=0.0),
    ]
    check_wakeups(history, backoff_bound=0.0, slack=0.01)


def test_a_block_offered_before_its_release_returned_is_taken_from_then() -> None:
    """A pool may offer inside release: a taker that returned before the release did counts."""
    history = [
        op(0, "a", "acquire", 0.0, 0.1, result=0, timeout=0.0),
        op(1, "c", "acquire", 0.8, 0.95, result=0, timeout=1.0),
        op(2, "a", "release", 0.9, 1.0, result=True, block=0),
        op(3, "b", "acquire", 0.5, 2.0, "info", None, timeout=1.5),
    ]
    check_wakeups(history, backoff_bound=0.0, slack=0.01)


def test_waits_within_the_backoff_bound_and_slack_pass() -> None:
    """A polling pool may see a free block up to its backoff bound late."""
    history = [
        op(0, "a", "acquire", 0.0, 0.1, result=0, timeout=0.0),
        op(1, "b", "acquire", 0.5, 1.035, result=0, timeout=1.5),
        op(2, "a", "release", 0.9, 1.0, result=True, block=0),
    ]
    check_wakeups(history, backoff_bound=0.03, slack=0.01)
    with pytest.raises(InvariantViolation):
        check_wakeups(history, backoff_bound=0.0, slack=0.01)


def test_an_acquire_of_unknown_effect_may_have_taken_the_block() -> None:
    """An acquire that raised could hold the block silently, so the block is not surely free."""
    history = [
        op(0, "a", "acquire", 0.0, 0.1, result=0, timeout=0.0),
        op(1, "b", "acquire", 0.5, 2.0, "info", None, timeout=1.5),
        op(2, "a", "release", 0.9, 1.0, result=True, block=0),
        op(3, "c", "acquire", 1.0, 1.5, "raised", "RuntimeError: boom", timeout=1.0),
    ]
    check_wakeups(history, backoff_bound=0.0, slack=0.01)


def test_a_cancelled_acquire_holds_the_block_back_only_until_it_returns() -> None:
    """A cancelled acquire holds nothing once it returned (the quiet check's lost-block, else):
    it may hold the block during its call, and for ``settle`` after (a reset worker may give it
    back), but a waiter left beside the block past that missed a wake-up. This is how a
    notify consumed by a cancelled waiter is seen (asyncio.Condition before 3.13, gh-112202)."""
    during = [
        op(0, "a", "acquire", 0.0, 0.1, result=0, timeout=0.0),
        op(1, "b", "acquire", 0.5, 1.55, "info", None, timeout=1.05),
        op(2, "a", "release", 0.9, 1.0, result=True, block=0),
        op(3, "c", "acquire", 0.6, 1.5, "info", "cancelled", timeout=1.0),
    ]
    check_wakeups(during, backoff_bound=0.0, slack=0.01, settle=0.05)
    beside = [*during[:1], op(1, "b", "acquire", 0.5, 2.5, "info", None, timeout=2.0), *during[2:]]
    with pytest.raises(InvariantViolation, match="kept waiting") as caught:
        check_wakeups(beside, backoff_bound=0.0, slack=0.01, settle=0.05)
    assert caught.value.invariant == "lost-wakeup"
    # The stretch is counted from the cancelled waiter's return plus the settle, and says so
    # (0.95 s between 1.0 and 2.5 read as wrong arithmetic).
    assert "kept waiting for 0.95 s" in caught.value.message
    assert "counted free from 1.550000 s: another acquire that gave up may have held" in caught.value.message
    assert "batch" not in caught.value.message, "no acquire_many in the history: no batch ahead to name"


@pytest.mark.parametrize(
    ("cancel_timeout", "got_at", "lost"), [(1.0, 1.05, False), (1.0, 1.5, True), (0.2, 1.05, True)]
)
def test_a_cancelled_acquire_the_pool_still_serves_may_hold_the_freed_block_for_the_settle(
    cancel_timeout: float, got_at: float, lost: bool
) -> None:
    """c's acquire was cancelled at 0.7, but a worker of the pool's own still waits for a block
    for c until c's deadline: it takes block 0 as it is released at 1.0 and gives it back within
    ``settle``, and the waiter b gets it then. Not past the settle, and not once c's deadline
    (plus the settle) had passed before the release."""
    history = [
        op(0, "a", "acquire", 0.0, 0.1, result=0, timeout=0.0),
        op(1, "c", "acquire", 0.6, 0.7, "info", "cancelled", timeout=cancel_timeout),
        op(2, "b", "acquire", 0.5, got_at, result=0, timeout=2.0),
        op(3, "a", "release", 0.9, 1.0, result=True, block=0),
    ]
    if not lost:
        check_wakeups(history, backoff_bound=0.0, slack=0.01, settle=0.1)
        return
    with pytest.raises(InvariantViolation, match="kept waiting"):
        check_wakeups(history, backoff_bound=0.0, slack=0.01, settle=0.1)


def test_a_release_that_kept_the_block_frees_nothing() -> None:
    """release -> False (a sharer still holds it) does not start a free stretch."""
    history = [
        op(0, "a", "acquire", 0.0, 0.1, result=0, timeout=0.0),
        op(1, "b", "acquire", 0.5, 2.0, "info", None, timeout=1.5),
        op(2, "a", "release", 0.9, 1.0, result=False, block=0),
    ]
    check_wakeups(history, backoff_bound=0.0, slack=0.01)


def test_a_block_handed_to_a_waiter_that_gave_up_is_free_only_from_its_return() -> None:
    """A FIFO pool hands block 0 to c, queued first; c's timeout races the hand-off and c passes
    the block on to b as it returns at 1.005: b's wait behind c is no missed wake-up."""
    history = [
        op(0, "a", "acquire", 0.0, 0.1, result=0, timeout=0.0),
        op(1, "c", "acquire", 0.4, 1.005, "info", None, timeout=0.6),
        op(2, "b", "acquire", 0.5, 1.005, result=0, timeout=1.5),
        op(3, "a", "release", 0.9, 1.0, result=True, block=0),
    ]
    check_wakeups(history, backoff_bound=0.0, slack=0.01)


def test_a_waiter_that_timed_out_long_after_the_release_excuses_nobody_before_then() -> None:
    """c returns None at 1.5, half a second after block 0 came back: a hand-off that reached it
    at 1.0 would have woken it then (it kept waiting beside its own block), so it may have held
    the block only from the bound before its return. b, waiting from 0.5, was kept waiting
    beside the free block from 1.0: a missed wake-up, one of theirs."""
    history = [
        op(0, "a", "acquire", 0.0, 0.1, result=0, timeout=0.0),
        op(1, "c", "acquire", 0.4, 1.5, "info", None, timeout=1.1),
        op(2, "b", "acquire", 0.5, 1.5, result=0, timeout=1.5),
        op(3, "a", "release", 0.9, 1.0, result=True, block=0),
    ]
    with pytest.raises(InvariantViolation, match=r"lost-wakeup.*until 1\.490000 s, when another acquire"):
        check_wakeups(history, backoff_bound=0.0, slack=0.01)


def test_two_waiters_that_both_time_out_beside_a_free_block_do_not_excuse_each_other() -> None:
    """A notify spent on a third waiter whose deadline landed as the block came back, and
    dropped: b and c slept on to their own timeouts. Each may have been handed the block only as
    it gave up, so from 1.0 the block sat free beside both (CPython bpo-32734's motif)."""
    history = [
        op(0, "a", "acquire", 0.0, 0.1, result=0, timeout=0.0),
        op(1, "d", "acquire", 0.5, 1.0, "info", None, timeout=0.5),
        op(2, "b", "acquire", 0.5, 2.5, "info", None, timeout=2.0),
        op(3, "c", "acquire", 0.5, 2.5, "info", None, timeout=2.0),
        op(4, "a", "release", 0.99, 1.0, result=True, block=0),
    ]
    with pytest.raises(InvariantViolation, match="lost-wakeup"):
        check_wakeups(history, backoff_bound=0.0, slack=0.01)


def test_a_block_passed_on_late_by_a_waiter_that_gave_up_is_a_lost_wakeup() -> None:
    """c gave up at 1.1; b still slept until 2.0 beside the block: that is a missed wake-up."""
    history = [
        op(0, "a", "acquire", 0.0, 0.1, result=0, timeout=0.0),
        op(1, "c", "acquire", 0.4, 1.1, "info", None, timeout=0.7),
        op(2, "b", "acquire", 0.5, 2.0, result=0, timeout=1.5),
        op(3, "a", "release", 0.9, 1.0, result=True, block=0),
    ]
    with pytest.raises(InvariantViolation, match="lost-wakeup"):
        check_wakeups(history, backoff_bound=0.0, slack=0.01)


def test_a_batch_in_line_after_the_block_was_freed_holds_back_the_waiters_behind_it() -> None:
    """From a controlled run of a correct FIFO-fair pool (AsyncFifoBatchPool), stamps as
    recorded: block 0 is freed; b1, holding block 1, asks for both blocks and waits at the head
    of the line; b2 arrives behind it and waits until its timeout. Fair, not a lost wake-up."""
    history = [
        op(0, "b1", "release", 9e-323, 1.04e-322, result=True, block=0),
        op(1, "b1", "acquire", 1.1e-322, 1.14e-322, result=1, timeout=0.0),
        op(2, "b1", "acquire_many", 1.4e-322, 0.2, "info", None, n=2, timeout=0.2),
        op(3, "b2", "acquire", 1.43e-322, 0.05, "info", None, timeout=0.05),
    ]
    check_wakeups(history, backoff_bound=0.0, slack=1e-6)


def test_a_batch_that_began_after_the_waiter_may_still_be_ahead_of_it_in_line() -> None:
    """The waiter's call began first but it was switched out before it took its place in line:
    the batch may be ahead of it."""
    history = [
        op(0, "b1", "release", 0.1, 0.1, result=True, block=0),
        op(1, "b1", "acquire", 0.1, 0.1, result=1, timeout=0.0),
        op(2, "b2", "acquire", 0.11, 0.16, "info", None, timeout=0.05),
        op(3, "b1", "acquire_many", 0.12, 0.3, "info", None, n=2, timeout=0.18),
    ]
    check_wakeups(history, backoff_bound=0.0, slack=1e-6)


def test_a_batch_that_returned_before_the_block_was_freed_excuses_nothing() -> None:
    """The batch had left the line before the release: the waiter sleeping past the free block
    afterwards is a lost wake-up."""
    history = [
        op(0, "b1", "acquire_many", 0.0, 0.1, "info", None, n=2, timeout=0.1),
        op(1, "a", "acquire", 0.0, 0.01, result=0, timeout=0.0),
        op(2, "b2", "acquire", 0.05, 1.0, "info", None, timeout=0.95),
        op(3, "a", "release", 0.2, 0.2, result=True, block=0),
    ]
    with pytest.raises(InvariantViolation) as caught:
        check_wakeups(history, backoff_bound=0.0, slack=1e-6)
    assert caught.value.invariant == "lost-wakeup"
