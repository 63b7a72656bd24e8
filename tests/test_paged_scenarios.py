"""Concurrent scenarios over the paged layer under the controlled thread schedulers (seeded, bounded).

Workers fork, append, free and hit the prefix cache at once; every line of the paged modules
and the pool's is a scheduling point. A worker checks what it reads back against the model
(kvstress.paged._machine.prompt_kv/token_kv); once the workers are done the manager is quiet
and its refcounts, free count, cached content and wholeness are checked.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import paged_mutants
import pytest
import torch
from paged_mutants import ReleaseBeforeUnhashManager, UnpinnedLookupManager

import kvstress
from kvstress.controlled import explore_threads, spawn
from kvstress.mutants import CondvarPool, PollingCasPool
from kvstress.paged import BlockManager, BlockTable, Degradation, PagingPolicy, _cache, _manager, _table
from kvstress.paged._check import check_cached_content, check_free_count, check_refcounts, check_whole
from kvstress.paged._hash import chain_hashes
from kvstress.paged._machine import prompt_kv, token_kv
from kvstress.schedulers import PCTScheduler, RandomScheduler, Scheduler

SHAPE = (2, 2, 2, 2, 8)  # tiny: 2 layers, 2 tokens a block, 2 kv heads, head_dim 8
TOKEN_SHAPE = (2, 2, 2, 8)
POOLS = [kvstress.ThreadedBlockPool, CondvarPool, PollingCasPool]
PAGED = [_manager, _cache, _table, paged_mutants]
SHARED = [1, 2, 3, 4]  # two full blocks, cached before the workers start


def expect(table: BlockTable, tokens: list[int]) -> None:
    """The table reads back the model's K/V for ``tokens``, else dirty-read."""
    got = table.kv()
    want = prompt_kv(tokens, TOKEN_SHAPE)
    if got.shape != want.shape or not torch.equal(got, want):
        raise kvstress.InvariantViolation(
            "dirty-read", f"table {table.seq_id} reads K/V that {tokens} never wrote"
        )


def guarded(work: Callable[[], None]) -> None:
    """Run a worker: a full pool is an answer; the pool refusing the paged layer is its misuse;
    any other exception is a crash of the paged layer (its bookkeeping broke)."""
    try:
        work()
    except kvstress.InvariantViolation:
        raise
    except kvstress.PoolExhausted:
        return
    except ValueError as refused:  # InvalidTransition is one: the paged layer misused the pool
        raise kvstress.InvariantViolation("illegal-transition", f"the pool refused: {refused}") from refused
    except Exception as failed:
        raise kvstress.InvariantViolation("crash", f"the paged layer raised {failed!r}") from failed


def settle(manager: BlockManager, tables: list[BlockTable]) -> None:
    """Quiet: check the bookkeeping, then free everything and check the pool is whole."""
    check_refcounts(manager)
    check_free_count(manager)
    expected = {}
    for tokens in ([*SHARED, 5, 5], [*SHARED, 5, 6], [3, 3, 3, 3], [9, 9, 9, 9]):
        kv = prompt_kv(tokens, TOKEN_SHAPE)
        expected.update({h: kv[:, :, 2 * i : 2 * i + 2] for i, h in enumerate(chain_hashes(tokens, 2))})
    check_cached_content(manager, expected)
    for table in tables:
        table.free()
    manager.clear_cache()
    check_whole(manager)


def prefix_race(factory: Callable[..., Any], manager_type: type[BlockManager]) -> None:
    """A prefix hit races an allocation that must evict those very cached blocks to fit."""
    pool = factory(4, SHAPE, dtype=torch.float32, device="cpu")
    manager = manager_type(pool, SHAPE, policy=PagingPolicy(Degradation.REJECT))
    manager.allocate(SHARED, prompt_kv(SHARED, TOKEN_SHAPE)).free()  # 2 blocks cached, unused
    holder = manager.allocate([9, 9, 9, 9], prompt_kv([9, 9, 9, 9], TOKEN_SHAPE))  # pool now full

    def allocate_and_check(tokens: list[int]) -> None:
        table = manager.allocate(tokens, prompt_kv(tokens, TOKEN_SHAPE))
        expect(table, tokens)
        table.free()

    workers = [
        spawn(functools.partial(guarded, functools.partial(allocate_and_check, SHARED)), name="hit"),
        spawn(functools.partial(guarded, functools.partial(allocate_and_check, [3, 3, 3, 3])), name="evict"),
    ]
    for worker in workers:
        worker.join()
    settle(manager, [holder])


