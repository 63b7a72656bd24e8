"""A nondeterministic failure of pool_machine(...).TestCase: a violation with its program and rate."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from machine_settings import ci, hunt

import kvstress
from kvstress._violation import InvariantViolation
from kvstress.machines._program import ProgramRecorder
from kvstress.mutants import PartialResetPool
from kvstress.mutants._condvar_pool import CondvarPool


class OnceDirtyPool(CondvarPool):
    """Skips every reset until it first hands out a block it did not reset; from then on, in
    every pool of the process, it resets: a failure Hypothesis sees once and cannot repeat, as a
    rare race on real threads does."""

    caught: ClassVar[list[bool]] = [False]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.dirty: set[int] = set()

    def _reset(self, block: Any) -> None:
        # Only a block with data in it is left dirty: handing out an unwritten one unreset would
        # spend the one failure on a read nobody can see.
        if OnceDirtyPool.caught[0] or not bool(block.data.any()):
            super()._reset(block)
        else:
            self.dirty.add(block.id)

    def acquire(self, timeout: float | None = None) -> Any:
        block = super().acquire(timeout)
        if block is not None and block.id in self.dirty:
            OnceDirtyPool.caught[0] = True
        return block


FAST = hunt(ci(50), 50)  # generation only: every replay of a real-thread example costs time


def test_a_failure_hypothesis_cannot_repeat_comes_with_its_program_and_rate() -> None:
    """No FlakyFailure: an InvariantViolation with the program that found it and 0 of 10 re-runs."""
    OnceDirtyPool.caught[0] = False
    machine = kvstress.pool_machine(OnceDirtyPool, batches=False, settings=FAST)
    with pytest.raises(InvariantViolation) as info:
        machine.TestCase().runTest()
    violation = info.value
    assert violation.invariant == "dirty-read"
    assert "failed in 0 of 10 re-runs of this program" in violation.message
    program = violation.message.split("re-runs of this program:\n", 1)[1]
    assert program.startswith("state = OnceDirtyPoolMachine()") and program.endswith("state.teardown()")
    # the block's release and its dirty re-acquire are in it, by whichever rules drew them
    assert "blocks_0 = state.acquire(" in program and "release(" in program


def test_the_recorded_program_replays_a_deterministic_bug_when_pasted() -> None:
    """The program a violation carries is Python that, run as is, fails the same way."""
    machine = kvstress.pool_machine(PartialResetPool, batches=False, settings=FAST)
    with pytest.raises(InvariantViolation) as info:
        machine.TestCase().runTest()
    program = info.value.program
    assert program is not None and program.endswith("state.teardown()")
    with pytest.raises(InvariantViolation) as again:
        exec(program, {"PartialResetPoolMachine": machine})
    assert again.value.invariant == info.value.invariant


def test_the_recorder_names_returned_values_as_hypothesis_does() -> None:
    """Values a rule returns get <bundle>_<n> names, and later steps refer to them by name."""
    recorder = ProgramRecorder("M")
    ref = object()
    recorder.step("acquire", {"holder": "h0", "timeout": 0}, "blocks", ref)
    recorder.step("pool_is_consistent", {}, None, None)
    recorder.step("release", {"ref": ref}, "retired", ref)
    recorder.failed()
    recorder.step("mark_in_use", {"ref": ref}, None, None)
    assert recorder.program().splitlines() == [
        "state = M()",
        "blocks_0 = state.acquire(holder='h0', timeout=0)",
        "state.pool_is_consistent()",
        "retired_0 = state.release(ref=blocks_0)",
        "state.teardown()",
    ]
