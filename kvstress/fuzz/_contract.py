"""The sequential contract, first: one fixed program of the misuse a user's first test tries.

Before any search, a fuzz run (the default mix) drives the pool once through the state
machine's own rules, in one fixed order: acquire, mark, share, both releases, a double release,
a retain and a mark through the released handle; then a block released unused, as an aborted
request's is, and every block taken at once (``timeout=0``: each is free) and given back, so
a pool whose capacity did not all come back (a unit of a semaphore lost on one release path)
shows it; while every block is held, a retain, a mark and a release through the first block's
handle of a tenancy that has ended (a pool with a handle per tenancy must refuse each, and
leave the new holder's block as it was). The quiescent check runs after each step. It costs
milliseconds, and a pool that clamps a double release or accepts a retain on a FREE block fails
it at once, where the state machine's random programs take a second or more to try that misuse.
Nothing is random, so its report replays exactly.
"""

from __future__ import annotations

from kvstress import _flight
from kvstress._violation import InvariantViolation
from kvstress.fuzz._target import FuzzTarget, machine_for

CONTRACT_HANG_BOUND = 1.0  # seconds: an operation of the program that never returns is a hang
STALE_USES = ("retain", "mark_in_use", "release")
"""What the program tries through the first block's stale handle once every block is held: a
pool that gives each tenancy its own handle must refuse each (one that gives every tenancy the
same handle cannot tell the holders apart, and is not judged)."""

PROGRAM = """\
state = {machine}()
blocks_0 = state.acquire(holder='h0', timeout=0)
state.mark_in_use(ref=blocks_0)
blocks_1 = state.share(ref=blocks_0, to='h1')
retired_0 = state.release(ref=blocks_1)
retired_1 = state.release(ref=blocks_0)
state.double_release(ref=retired_1)
state.misuse(ref=retired_1, operation='retain')
state.misuse(ref=retired_1, operation='mark_in_use')
blocks_2 = state.acquire(holder='h2', timeout=0)
retired_2 = state.release(ref=blocks_2)
{every}
state.teardown()"""
"""The program, as the state machine prints one (``{machine}``: the machine's class name;
``{every}``: each block taken, then each given back)."""


def run_contract(target: FuzzTarget) -> tuple[InvariantViolation | None, str]:
    """Run ``PROGRAM`` on ``target``'s pool: the violation it ends with (or None), and the
    program's text for a report."""
    machine = machine_for(target, CONTRACT_HANG_BOUND, batches=False)
    blocks = range(target.num_blocks)
    every = [f"every_{k} = state.acquire(holder='h3', timeout=0)" for k in blocks]
    every += [f"state.stale_use(ref=retired_1, operation={op!r})" for op in STALE_USES]
    every += [f"state.release(ref=every_{k})" for k in blocks]
    program = PROGRAM.format(machine=machine.__name__, every="\n".join(every))
    _flight.execution_started()
    state = machine()
    try:
        blocks_0 = state.acquire(holder="h0", timeout=0)
        state.pool_is_consistent()
        state.mark_in_use(ref=blocks_0)
        state.pool_is_consistent()
        blocks_1 = state.share(ref=blocks_0, to="h1")
        state.pool_is_consistent()
        state.release(ref=blocks_1)
        state.pool_is_consistent()
        retired_1 = state.release(ref=blocks_0)
        state.pool_is_consistent()
        state.double_release(ref=retired_1)
        state.pool_is_consistent()
        state.misuse(ref=retired_1, operation="retain")
        state.pool_is_consistent()
        state.misuse(ref=retired_1, operation="mark_in_use")
        state.pool_is_consistent()
        blocks_2 = state.acquire(holder="h2", timeout=0)
        state.pool_is_consistent()
        state.release(ref=blocks_2)  # unused: an aborted request's block
        state.pool_is_consistent()
        every = []
        for _ in blocks:  # every block is free: each comes at once
            every.append(state.acquire(holder="h3", timeout=0))
            state.pool_is_consistent()
        for operation in STALE_USES:  # the first block is held again, through another handle
            state.stale_use(ref=retired_1, operation=operation)
            state.pool_is_consistent()
        for ref in every:
            state.release(ref=ref)
            state.pool_is_consistent()
    finally:
        try:
            state.teardown()
        except InvariantViolation as violation:
            return violation, program
    return None, program
