"""Batches of more than three blocks: on a pool of more, half the drawn ``acquire_many`` steps
ask for four to all of it, as a long prompt's prefill takes most of a pool at once. Drawn at
three at most, a batch larger than half the pool (served a way of its own) never ran on any
pool size a run tries (a blind tester's)."""

from __future__ import annotations

import random

import pytest

from kvstress.fuzz import load_target
from kvstress.fuzz._slices import run_slice
from kvstress.scenarios._programs import SMALL_BATCH, _batch_size


def test_batch_sizes_reach_the_whole_of_a_larger_pool() -> None:
    rng = random.Random(0)
    for blocks in (1, 2, 3):
        assert {_batch_size(rng, blocks) for _ in range(200)} == set(range(1, blocks + 1))
    sizes = [_batch_size(rng, 8) for _ in range(400)]
    assert set(sizes) == set(range(1, 9))
    assert 0.35 < sum(size > SMALL_BATCH for size in sizes) / len(sizes) < 0.65


@pytest.mark.parametrize("strategy", ["random", "pct"])
def test_a_gathering_batch_that_gives_back_without_a_wake_up_is_found(strategy: str) -> None:
    target = load_target("tests.pools.big_batch:GatheringForgetsWakePool", num_blocks=8, wider=False)
    result = run_slice(strategy, target, 0, 30.0, memo={})
    assert result.finding is not None
    assert result.finding.violation.invariant == "lost-wakeup", result.finding.violation


@pytest.mark.parametrize("strategy", ["random", "pct"])
def test_its_correct_twin_is_clean(strategy: str) -> None:
    target = load_target("tests.pools.big_batch:GatheringBatchPool", num_blocks=8, wider=False)
    result = run_slice(strategy, target, 0, 3.0, memo={})
    assert result.finding is None, result.finding and result.finding.violation
