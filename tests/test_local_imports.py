"""A pool that imports its clock inside a function stays on the run's virtual clock.

Before, ``import time`` inside ``acquire`` bound the real module while the Condition's wait ran
on virtual time: the deadline never came, and a correct pool was reported as a hang (a blind
user's pool; it also hid the real bug of its twin). Imports made by the code of a swapped
module now get the same stand-ins its module-level names get.
"""

from __future__ import annotations

import builtins
import time

from kvstress.controlled._patch import cooperative, resolve_modules
from kvstress.scenarios import ScenarioConfig, search
from kvstress.schedulers import PCTScheduler, RandomScheduler
from tests.pools import local_imports
from tests.pools.local_imports import AsyncLocalImportPool, LocalImportPool, LocalImportTwinPool


def test_correct_pools_with_function_local_imports_run_clean() -> None:
    for factory, is_async in ((LocalImportPool, False), (AsyncLocalImportPool, True)):
        for scheduler in (PCTScheduler(seed=0), RandomScheduler(seed=1)):
            result = search(ScenarioConfig(factory, is_async), scheduler, max_executions=150, budget_s=60.0)
            assert result.failure is None, (factory.__name__, result.failure and result.failure.violation)


def test_the_twin_with_a_local_import_is_still_found() -> None:
    found = [
        search(
            ScenarioConfig(LocalImportTwinPool, False),
            RandomScheduler(seed=seed),
            max_executions=400,
            budget_s=60.0,
        )
        for seed in range(3)
    ]
    assert any(result.failure is not None for result in found)
    invariants = {result.failure.violation.invariant for result in found if result.failure is not None}
    assert invariants <= {"timeout-early", "lost-wakeup"}, invariants


def test_a_local_import_reads_the_stand_in_only_inside_the_run() -> None:
    """Inside, the swapped module's own imports get the stand-in; elsewhere, and after, the real
    module and the real ``builtins.__import__``."""
    real_import = builtins.__import__
    modules = resolve_modules([local_imports])

    def imported() -> object:
        import time as inner

        return inner

    with cooperative(modules):
        namespace: dict[str, object] = {}
        exec("def clock():\n    import time\n    return time", vars(local_imports), namespace)
        assert namespace["clock"]() is not time  # type: ignore[operator]
        assert imported() is time  # this module is not swapped
    assert namespace["clock"]() is time  # type: ignore[operator]
    assert builtins.__import__ is real_import
