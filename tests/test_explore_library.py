"""A user's threads on kvstress's own library (a BlockManager and its prefix cache over a
ThreadedBlockPool) are explored like the user's code: the library's locks are the baton's."""

from __future__ import annotations

import threading
from typing import Any

import torch

import kvstress
from kvstress.controlled._patch import resolve_modules


def _two_requests_on_one_manager() -> None:
    card = kvstress.load_card("tiny")
    pool = kvstress.audit(kvstress.pool_for_model(kvstress.ThreadedBlockPool, card, 8, block_tokens=4))
    manager = kvstress.BlockManager(pool, card.block_shape(4), prefix_caching=True)

    def serve(tokens: list[int]) -> None:
        table = manager.allocate(tokens, torch.ones(2, 2, len(tokens), 2, 8))
        table.append_token(99, torch.ones(2, 2, 2, 8))
        table.free()

    # The same four-token prefix: the second request shares the first's cached block.
    threads = [threading.Thread(target=serve, args=([1, 2, 3, 4, 5 + i],)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    manager.clear_cache()
    pool.close()


def test_two_threads_on_a_block_manager_with_its_prefix_cache_explore_clean() -> None:
    """Before, schedule 1 failed with StuckThread: a thread waited on the prefix cache's real
    lock, held by a thread parked on the baton (a blind user's correct engine)."""
    for strategy in ("random", "pct"):
        explored = kvstress.explore(_two_requests_on_one_manager, schedules=40, strategy=strategy, seed=0)
        assert explored.schedules == 40


def test_a_package_named_in_modules_brings_its_loaded_submodules() -> None:
    import tests.pools._condition

    names = [module.__name__ for module in resolve_modules(["tests.pools"])]
    assert names[0] == "tests.pools" and tests.pools._condition.__name__ in names
    assert not any(name.startswith("kvstress.") for name in names)
    # The harness's own packages stay left alone even when named.
    assert [module.__name__ for module in resolve_modules(["kvstress.paged"])] == ["kvstress.paged"]


async def _engine_dies_of_a_violation() -> None:
    """An engine task releases a block twice through the audit and dies of the violation; the
    test awaits a reply the engine never sends, beside a watchdog that ticks every 2 ms."""
    import asyncio

    pool = kvstress.audit(kvstress.AsyncBlockPool(2, (2, 4)))
    replied = asyncio.Event()

    async def engine() -> None:
        block = await pool.acquire(0)
        assert block is not None
        await pool.release(block)
        await pool.release(block)  # the caller bug: a double release
        replied.set()

    async def watchdog() -> None:
        while not replied.is_set():
            await asyncio.sleep(0.002)

    tasks = [asyncio.ensure_future(engine()), asyncio.ensure_future(watchdog())]
    await replied.wait()
    await asyncio.gather(*tasks)


def test_a_run_ends_soon_after_an_audit_violation_killed_a_task(caplog: Any) -> None:
    """The violation killed the engine's task and the test waited on, tick after tick, to the
    hour's limit of virtual time (86-118 s of real time, a blind user's); the run now ends a
    minute of virtual time after the violation, and reports the violation first, which the
    dead task does not log again as "Task exception was never retrieved"."""
    import gc

    import pytest

    with pytest.raises(kvstress.InvariantViolation) as caught:
        kvstress.explore(_engine_dies_of_a_violation, schedules=2, strategy="random", seed=0)
    assert caught.value.invariant == "double-release"
    notes = "\n".join(getattr(caught.value, "__notes__", []))
    assert "60 s after an audit's violation" in notes
    gc.collect()
    assert "never retrieved" not in caplog.text


def test_a_single_module_name_is_one_module_not_its_letters() -> None:
    """``explore(fn, modules="server")`` said "cannot import 's'" (a blind tester's)."""
    assert resolve_modules("tests.pools") == resolve_modules(["tests.pools"])
    assert resolve_modules(resolve_modules) == resolve_modules([resolve_modules])
