"""The harness drives a pool's optional ``release_many`` (a request's table freed at once).

Before, neither the scenarios nor fuzzing ever called it: a ``release_many`` that offered its
blocks before zeroing them ran clean for 30 s in a blind user's hands.
"""

from __future__ import annotations

import io
import random
from pathlib import Path

from kvstress.scenarios import ScenarioConfig, search
from kvstress.scenarios._programs import generate
from kvstress.schedulers import PCTScheduler, RandomScheduler
from tests.pools.release_many import (
    DropsSharesManyPool,
    OfferThenZeroManyPool,
    QuietReleaseManyPool,
    ReleaseManyPool,
)


def test_scenarios_draw_release_many_only_for_a_pool_that_has_it() -> None:
    def kinds(release_batch: bool) -> set[str]:
        rng = random.Random(0)
        drawn = [
            generate(rng, workers=3, length=5, cancel=False, release_batch=release_batch) for _ in range(200)
        ]
        return {kind for scenario in drawn for program in scenario.programs for kind, _ in program}

    assert "release_many" in kinds(True)
    assert "release_many" not in kinds(False)


def test_correct_release_many_pools_run_clean() -> None:
    """With per-block answers (held to what release answers) and with none."""
    for factory in (ReleaseManyPool, QuietReleaseManyPool):
        for scheduler in (PCTScheduler(seed=0), RandomScheduler(seed=1)):
            result = search(ScenarioConfig(factory, False), scheduler, max_executions=300, budget_s=60.0)
            assert result.failure is None, (factory.__name__, result.failure and result.failure.violation)


def test_a_release_many_that_offers_before_it_zeroes_is_a_dirty_read() -> None:
    found = [
        search(
            ScenarioConfig(OfferThenZeroManyPool, False),
            PCTScheduler(seed=seed),
            max_executions=600,
            budget_s=60.0,
        )
        for seed in range(3)
    ]
    failures = [result.failure for result in found if result.failure is not None]
    assert len(failures) >= 2, [result.executions for result in found]
    assert {failure.violation.invariant for failure in failures} == {"dirty-read"}


def test_the_state_machine_releases_in_batches_and_holds_them_to_release() -> None:
    """The machine's release_many rule: silent on correct pools (with and without answers),
    and a release_many that frees a block another holder still shares is found."""
    import unittest

    from hypothesis import Phase, settings

    from kvstress import pool_machine

    def failures(factory: type) -> int:
        options = settings(
            max_examples=30,
            stateful_step_count=20,
            deadline=None,
            database=None,
            derandomize=True,
            phases=[Phase.generate],  # found is enough: shrinking the finding took a minute
        )
        case = pool_machine(factory, batches=False, settings=options).TestCase
        result = unittest.TextTestRunner(stream=io.StringIO(), verbosity=0).run(
            unittest.defaultTestLoader.loadTestsFromTestCase(case)
        )
        return len(result.failures) + len(result.errors)

    assert failures(ReleaseManyPool) == 0
    assert failures(QuietReleaseManyPool) == 0
    assert failures(DropsSharesManyPool) == 1


def test_a_batch_release_that_wakes_one_waiter_is_found_by_its_motif(tmp_path: Path) -> None:
    """Two waiters parked for one release_many of every block: the twin wakes one."""
    from kvstress.fuzz import fuzz, load_target

    outcome = fuzz(
        load_target("tests.pools.release_many:NotifiesOnceManyPool"), budget_s=10, seed=0, report_dir=tmp_path
    )
    assert outcome.finding is not None, "missed"
    assert outcome.finding.violation.invariant == "lost-wakeup", outcome.finding.violation


def test_the_batch_release_motif_only_for_a_pool_that_has_it() -> None:
    from kvstress.scenarios._motifs import motifs

    def batch_released(**kwargs: bool) -> int:
        return sum(
            any(step[0] == "release_many" for program in m.programs for step in program)
            for m in motifs(2, False, **kwargs)
        )

    assert batch_released(release_batch=True) == 1
    assert batch_released() == 0 and batch_released(release_batch=True, virtual=False) == 0
