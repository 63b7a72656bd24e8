"""The pool state machine: silent on correct pools, and it names the bug of every broken one."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test
from machine_settings import ci, hunt
from pools import broken
from pools._simple import SimpleAsyncPool, SimpleThreadedPool

import kvstress
from kvstress import TimingPolicy
from kvstress._violation import InvariantViolation
from kvstress.harness import PoolDriver
from kvstress.mutants import AsyncShieldedReleaseYieldPool, AsyncShieldedYieldPool

# derandomize: the same examples every run, so CI is deterministic and failures replay.
CI = ci(200)
HUNT = hunt(CI, 300)
QUICK_HANGS = TimingPolicy(hang_bound=1.0)

CORRECT = [
    pytest.param(kvstress.ThreadedBlockPool, "asyncio", 50, id="ThreadedBlockPool"),
    pytest.param(kvstress.AsyncBlockPool, "asyncio", 50, id="AsyncBlockPool-asyncio"),
    pytest.param(kvstress.AsyncBlockPool, "trio", 50, id="AsyncBlockPool-trio"),
    pytest.param(SimpleThreadedPool, "asyncio", 40, id="SimpleThreadedPool"),
    pytest.param(SimpleAsyncPool, "trio", 40, id="SimpleAsyncPool-trio"),
    pytest.param(SimpleAsyncPool, "asyncio", 30, id="SimpleAsyncPool-asyncio"),
]


def expected_ids(pool: type) -> set[str]:
    """The ids a broken pool declares (one id, or several when its bug has several faces)."""
    expected = pool.expected
    return {expected} if isinstance(expected, str) else set(expected)


def first_violation(run: Callable[[], None]) -> InvariantViolation:
    """Run, and return the violation raised, also from inside Hypothesis' flaky-failure group
    (a concurrency bug may not recur on the replay Hypothesis makes to confirm it)."""
    try:
        run()
    except InvariantViolation as violation:
        return violation
    except BaseExceptionGroup as group:
        matched, _ = group.split(InvariantViolation)
        while isinstance(matched, BaseExceptionGroup):
            matched = matched.exceptions[0]
        if isinstance(matched, InvariantViolation):
            return matched
        raise
    pytest.fail("no violation found")


@pytest.mark.parametrize(("factory", "backend", "examples"), CORRECT)
def test_machine_is_silent_on_correct_pools(factory: type, backend: str, examples: int) -> None:
    """Some fifty derandomized examples of 30 steps find nothing on a correct pool (most of
    their time is real time: timeouts and wake-up probes waiting out their bounds)."""
    machine = kvstress.pool_machine(factory, backend=backend)
    run_state_machine_as_test(machine, settings=settings(CI, max_examples=examples))


def broken_cases() -> list[Any]:
    """Every broken pool; the async ones on asyncio and on trio."""
    cases = []
    for pool in broken.BROKEN_POOLS:
        backends = ["asyncio", "trio"] if inspect.iscoroutinefunction(pool.acquire) else ["asyncio"]
        for backend in backends:
            suffix = f"-{backend}" if len(backends) > 1 else ""
            cases.append(pytest.param(pool, backend, id=f"{pool.__name__}{suffix}"))
    return cases


def test_every_invariant_id_has_a_pool_that_shows_only_it() -> None:
    """Each of the 14 ids is the sole expected id of at least one broken pool."""
    sole = {pool.expected for pool in broken.BROKEN_POOLS if isinstance(pool.expected, str)}
    assert sole == set(kvstress.INVARIANTS)


@pytest.mark.parametrize(("pool", "backend"), broken_cases())
def test_machine_names_the_planted_bug(pool: type, backend: str) -> None:
    """The machine fails on each broken pool with the pool's expected invariant id."""
    timing = TimingPolicy(hang_bound=pool.hang_bound) if hasattr(pool, "hang_bound") else QUICK_HANGS
    machine = kvstress.pool_machine(pool, backend=backend, timing=timing)
    violation = first_violation(lambda: run_state_machine_as_test(machine, settings=HUNT))
    assert violation.invariant in expected_ids(pool), violation.details()


@pytest.mark.parametrize("pool", [AsyncShieldedYieldPool, AsyncShieldedReleaseYieldPool])
def test_a_block_lost_to_task_cancel_is_caught_on_asyncio(pool: type) -> None:
    """An acquire that yields, shielded, after its take, or a release that yields, shielded,
    halfway, loses the block to plain Task.cancel(): the machine cancels acquires and releases
    that way on asyncio and names the leak lost-block."""
    machine = kvstress.pool_machine(pool, backend="asyncio", timing=QUICK_HANGS)
    violation = first_violation(lambda: run_state_machine_as_test(machine, settings=HUNT))
    assert violation.invariant == "lost-block", violation.details()


