"""Motifs: the smallest programs in which two protocol calls race, one per pair that can conflict.

A drawn scenario lines up two calls on one block only now and then; these programs do it every
time, and are small enough that every interleaving with one or two delays can be run
(``DelayBoundedScheduler``). They are the short tests a developer writes for a pool, derived
from the protocol alone, not from any pool's code, the shortest first:

- two waiting acquirers arrive at a fresh pool at once, each keeping its block, and a waiter
  beside a try-once there (a pool that creates its blocks on demand, inline or by a worker
  thread of its own, must create one for each: a block made by one acquirer and taken by the
  other, a creation skipped because the last one's block looks idle, a waiter that does not ask
  again when a try-once took the block made for it, leaves a waiter beside a block never made);
- two holders of one shared block release it together (refcount, zero test, double offer);
- a double release through the same handle races the holder's own release (a double-release
  guard checked apart from the change it guards: both pass, the block is queued twice);
- a share (retain) races a sharer's release of the same block;
- two acquirers race for the last free block (check-then-take, counter updates);
- releases come back to a waiter parked in acquire (wake-ups, reset before offer);
- an acquirer arrives as the blocks come back (a check outside the lock a wait releases);
- two waiters, releases in a row (a notify that wakes one where two could go);
- the releases in a row at the instant a second waiter arrives, one parked already (a waiter
  woken once that takes up every pending wake-up, a self-pipe drained whole, leaves the one
  that looked just before the blocks came back parked beside a free block);
- two tenancies of different blocks, taken and given back at once (free-queue and counter
  updates of unrelated blocks);
- an acquirer paused inside its take while another takes two blocks and gives the first back
  (ABA on a free list's head);
- a waiter with no time limit (``acquire(None)``) at an exhausted pool, a block back soon after;
- for async pools: a waiter cancelled as its block is handed to it, alone, and with another
  waiter parked beside it that must then get the block;
- a waiter whose deadline lands as its block is handed to it, behind two parked waiters, and
  first in line with one parked behind it;
- one block back at the instant a waiter arrives that then waits long (a waiter count read
  apart from the release's own change misses the waiter registering in between);
- two workers churning, each taking a block and giving it back, round after round, until the
  pool's indexes have gone round it twice and more (a ring that wraps or rewinds its indexes,
  work deferred to every k-th release: a race that opens only past such a threshold);
- for pools with ``acquire_many``: two batch waiters with no time limit, each for every block,
  at an exhausted pool whose holder gives the blocks back one at a time. One must get them all,
  give them back, and the other then get them: a batch that takes blocks one by one and waits
  holding them (hold-and-wait) can leave each waiter holding part of the pool, waiting for
  ever for the other's part, while nobody holds a block;
- for pools with ``acquire_many``: a batch waiter ahead of a single one, one block free, gives
  up: the single waiter behind it must then get the block (a first-come, first-served pool that
  does not look past a departing front waiter leaves it asleep beside it);
- for pools with ``release_many``: two waiters parked while the holder of every block gives
  them back in one ``release_many`` (a batch release that wakes one waiter, as a single
  release does, leaves the other beside a free block).
"""

from __future__ import annotations

from kvstress.scenarios._programs import HANDOFF_WAIT, Scenario, Step

SETTLE = HANDOFF_WAIT / 50
"""The short sleep that lets the others reach their waits first (virtual time under control)."""


PARKED_WAIT = 1.0
"""The timeout of the parked waiters of the hand-off motif: past the wake-up checks' bound
(``TimingPolicy.slack``), so a waiter left beside a free block is a finding (virtual time: it
costs nothing)."""


CROWD = 4
"""Waiters parked at once in the crowd motif: one more than the drawn scenarios' workers."""

BATCH_MOTIF_MAX_BLOCKS = 4
"""The largest pool the two-batch-waiters motif is run on (its programs grow with the pool)."""