def fork_race(factory: Callable[..., Any], manager_type: type[BlockManager]) -> None:
    """Forks of one sequence append, fork again and free at once, while a prefix hit comes in."""
    pool = factory(8, SHAPE, dtype=torch.float32, device="cpu")
    manager = manager_type(pool, SHAPE, policy=PagingPolicy(Degradation.QUEUE, queue_timeout_s=0.05))
    parent = manager.allocate([*SHARED, 5], prompt_kv([*SHARED, 5], TOKEN_SHAPE))  # last block half full

    def grow(table: BlockTable, token: int) -> None:
        history = [*SHARED, 5, token]
        table.append_token(token, token_kv(history, TOKEN_SHAPE))
        expect(table, history)
        child = table.fork()
        expect(child, history)
        child.free()

    def hit() -> None:
        table = manager.allocate(SHARED, prompt_kv(SHARED, TOKEN_SHAPE))
        expect(table, SHARED)
        table.free()

    children = [parent.fork() for _ in range(2)]
    jobs = [functools.partial(grow, children[0], 5), functools.partial(grow, children[1], 6), hit]
    workers = [spawn(functools.partial(guarded, job), name=f"w{i}") for i, job in enumerate(jobs)]
    for worker in workers:
        worker.join()
    expect(parent, [*SHARED, 5])
    settle(manager, [parent, *children])


def explore(
    scenario: Callable[..., None],
    factory: Callable[..., Any],
    manager_type: type[BlockManager],
    scheduler: Scheduler,
    executions: int = 60,
) -> Any:
    """Explore a scenario: at most ``executions`` executions of one seeded scheduler."""
    main = functools.partial(scenario, factory, manager_type)
    return explore_threads(main, scheduler, max_executions=executions, modules=[*PAGED, factory, __name__])


SCHEDULERS = {
    "pct": lambda: PCTScheduler(depth=3, seed=11),
    "random": lambda: RandomScheduler(seed=11),
}


@pytest.mark.parametrize("scheduler", sorted(SCHEDULERS))
@pytest.mark.parametrize("scenario", [prefix_race, fork_race], ids=lambda s: s.__name__)
@pytest.mark.parametrize("factory", POOLS, ids=lambda f: f.__name__)
def test_scenarios_are_clean_on_correct_code(factory: Any, scenario: Any, scheduler: str) -> None:
    """The correct manager runs every explored interleaving clean on each pool."""
    found = explore(scenario, factory, BlockManager, SCHEDULERS[scheduler]())
    assert found.failure is None, found.failure
    assert found.executions == 60


@pytest.mark.parametrize("scheduler", sorted(SCHEDULERS))
@pytest.mark.parametrize(
    "mutant", [UnpinnedLookupManager, ReleaseBeforeUnhashManager], ids=lambda m: m.__name__
)
@pytest.mark.parametrize("factory", POOLS, ids=lambda f: f.__name__)
def test_prefix_race_catches_planted_bug(factory: Any, mutant: type[BlockManager], scheduler: str) -> None:
    """A cache that pins after the lookup, or releases before unhashing, is caught in the prefix race."""
    found = explore(prefix_race, factory, mutant, SCHEDULERS[scheduler](), executions=400)
    assert isinstance(found.failure, kvstress.InvariantViolation), found.failure
    assert found.failure.invariant in {"dirty-read", "illegal-transition", "refcount", "crash"}
