"""Pools whose Condition sits over another Condition or over a lock class of their own: clean
when correct, and their bugs still found (the cooperative Condition takes what threading takes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvstress.fuzz import fuzz, load_target


@pytest.mark.parametrize("name", ["NestedConditionPool", "WrappedLockPool"])
def test_a_correct_pool_on_a_condition_over_a_lock_like_is_clean(name: str, tmp_path: Path) -> None:
    outcome = fuzz(load_target(f"pools.lock_likes:{name}"), budget_s=3.0, seed=0, report_dir=tmp_path)
    assert outcome.finding is None, outcome.finding.violation.details()
    assert outcome.executions > 50


def test_a_bug_in_a_pool_on_a_nested_condition_is_found(tmp_path: Path) -> None:
    target = load_target("pools.lock_likes:NestedSilentReleasePool")
    outcome = fuzz(target, budget_s=10.0, seed=0, report_dir=tmp_path)
    assert outcome.finding is not None
    assert outcome.finding.violation.invariant == "lost-wakeup"