def test_a_release_from_a_cancelled_scope_is_tried_on_trio() -> None:
    """The machine releases from inside a cancel scope already cancelled, as an unshielded
    cleanup path does: a trio release that changes the block and then awaits ``send`` is
    cancelled there and the block is lost; the same pool sending without awaiting is clean."""
    from pools.trio_channel import ChannelPool, FreeThenSendPool

    machine = kvstress.pool_machine(FreeThenSendPool, backend="trio", timing=QUICK_HANGS)
    violation = first_violation(lambda: run_state_machine_as_test(machine, settings=HUNT))
    assert violation.invariant in ("lost-block", "counter-mismatch", "queue-corruption"), violation.details()
    assert "release_in_cancelled_scope" in (violation.program or "")
    clean = kvstress.pool_machine(ChannelPool, backend="trio")
    run_state_machine_as_test(clean, settings=settings(CI, max_examples=15))


def test_task_cancel_is_asyncio_only() -> None:
    """On trio, where shields hold, the same pools are correct and the machine stays silent;
    the driver refuses the steps where they do not apply."""
    for pool in (AsyncShieldedYieldPool, AsyncShieldedReleaseYieldPool):
        machine = kvstress.pool_machine(pool, backend="trio")
        run_state_machine_as_test(machine, settings=settings(CI, max_examples=15))
    driver = PoolDriver(kvstress.ThreadedBlockPool, num_blocks=1)
    try:
        assert not driver.cancels_tasks
        with pytest.raises(ValueError, match="async pool on asyncio, not a threaded pool"):
            driver.acquire_task_cancelled("h0", 0.0, 1)
        with pytest.raises(ValueError, match="async pool on asyncio"):
            driver.release_task_cancelled("h0", 0, 1)
    finally:
        driver.close()


def test_failure_prints_a_replayable_program() -> None:
    """A failing run carries Hypothesis' program (state = ...; state.acquire(...)) and the dump."""
    machine = kvstress.pool_machine(broken.NoResetPool)
    with pytest.raises(InvariantViolation) as info:
        # Ten steps an example: shrinking a thirty-step program took most of a minute.
        run_state_machine_as_test(
            machine, settings=settings(CI, stateful_step_count=10, report_multiple_bugs=False)
        )
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "state = NoResetPoolMachine()" in notes
    assert "state.teardown()" in notes and notes.count("state.") >= 3
    assert info.value.history and info.value.blocks
    assert "dirty-read" in info.value.details()


def test_generated_testcase_runs_under_unittest() -> None:
    """pool_machine(Pool).TestCase is a unittest case that passes on a correct pool."""
    machine = kvstress.pool_machine(kvstress.ThreadedBlockPool, settings=settings(CI, max_examples=10))
    result = machine.TestCase().run()
    assert result is not None and result.wasSuccessful()


# What the README tells users to write: pytest collects the generated TestCase.
TestThreadedBlockPoolMachine = kvstress.pool_machine(
    kvstress.ThreadedBlockPool, settings=settings(CI, max_examples=20)
).TestCase


def test_an_async_pool_that_runs_only_on_the_other_backend_is_refused_with_the_one_to_choose() -> None:
    """A trio-native pool under ``pool_machine`` without ``backend="trio"`` was a 'crash' blamed
    on the pool at the first example (a blind user's); now a ValueError names the backend to
    choose, as ``kvstress fuzz`` does. Pools that run on the given backend are untouched."""
    from pools.trio_channel import ChannelPool

    with pytest.raises(
        ValueError, match=r"^backend: ChannelPool cannot run on asyncio .* choose backend='trio'$"
    ):
        kvstress.pool_machine(ChannelPool)
    assert kvstress.pool_machine(ChannelPool, backend="trio").factory is ChannelPool
    assert kvstress.pool_machine(kvstress.AsyncBlockPool).factory is kvstress.AsyncBlockPool


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({"num_blocks": 0}, "num_blocks must be an int >= 1"),
        ({"block_shape": (0,)}, "block_shape must hold ints >= 1"),
    ],
)
def test_a_bad_size_is_refused_when_the_machine_is_made(given: dict[str, Any], said: str) -> None:
    """Not first when its TestCase runs (a blind tester's ``num_blocks=0``)."""
    with pytest.raises(ValueError, match=said):
        kvstress.pool_machine(SimpleThreadedPool, **given)
