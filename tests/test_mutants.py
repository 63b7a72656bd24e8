"""The planted-bug corpus: fuzz catches each mutant with an id it expects; the correct pools pass."""

from __future__ import annotations

import inspect
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

import kvstress.fuzz._slices
import kvstress.mutants
from kvstress import INVARIANTS, BlockState
from kvstress.fuzz import FuzzOutcome, fuzz, load_target, parse_mix
from kvstress.mutants import (
    CORRECT_POOLS,
    MUTANTS,
    AsyncConditionPool,
    PollingCasPool,
    backends_of,
)

MUTANT_BUDGET_S = 30.0
CLEAN_BUDGET_S = 3.0
SHRINK_CAP_S = 3.0
"""How long the state machine may shrink a finding here (``kvstress fuzz`` gives it what is left
of the budget, up to 30 s): these tests check the find, its id and its report, and a mutant the
machine found at 3 s took 40 s with the budget's whole shrink."""


@pytest.fixture(autouse=True)
def _short_shrinks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kvstress.fuzz._slices, "MACHINE_SHRINK_CAP_S", SHRINK_CAP_S)


# Bugs the current harness misses, or names wrongly, with budget MUTANT_BUDGET_S and seed 0.
# Each is observable through the protocol (see its docstring). A miss that is certain is a
# strict xfail, so a harness that starts catching the bug turns the test red until the mark goes;
# a race found only by luck is a plain xfail, so that it cannot make CI flaky either way.
GAPS: dict[type, tuple[bool, str]] = {}


def run_fuzz(cls: type, tmp_path: Path, budget_s: float, backend: str | None = None) -> FuzzOutcome:
    """fuzz the corpus class with the default strategy mix, seed 0, two blocks of (2, 4), on
    ``backend`` (default: the first the class runs on)."""
    backend = backend or (backends_of(cls) or ("asyncio",))[0]
    target = load_target(
        f"{cls.__module__}:{cls.__qualname__}", num_blocks=2, block_shape=(2, 4), backend=backend
    )
    return fuzz(target, budget_s=budget_s, seed=0, mix=parse_mix("auto"), report_dir=tmp_path)


def is_async(cls: type) -> bool:
    """Whether the pool class is of the async flavour."""
    return inspect.iscoroutinefunction(cls.acquire)  # type: ignore[attr-defined]


def mutant_cases() -> list[object]:
    """Every mutant, marked xfail where the harness has a known gap."""
    return [
        pytest.param(cls, id=cls.__name__, marks=pytest.mark.xfail(strict=GAPS[cls][0], reason=GAPS[cls][1]))
        if cls in GAPS
        else pytest.param(cls, id=cls.__name__)
        for cls in MUTANTS
    ]


@pytest.mark.parametrize("cls", mutant_cases())
def test_each_mutant_is_caught_with_an_id_it_expects(cls: type, tmp_path: Path) -> None:
    """fuzz finds the planted bug within the budget, names one of its expected ids, writes a report."""
    outcome = run_fuzz(cls, tmp_path, MUTANT_BUDGET_S)
    assert outcome.finding is not None, f"{cls.__name__}: nothing found in {MUTANT_BUDGET_S:g} s"
    violation = outcome.finding.violation
    assert violation.invariant in cls.expected, (  # type: ignore[attr-defined]
        f"{cls.__name__} expects {cls.expected}, got {violation}"  # type: ignore[attr-defined]
    )
    assert outcome.report is not None and outcome.report.exists()


def clean_cases() -> list[object]:
    """Each correct pool on each backend it runs on (a threaded one once)."""
    cases = []
    for cls in CORRECT_POOLS:
        for backend in backends_of(cls) or ("asyncio",):
            name = cls.__name__ if backend == "asyncio" else f"{cls.__name__}-{backend}"
            cases.append(pytest.param(cls, backend, id=name))
    return cases


@pytest.mark.parametrize(("cls", "backend"), clean_cases())
def test_each_correct_pool_is_clean(cls: type, backend: str, tmp_path: Path) -> None:
    """fuzz finds nothing in a correct pool (an async one on each backend it runs on)."""
    outcome = run_fuzz(cls, tmp_path, CLEAN_BUDGET_S, backend)
    assert outcome.finding is None, outcome.finding.violation.details()
    assert outcome.executions > 0


# -- the corpus' shape ---------------------------------------------------------------------------


def test_the_mutants_cover_every_invariant() -> None:
    """Between them the mutants expect every invariant id, and only known ones."""
    expected = {invariant for cls in MUTANTS for invariant in cls.expected}  # type: ignore[attr-defined]
    assert expected == set(INVARIANTS)


def test_every_mutant_says_its_bug_and_what_to_expect() -> None:
    """Each mutant has a docstring of its own and a non-empty tuple of known ids as ``expected``."""
    for cls in MUTANTS:
        assert cls.__doc__ and cls.__doc__ is not cls.__mro__[1].__doc__, cls
        expected = cls.__dict__.get("expected")
        assert isinstance(expected, tuple) and expected, cls
        assert set(expected) <= set(INVARIANTS), cls


