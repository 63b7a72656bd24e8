"""A pool spread over a package (free list, block class and deadline helper each in a module of
its own) is controlled as a whole: no false alarm on the correct ones, and a race planted in a
helper is found; a closed-over primitive (a dataclass field's default factory) is controlled too."""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path

import pytest
from pools.split import pools

from kvstress import explore
from kvstress.controlled._coop import Condition as CoopCondition
from kvstress.controlled._patch import cooperative, resolve_modules
from kvstress.controlled._reach import reached_modules
from kvstress.fuzz import fuzz, load_target, parse_mix

CLEAN_BUDGET_S = 2.0
FIND_BUDGET_S = 15.0


def run(name: str, tmp_path: Path, budget_s: float, seed: int) -> object:
    target = load_target(f"pools.split.pools:{name}", num_blocks=2, block_shape=(2, 4))
    return fuzz(target, budget_s=budget_s, seed=seed, mix=parse_mix("auto"), report_dir=tmp_path)


def test_the_helpers_two_imports_away_are_reached() -> None:
    """From the pool's module: its block and free-list modules, and the deadline module the free
    list imports; not the standard library, torch or kvstress."""
    names = [module.__name__ for module in reached_modules(resolve_modules([pools.SplitPool]))]
    assert set(names) == {"pools.split.block", "pools.split.freelist", "pools.split.deadline"}


def test_a_fuzz_target_takes_the_helpers_as_code_under_test() -> None:
    """Those three, and a helper of the user's that imports no concurrency at all (a counter
    class): its lines run inside the pool's operations."""
    target = load_target("pools.split.pools:SplitPool")
    assert {"pools.split.pools", "pools.split.freelist", "pools.split.deadline"} <= set(target.pool_modules)
    assert "pools.split.tally" in target.pool_modules


def test_a_race_in_a_helper_that_imports_no_concurrency_is_found(tmp_path: Path) -> None:
    """A blind sweep's counter class in a module of its own, moved outside the pool's lock, was
    missed on seeds 0-3: the module imported nothing of threading, so none of its lines was a
    scheduling point."""
    outcome = run("TallyRacePool", tmp_path, FIND_BUDGET_S, 0)
    assert outcome.finding is not None  # type: ignore[attr-defined]
    assert outcome.finding.violation.invariant in ("counter-mismatch", "lost-block")  # type: ignore[attr-defined]


# Seeds 1 and 2 each raised a false alarm within a second on every one of these pools while
# only the pool class's own module was controlled (timeout-early, hang).
@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("name", ["SplitPool", "DataclassPool", "AsyncSplitPool", "TalliedPool"])
def test_a_correct_split_pool_is_clean(name: str, seed: int, tmp_path: Path) -> None:
    outcome = run(name, tmp_path, CLEAN_BUDGET_S, seed)
    assert outcome.finding is None, outcome.finding.violation.details()  # type: ignore[attr-defined]
    assert outcome.executions > 0  # type: ignore[attr-defined]


def test_a_race_in_a_helper_module_is_found(tmp_path: Path) -> None:
    """The free list's count is updated outside its lock: a switch inside the helper's line
    loses an update, which the counter checks see."""
    outcome = run("SplitLostCountPool", tmp_path, FIND_BUDGET_S, 0)
    assert outcome.finding is not None  # type: ignore[attr-defined]
    assert outcome.finding.violation.invariant in ("counter-mismatch", "lost-block")  # type: ignore[attr-defined]


@dataclasses.dataclass
class _Holder:
    cv: threading.Condition = dataclasses.field(default_factory=threading.Condition)


def test_a_default_factory_makes_a_cooperative_primitive_and_comes_back() -> None:
    """Within ``cooperative``, a dataclass's ``default_factory=threading.Condition`` (closed over
    by its ``__init__``) makes the baton's Condition; the real one is back after."""
    import sys

    with cooperative([sys.modules[__name__]]):
        inside = _Holder().cv
    assert isinstance(inside, CoopCondition)
    assert not isinstance(_Holder().cv, CoopCondition)


def test_threads_on_a_dataclass_pool_take_turns() -> None:
    """An explored test whose pool makes its Condition from a field's default factory: the
    waiters are the baton's, so every schedule runs without a stall or a timeout."""

    def main() -> None:
        pool = pools.DataclassPool(1, (2,))
        got: list[bool] = []

        def tenant() -> None:
            block = pool.acquire(timeout=5)
            got.append(block is not None)
            if block is not None:
                time.sleep(0.001)
                pool.release(block)

        workers = [threading.Thread(target=tenant) for _ in range(3)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        assert got == [True, True, True]

    assert explore(main, schedules=20, seed=1, modules=[pools]).schedules == 20
