"""A handle whose tenancy has ended, used while its block is held again: the contract's retain,
mark and release through it must be refused where the pool gives each tenancy its own handle."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kvstress.fuzz import fuzz, load_target
from kvstress.fuzz._contract import run_contract


def test_a_retain_through_a_stale_handle_of_a_block_held_again_is_found_by_the_contract() -> None:
    violation, program = run_contract(load_target("pools.tenancy_handles:StaleRetainPool"))
    assert violation is not None and violation.invariant == "illegal-transition"
    assert "stale handle" in violation.message and "did not raise" in violation.message
    assert "state.stale_use(ref=retired_1, operation='retain')" in program


TENANCY_HANDLES = [
    "pools.tenancy_handles:TenancyHandlePool",
    "kvstress:ThreadedBlockPool",
    "kvstress:AsyncBlockPool",
]


@pytest.mark.parametrize("spec", TENANCY_HANDLES)
def test_pools_with_a_handle_per_tenancy_refuse_every_stale_use(spec: str) -> None:
    violation, _ = run_contract(load_target(spec))
    assert violation is None, violation.details()


def test_the_correct_tenancy_handle_pool_is_clean_under_the_mix(tmp_path: Path) -> None:
    outcome = fuzz(load_target("pools.tenancy_handles:TenancyHandlePool"), budget_s=3.0, report_dir=tmp_path)
    assert outcome.finding is None, outcome.finding.violation.details()


_FINALIZER_SEARCH = """
from kvstress.scenarios import ScenarioConfig, search
from kvstress.schedulers import RandomScheduler
from tests.pools.tenancy_handles import FinalizerGuardPool

config = ScenarioConfig(FinalizerGuardPool, False)
for seed in range(4):
    result = search(config, RandomScheduler(seed=seed), max_executions=60, budget_s=30)
    assert result.failure is None, result.failure.describe()
print("clean")
"""


def test_a_leak_guard_finalizer_on_a_dropped_handle_runs_without_deadlock() -> None:
    """A handle whose finalizer gives its block back under the pool's lock: the harness let go
    of an old handle while it held its ledger's lock, the finalizer then waited for the pool's
    lock, held by a thread parked on the baton, and the process deadlocked for good (seed 1 of
    this search; a blind user's correct pool). Run in a child so the old code fails, not hangs."""
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-c", _FINALIZER_SEARCH], cwd=root, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0 and "clean" in done.stdout, done.stdout + done.stderr
