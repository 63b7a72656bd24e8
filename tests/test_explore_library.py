"""A user's threads on kvstress's own library (a BlockManager and its prefix cache over a
ThreadedBlockPool) are explored like the user's code: the library's locks are the baton's."""

from __future__ import annotations

import threading

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
