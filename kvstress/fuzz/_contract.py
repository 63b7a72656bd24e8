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

A long history, the same way, runs as a slice of its own (``history``, once, after the mix's
first pass: it takes a second or so, which the searches' first slices must not wait for):
every block taken and given back, round after round (``churn_rounds``), the first handle the
pool gave the first block tried at each round while every block is held, the pool checked at
rest every ``CHURN_CHECK`` rounds and at the end. A pool that loses a block every hundredth
release (a compaction that appends to the old free list), or whose tenancy counter wraps at 256
(a handle of 256 tenancies ago accepted again), shows it only past hundreds of operations, where
every search runs a few dozen an execution (a blind tester's designs, missed by every strategy
and size).

The same slice then runs the contract and the long history on pools of the sizes where size
arithmetic breaks (``LADDER``: odd sizes, a word of 32 or 64 bits and one past it, one past a
byte), each size the factory builds: a bitmap whose padding mask forgets a whole last word (64
blocks), a scan that runs one bit past its word (65), a ring whose 8-bit counters wrap where the
pool's size does not divide 256 (3, 12), block ids kept in a byte (257). Every search runs on
two blocks, or four or eight: a blind tester's bitmap and ring pools passed every strategy.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

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

HISTORY = """\
state = {machine}()
blocks_0 = state.acquire(holder='h0', timeout=0)
retired_0 = state.release(ref=blocks_0)
for round in range({rounds}):  # every block taken, the first block's first handle tried
    held = [state.acquire(holder='h4', timeout=0) for _ in range({blocks})]
    for operation in {uses!r}:
        state.stale_use(ref=retired_0, operation=operation, first=True)
    for ref in held:
        state.release(ref=ref)
    if round % {check} == {last}:
        state.pool_is_consistent()
state.teardown()"""
"""The long history's program, as the state machine would print it, its loop folded."""

CHURN_ROUNDS = 300
"""Rounds of the long history on a pool of up to ``CHURN_MAX_BLOCKS``: past a counter of 8 bits
wrapping (256), and three hundredth releases of a pool of two."""
CHURN_MAX_BLOCKS = 8
"""The largest pool the long history runs ``CHURN_ROUNDS`` on; a larger one runs fewer rounds
(``churn_rounds``): its cost grows with the pool."""
CHURN_PAIRS = 600
"""Acquire and release pairs the long history makes on a pool larger than ``CHURN_MAX_BLOCKS``:
past a ring's counters of 8 bits wrapping (256 takes) and a hundredth release, several times."""
CHURN_MIN_ROUNDS = 3
"""The fewest rounds of the long history, however large the pool."""
CHURN_CHECK = 25
"""Rounds between two checks of the pool at rest in the long history."""

LADDER = (3, 12, 32, 33, 64, 65, 257)
"""The pool sizes, past the run's own, on which the history slice also runs the contract and the
long history (see the module's docstring): sizes that are not powers of two (a ring's 8-bit
counters), a whole word of 32 or 64 bits and one past it (a bitmap's masks and scans), one past
a byte (block ids kept in 8 bits). Smallest first: the slice's time cuts the largest."""
LADDER_ELEMENTS = 1 << 22
"""The most elements a pool of the ladder may hold in all (16 MiB of float32): a size whose
blocks would take more is left out, as a user's large ``--block-shape`` asks."""


def churn_rounds(num_blocks: int) -> int:
    """Rounds of the long history on a pool of ``num_blocks`` (a function of the size alone, so
    that a report's replay at its size runs the same program)."""
    if num_blocks <= CHURN_MAX_BLOCKS:
        return CHURN_ROUNDS
    return max(CHURN_MIN_ROUNDS, -(-CHURN_PAIRS // num_blocks))


def ladder(target: FuzzTarget) -> tuple[int, ...]:
    """The ``LADDER`` sizes past ``target``'s own whose blocks fit ``LADDER_ELEMENTS`` (whether
    the factory builds each is the slice's to probe)."""
    per_block = math.prod(target.block_shape)
    return tuple(n for n in LADDER if n > target.num_blocks and n * per_block <= LADDER_ELEMENTS)


def run_history(target: FuzzTarget) -> tuple[InvariantViolation | None, str]:
    """Run ``HISTORY`` on ``target``'s pool, ``churn_rounds`` rounds: the violation it ends with
    (or None), and the program's text for a report."""
    machine = machine_for(target, CONTRACT_HANG_BOUND, batches=False)
    rounds = churn_rounds(target.num_blocks)
    program = HISTORY.format(
        machine=machine.__name__,
        rounds=rounds,
        blocks=target.num_blocks,
        uses=STALE_USES,
        check=CHURN_CHECK,
        last=CHURN_CHECK - 1,
    )

    def steps(state: Any) -> None:
        retired_0 = state.release(ref=state.acquire(holder="h0", timeout=0))
        _churn(state, target.num_blocks, retired_0, rounds)

    return _run(machine, steps), program


def run_contract(target: FuzzTarget) -> tuple[InvariantViolation | None, str]:
    """Run ``PROGRAM`` on ``target``'s pool: the violation it ends with (or None), and the
    program's text for a report."""
    machine = machine_for(target, CONTRACT_HANG_BOUND, batches=False)
    blocks = range(target.num_blocks)
    every = [f"every_{k} = state.acquire(holder='h3', timeout=0)" for k in blocks]
    every += [f"state.stale_use(ref=retired_1, operation={op!r})" for op in STALE_USES]
    every += [f"state.release(ref=every_{k})" for k in blocks]
    program = PROGRAM.format(machine=machine.__name__, every="\n".join(every))
    return _run(machine, lambda state: _misuse(state, blocks)), program


def _run(machine: Callable[[], Any], steps: Callable[[Any], None]) -> InvariantViolation | None:
    """One execution of a fixed program: ``steps`` on a fresh machine, then its teardown's
    checks; the violation it ends with, if any."""
    _flight.execution_started()
    state = machine()
    try:
        steps(state)
    finally:
        try:
            state.teardown()
        except InvariantViolation as violation:
            return violation
    return None


def _misuse(state: Any, blocks: range) -> None:
    """``PROGRAM``'s steps, the pool checked at rest after each."""
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


def _churn(state: Any, num_blocks: int, stale: Any, rounds: int) -> None:
    """The long history (see the module's docstring); it stops at the first violation."""
    for round_ in range(rounds):
        held = [state.acquire(holder="h4", timeout=0) for _ in range(num_blocks)]
        for operation in STALE_USES:
            state.stale_use(ref=stale, operation=operation, first=True)
        for ref in held:
            state.release(ref=ref)
        if state.violation is not None:
            return
        if round_ % CHURN_CHECK == CHURN_CHECK - 1:
            state.pool_is_consistent()
