"""The paged-layer state machine: clean on correct code over three pools, and catching planted bugs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from paged_mutants import CowInPlaceManager, ForkWithoutRetainManager

import kvstress
from kvstress.mutants import CondvarPool, PollingCasPool
from kvstress.paged import BlockManager, Degradation, PagingPolicy
from kvstress.paged._machine import paged_machine

POOLS = [kvstress.ThreadedBlockPool, CondvarPool, PollingCasPool]
POLICIES = {
    "queue": PagingPolicy(Degradation.QUEUE, queue_timeout_s=0),
    "truncate": PagingPolicy(Degradation.TRUNCATE, queue_timeout_s=0, sink_blocks=1, window_blocks=1),
    "reject": PagingPolicy(Degradation.REJECT),
}


SETTINGS = settings(
    max_examples=60,
    stateful_step_count=25,
    deadline=None,
    database=None,
    derandomize=True,  # seeded: every run draws the same programs
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def run_machine(factory: Callable[..., Any], manager: type[BlockManager], policy: PagingPolicy) -> None:
    """Run one machine to the end (raises what it found)."""
    machine = paged_machine(factory, manager_type=manager, policy=policy, num_blocks=6, settings=SETTINGS)
    machine.TestCase().runTest()


@pytest.mark.parametrize("policy", sorted(POLICIES))
@pytest.mark.parametrize("factory", POOLS, ids=lambda f: f.__name__)
def test_machine_is_clean_on_correct_code(factory: Callable[..., Any], policy: str) -> None:
    """The correct manager passes the machine on each pool under each policy."""
    run_machine(factory, BlockManager, POLICIES[policy])


@pytest.mark.parametrize(
    ("mutant", "invariant"),
    [(CowInPlaceManager, "shared-block"), (ForkWithoutRetainManager, "refcount")],
)
def test_machine_catches_planted_bug(mutant: type[BlockManager], invariant: str) -> None:
    """A planted paged-layer bug is reported with its invariant id."""
    with pytest.raises(kvstress.InvariantViolation) as caught:
        run_machine(kvstress.ThreadedBlockPool, mutant, POLICIES["queue"])
    assert caught.value.invariant == invariant