def test_each_mutant_is_a_variant_of_one_correct_pool() -> None:
    """Every mutant subclasses exactly one correct pool, and no class appears twice."""
    for cls in MUTANTS:
        ancestors = [pool for pool in CORRECT_POOLS if issubclass(cls, pool)]
        nearest = [p for p in ancestors if not any(q is not p and issubclass(q, p) for q in ancestors)]
        assert len(nearest) == 1, cls
    assert len(set(MUTANTS)) == len(MUTANTS) and not set(MUTANTS) & set(CORRECT_POOLS)


def test_the_corpus_is_large_enough_and_has_both_flavours() -> None:
    """At least 20 mutants and 3 correct pools, threads and async in both."""
    assert len(MUTANTS) >= 20 and len(CORRECT_POOLS) >= 3
    assert {is_async(cls) for cls in MUTANTS} == {True, False}
    assert {is_async(cls) for cls in CORRECT_POOLS} == {True, False}


def test_the_package_only_re_exports() -> None:
    """kvstress.mutants defines nothing itself and exports every corpus class by name."""
    public = {name: value for name, value in vars(kvstress.mutants).items() if not name.startswith("_")}
    for name, value in public.items():
        if isinstance(value, type):
            assert value.__module__.startswith("kvstress.mutants._"), name
    for cls in (*CORRECT_POOLS, *MUTANTS):
        assert public[cls.__name__] is cls


def test_the_corpus_stands_alone() -> None:
    """Importing kvstress.mutants imports nothing from the test suite."""
    code = (
        "import sys, kvstress.mutants\n"
        "assert not [m for m in sys.modules if m.split('.')[0] in ('pools', 'tests')], sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


# -- the correct pools, directly -----------------------------------------------------------------


@pytest.mark.parametrize("cls", [c for c in CORRECT_POOLS if not is_async(c)], ids=lambda c: c.__name__)
def test_a_threaded_pool_keeps_the_sequential_contract(cls: type) -> None:
    """Zeroed hand-outs, try-once on empty, shared release, double release False, counts agree."""
    pool = cls(2, (2, 3))
    first, second = pool.acquire(0), pool.acquire(None)
    assert (first.state, first.refcount) == (BlockState.ACQUIRED, 1)
    assert pool.acquire(0) is None and pool.free_count() == 0 and pool.free_ids() == []
    pool.mark_in_use(first)
    first.data.fill_(7.0)
    pool.retain(first)
    assert pool.release(first) is False and first.refcount == 1
    assert pool.release(first) is True and first.refcount == 0
    _offered(pool, first)  # a pool may finish a release on a worker (DeferredResetThreadPool)
    assert first.state is BlockState.FREE
    assert pool.release(first) is False and pool.free_ids() == [first.id] and pool.free_count() == 1
    with pytest.raises(ValueError):
        pool.retain(first)
    with pytest.raises(ValueError):
        pool.mark_in_use(first)
    assert pool.release(second) is True
    _offered(pool, second)
    again = pool.acquire(0)
    assert again in (first, second) and not again.data.any()  # FIFO or LIFO: both keep the protocol


def _offered(pool: Any, block: Any) -> None:
    """Wait (at most 2 s) until the pool has queued ``block``."""
    deadline = time.monotonic() + 2.0
    while block.id not in pool.free_ids() and time.monotonic() < deadline:
        time.sleep(0.001)


def test_the_polling_pool_declares_its_backoff() -> None:
    """The polling pool's backoff bound is its longest sleep between two polls."""
    assert PollingCasPool.backoff_bound == PollingCasPool.max_backoff > PollingCasPool.first_backoff > 0


@pytest.mark.anyio
async def test_a_cancelled_waiter_passes_its_wake_up_on(anyio_backend: str) -> None:
    """The first of two waiters is cancelled as a release comes: the second gets the block at once."""
    pool = AsyncConditionPool(1, (2,))
    held = await pool.acquire()
    assert held is not None
    first = anyio.CancelScope()
    got: list[object] = []

    async def wait(scope: anyio.CancelScope) -> None:
        with scope:
            got.append(await pool.acquire(5))

    with anyio.fail_after(1):  # a lost wake-up would leave the second waiter parked for 5 s
        async with anyio.create_task_group() as tg:
            tg.start_soon(wait, first)
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(wait, anyio.CancelScope())
            await anyio.wait_all_tasks_blocked()
            first.cancel()  # the first waiter is cancelled, and the release may still notify it
            await pool.release(held)
    assert got == [held] and pool.free_count() == 0


@pytest.mark.anyio
async def test_a_cancelled_release_still_returns_the_block(anyio_backend: str) -> None:
    """release is shielded: cancelled at once, it still zeroes and queues the block."""
    pool = AsyncConditionPool(1, (2,))
    block = await pool.acquire()
    assert block is not None
    block.data.fill_(1.0)
    with anyio.CancelScope() as scope:
        scope.cancel()
        await pool.release(block)
    assert pool.free_ids() == [block.id] and block.state is BlockState.FREE and not block.data.any()


class FinePollingPool(PollingCasPool):
    """The correct polling pool with a fine backoff: 0.1 ms doubling up to 0.5 ms."""

    first_backoff = 0.0001
    max_backoff = 0.0005
    backoff_bound = 0.0005


def test_a_fine_polling_pool_is_not_called_a_spin(tmp_path: Path) -> None:
    """Hundreds of short sleeps per wait let virtual time move: correct, so never busy-wait."""
    outcome = run_fuzz(FinePollingPool, tmp_path, CLEAN_BUDGET_S)
    assert outcome.finding is None, outcome.finding.violation
