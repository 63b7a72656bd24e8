"""PCT's slices after its lead give every other execution to the churn motif at a greater
depth: a race that needs a take paused across another worker's whole tenancy and its next take
(four or five preemptions of two workers) has room there, where drawn scenarios, the other
strategies and free-running stress missed a blind rebuild of it for 30 s."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from kvstress.fuzz._replay import replay_report
from kvstress.fuzz._run import fuzz
from kvstress.fuzz._slices import CHURN_DEPTH, PCT_DEPTH
from kvstress.fuzz._target import load_target
from kvstress.scenarios import ScenarioConfig, search
from kvstress.scenarios._motifs import churn
from kvstress.schedulers import PCTScheduler
from tests.pools.next_fit import NextFitKeepsReservationPool, NextFitPool


def test_deep_pct_on_the_churn_motif_finds_a_reservation_kept_after_a_missed_scan() -> None:
    config = replace(ScenarioConfig(NextFitKeepsReservationPool, False), scenario=churn(2))
    result = search(config, PCTScheduler(depth=CHURN_DEPTH, seed=0), max_executions=400, budget_s=120.0)
    assert result.failure is not None
    assert result.failure.violation.invariant == "counter-mismatch"


def test_the_next_fit_pool_that_gives_its_unit_back_comes_through() -> None:
    config = replace(ScenarioConfig(NextFitPool, False), scenario=churn(2))
    for depth in (PCT_DEPTH, CHURN_DEPTH):
        result = search(config, PCTScheduler(depth=depth, seed=1), max_executions=200, budget_s=120.0)
        assert result.failure is None, result.failure.violation


def test_the_pct_strategy_finds_it_on_the_churn_motif_after_its_lead(tmp_path: Path) -> None:
    """About 10 s on the 2-core machine, 27 s with it loaded by two busy processes: the budget
    is a bound, far past both (the run ends at the find)."""
    target = load_target("tests.pools.next_fit:NextFitKeepsReservationPool")
    outcome = fuzz(target, budget_s=150.0, seed=0, mix=("pct",), report_dir=tmp_path)
    assert outcome.finding is not None
    assert outcome.finding.strategy == "pct"
    assert outcome.finding.options.get("fixed_scenario") is True  # the churn: not the lead slice
    assert outcome.report is not None
    replayed = replay_report(json.loads(outcome.report.read_text()))
    assert replayed.reproduced
