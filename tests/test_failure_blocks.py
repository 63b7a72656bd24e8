"""The block table of a failure: the state at the failing check, and what the ledger expected."""

from __future__ import annotations

from kvstress.fuzz._slices import scenario_config
from kvstress.fuzz._target import load_target
from kvstress.harness._dump import dump_blocks
from kvstress.harness._ledger import Ledger
from kvstress.scenarios import search, stress
from kvstress.schedulers import PCTScheduler


def test_a_controlled_failure_shows_the_blocks_as_its_check_saw_them() -> None:
    """The dirty block's holder is the worker whose acquire just failed, not who held it after unwinding."""
    target = load_target("kvstress.mutants:ResetAfterOfferPool", num_blocks=2, block_shape=(2, 4))
    result = search(scenario_config(target), PCTScheduler(depth=3, seed=1), max_executions=200, budget_s=30)
    failure = result.failure
    assert failure is not None and failure.failed_op is not None
    failed = failure.history[failure.failed_op]
    assert failed.name == "acquire" and isinstance(failed.result, int)
    (block,) = [b for b in failure.blocks if b.id == failed.result]
    assert block.holders == (failed.worker,)
    assert block.expected_state == "ACQUIRED" and block.expected_refcount == 1
    assert (
        failure.blocks_at.startswith("as the check failed") and f"#{failure.failed_op}" in failure.blocks_at
    )


class _Handle:
    def __init__(self, state: int, refcount: int) -> None:
        self.state, self.refcount = state, refcount


class _Pool:
    def free_ids(self) -> list[int]:
        return [2]


def test_the_dump_carries_the_ledgers_expectation_and_unseen_blocks() -> None:
    """Held blocks expect ACQUIRED or IN_USE with their references; a block never handed out is unseen."""
    ledger = Ledger(3)
    ledger.take("b0", 0, _Handle(1, 1))
    ledger.share(0, "b1")
    ledger.take("b1", 1, _Handle(2, 1))
    ledger.open[1].marked = True
    blocks = dump_blocks(_Pool(), 3, ledger)
    assert [(b.expected_state, b.expected_refcount) for b in blocks] == [
        ("ACQUIRED", 2),
        ("IN_USE", 1),
        ("FREE", 0),
    ]
    assert blocks[0].holders == ("b0", "b1") and blocks[0].refcount == 1
    assert blocks[2].state == "unseen" and blocks[2].refcount is None and blocks[2].in_free_queue is True


def test_a_stress_failure_names_its_failing_operation() -> None:
    """Free-running too, the report knows which operation's check failed (the page marks it)."""
    target = load_target("kvstress.mutants:PartialResetPool", num_blocks=2, block_shape=(2, 4))
    result = stress(scenario_config(target), seed=3, max_executions=200, budget_s=30, replays=1)
    failure = result.failure
    assert failure is not None and failure.violation.invariant == "dirty-read"
    assert failure.failed_op is not None
    failed = failure.history[failure.failed_op]
    assert failed.name == "acquire" and failed.outcome == "ok"
