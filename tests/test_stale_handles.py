"""A handle whose tenancy has ended, used while its block is held again: the contract's retain,
mark and release through it must be refused where the pool gives each tenancy its own handle."""

from __future__ import annotations

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