def motifs(
    blocks: int, is_async: bool, *, virtual: bool = True, batch: bool = False, release_batch: bool = False
) -> tuple[Scenario, ...]:
    """The motifs for a pool of ``blocks`` blocks; ``is_async`` adds the cancellation motifs,
    ``batch`` (a pool with ``acquire_many``) the two batch waiters', ``release_batch`` (a pool
    with ``release_many``) the two waiters' parked for one batch release. ``virtual=False``
    (free-running stress, on real time) leaves out the ones whose waiters park for
    ``PARKED_WAIT`` seconds, or for ever: free on virtual time, a second a run (or a hang) on
    real time."""
    wait: Step = ("wait", HANDOFF_WAIT)
    take_all: list[Step] = [("acquire", 0.0)] * blocks
    give_all: list[Step] = [("release", None)] * blocks
    waiter: Step = ("acquire", HANDOFF_WAIT)
    parked: list[Step] = [("sleep", SETTLE / 2), ("acquire", PARKED_WAIT)]
    found = [
        # One call each, at a fresh pool: the shortest runs, first.
        _of([waiter], [waiter]),
        _of([waiter], [("acquire", 0.0)]),
        _of([("acquire", 0.0), ("share", 1), ("release", None)], [wait, ("release", None)]),
        # A double release through the holder's handle, begun once its own release has begun.
        _of([("acquire", 0.0), ("sleep", SETTLE), ("release", None)], [("sleep", SETTLE), ("rerelease", 0)]),
        _of(
            [("acquire", 0.0), ("share", 1), ("share", 2), ("release", None)],
            [wait, ("release", None)],
            [wait, ("release", None)],
        ),
        _of([*take_all, ("release", None)], [("acquire", 0.0)]),
        _of([*take_all, ("sleep", SETTLE), *give_all], [waiter, ("release", None)]),
        _of([*take_all, ("sleep", SETTLE), *give_all], [("sleep", SETTLE), waiter, ("release", None)]),
        # One block back at the instant a waiter arrives, which then waits past the wake-up
        # bound (on virtual time): a release that decides whether to wake anyone from a count of waiters read
        # apart from its own change (a semaphore's post that reads its waiter count before its
        # increment, glibc 12674) misses the waiter that registers in between and leaves it
        # asleep beside the block. With every block back (the motif above) a later release
        # wakes it, and the loss cannot be seen.
        _of(
            [*take_all, ("sleep", SETTLE), ("release", None)],
            [("sleep", SETTLE), parked[-1] if virtual else waiter],
        ),
        # Two waiters parked (on virtual time past the wake-up bound, so one left beside a free
        # block is seen), the blocks back in a row: a notify that wakes one where two could go,
        # a wake-up that only the first woken waiter was to pass on (AQS before PROPAGATE).
        _of([*take_all, ("sleep", SETTLE), *give_all], *([parked] * 2 if virtual else [[waiter]] * 2)),
        # The blocks back in a row at the instant a second waiter arrives, one parked already:
        # a waiter woken once that takes up every pending wake-up (drains a self-pipe, zeroes
        # a count of signals) leaves the one arriving, which looked before the blocks came back,
        # to park beside the block the other did not take. The holder comes last, so that the
        # arrival runs first at that instant (the order a delay-bounded search starts from),
        # and one delay, between its look and its park, opens the window.
        _of(
            parked if virtual else [waiter],
            [("sleep", SETTLE), parked[-1] if virtual else waiter],
            [*take_all, ("sleep", SETTLE), *give_all],
        ),
        _of([("acquire", 0.0), ("release", None)], [("acquire", 0.0), ("release", None)]),
        # One acquirer preempted inside its take while another takes two blocks and gives back
        # the first: the free list's head is the same block again, its link is not (ABA on a
        # lock-free head compared by pointer alone). One delay: the paused take resumes once
        # the other worker is done.
        _of([("acquire", 0.0)], [("acquire", 0.0), ("acquire", 0.0), ("release", "oldest")]),
        # A waiter with no time limit at an exhausted pool, a block back a moment later: it
        # must wait for it (a None taken for 0 by `if not timeout:` gives up at once).
        _of([*take_all, ("sleep", SETTLE), ("release", None)], [("sleep", SETTLE / 2), ("acquire", None)]),
    ]
    found.append(churn(blocks))
    if is_async:
        found.append(
            _of([*take_all, ("sleep", SETTLE), *give_all], [waiter], [("sleep", SETTLE), ("cancel", 1)])
        )
    if is_async and virtual:
        # One block back, handed to the first of two parked waiters just as it is cancelled: the
        # other must get it (asyncio.Condition before Python 3.13 drops that notify, gh-112202).
        # Their wait outlasts the lost-wakeup bound, so a block left beside one is seen.
        found.append(
            _of(
                [*take_all, ("sleep", SETTLE), ("release", None)],
                parked,
                parked,
                [("sleep", SETTLE), ("cancel", 1)],
            )
        )
    if virtual:
        # The same hand-off landing on the first waiter's deadline (its timeout expires at the
        # instant the block comes back): a pool whose timed-out waiter consumed the notify, or
        # the block handed to it, must pass it on to the others; and pass on only that one,
        # two others parked: one that wakes the first waiter not yet woken, the release having
        # woken one already, wakes a second for the one block (asyncio.Lock, bpo-32734).
        found.append(
            _of(
                [*take_all, ("sleep", SETTLE), ("release", None)],
                [("sleep", SETTLE / 2), ("acquire", SETTLE / 2)],
                parked,
                parked,
            )
        )
    if virtual:
        # The same deadline, the waiter first in line, one parked behind it: a release that
        # picks the queue or the waiter to wake before it wakes it (a check under one lock, the
        # wake under it again) finds the first still there, its deadline lands in between and
        # it leaves, and the wake-up goes to nobody while the one behind sleeps beside the
        # block (Linux's sbitmap before 26edb30dd1c0: a wake-up sent to the queue found
        # active, emptied since). Behind two parked ones (above), a wake of its queue reaches
        # another waiter and hides the loss.
        found.append(
            _of(
                [*take_all, ("sleep", SETTLE), ("release", None)],
                [("acquire", SETTLE)],
                [("sleep", SETTLE / 2), parked[-1]],
            )
        )
    if virtual:
        # The same, the first waiter then giving back what it got, the others giving back in
        # turn: a timed-out waiter that took the hand-off's wake-up (it was still queued for
        # it) and never gave the count of pending wake-ups back leaves that count one too high
        # for good, and the next release, counting a wake-up already on its way, wakes nobody
        # (.NET's SemaphoreSlim before it decremented on every wake).
        found.append(
            _of(
                [*take_all, ("sleep", SETTLE), ("release", None)],
                [("sleep", SETTLE / 2), ("acquire", SETTLE / 2), ("release", None)],
                [*parked, ("release", None)],
                [*parked, ("release", None)],
            )
        )
        # A waiter with no time limit parked long (virtual time: free) before a block comes
        # back: a poll whose backoff only a deadline caps sleeps on past the pool's
        # ``backoff_bound`` once it has waited a while (the short wait above never shows it).
        found.append(
            _of(
                [*take_all, ("sleep", PARKED_WAIT), ("release", None)],
                [("sleep", SETTLE / 2), ("acquire", None)],
            )
        )
        # Four waiters parked at once, more than the drawn scenarios' three workers: a waiter
        # list bounded at three (a ``deque(maxlen=3)``) drops the first, which then waits
        # beside the blocks the others took and gave back.
        crowd: list[Step] = [*parked, ("release", None)]
        found.append(_of([*take_all, ("sleep", SETTLE), *give_all], *([crowd] * CROWD)))
    if batch and virtual and 2 <= blocks <= BATCH_MOTIF_MAX_BLOCKS:
        everything: list[Step] = [("sleep", SETTLE / 2), ("acquire_many", [blocks, None]), *give_all]
        found.append(_of([*take_all, ("sleep", SETTLE), *give_all], everything, everything))
        # A batch waiter ahead of a single one, one block back meanwhile, gives up: a pool that
        # serves its waiters first come, first served (no barging past a batch that does not fit
        # yet) must then hand that block to the single waiter behind it (Go's x/sync semaphore
        # left it asleep, golang/go#37852). The holder keeps the rest past the single waiter's wait.
        hold: list[Step] = [
            *take_all,
            ("sleep", SETTLE),
            ("release", None),
            ("sleep", 2 * PARKED_WAIT),
            *give_all[1:],
        ]
        ahead: list[Step] = [("sleep", SETTLE / 4), ("acquire_many", [blocks, 2 * SETTLE])]
        found.append(_of(hold, ahead, [("sleep", SETTLE / 2), parked[-1]]))
    if release_batch and virtual and blocks >= 2:
        found.append(_of([*take_all, ("sleep", SETTLE), ("release_many", None)], parked, parked))
    return tuple(found)


def churn(blocks: int) -> Scenario:
    """Two workers churning: each takes a block and gives it back ``2 * blocks + 1`` times, so
    that together they pass every index of the pool four times and more, one worker's take
    beside the other's give-back at each turn. The longest motif, and the one where a race
    needing three or four preemptions has room (a take paused across another's whole tenancy
    and the next take): PCT's later slices run it too (``kvstress.fuzz``)."""
    rounds: list[Step] = [("acquire", 0.0), ("release", None)] * (2 * blocks + 1)
    return _of(rounds, rounds)


def _of(*programs: list[Step]) -> Scenario:
    return Scenario(tuple(tuple(program) for program in programs))
