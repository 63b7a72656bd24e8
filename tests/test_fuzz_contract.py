"""The sequential contract: a fixed misuse program that runs first, once, and replays exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvstress.fuzz import DEFAULT_MIX, fuzz
from kvstress.fuzz._contract import run_contract
from kvstress.fuzz._replay import replay_report
from kvstress.fuzz._run import _strategy_at
from kvstress.fuzz._target import load_target
from kvstress.mutants import AsyncConditionPool, ClampedReleasePool, CondvarPool, RetainFreePool


@pytest.mark.parametrize(
    ("pool", "invariant"),
    [(ClampedReleasePool, "double-release"), (RetainFreePool, "illegal-transition")],
)
def test_the_contract_catches_misuse_the_pool_accepts(pool: type, invariant: str) -> None:
    """A double release that returns True, a retain on a FREE block that does not raise."""
    violation, program = run_contract(load_target(f"kvstress.mutants:{pool.__qualname__}"))
    assert violation is not None and violation.invariant == invariant
    assert program.startswith(f"state = {pool.__qualname__}Machine()")
    assert program.endswith("state.teardown()")
    assert violation.history  # the operations, as the machine records them


@pytest.mark.parametrize("spec", ["kvstress:ThreadedBlockPool", "kvstress:AsyncBlockPool"])
def test_the_contract_is_silent_on_correct_pools(spec: str) -> None:
    """Our pools and the corpus's keep the contract, on every backend they run on."""
    assert run_contract(load_target(spec))[0] is None
    for pool in (CondvarPool, AsyncConditionPool):
        for backend in ("asyncio", "trio"):
            target = load_target(f"kvstress.mutants:{pool.__qualname__}", backend=backend)
            assert run_contract(target)[0] is None


def test_the_contract_runs_once_after_a_short_first_slice() -> None:
    """The default mix: short PCT and random slices, the contract, then the search strategies
    in turn, never the contract again (the history comes back at the end of each pass, for its
    ladder of sizes, until it says the ladder is spent); a mix of fixed programs only ends once
    they have run."""
    from kvstress.fuzz._run import DELAY_SLICE_S, LEAD_SLICE_S, SLICE_S, _slice_s

    order = [_strategy_at(DEFAULT_MIX, i) for i in range(25)]
    first_pass = ["pct", "random", "contract", "delay", "random", "machine", "pct", "stress", "history"]
    later = ["pct", "random", "delay", "random", "machine", "pct", "stress", "history"]
    assert order == [*first_pass, *later, *later]
    assert "contract" not in order[3:]
    # The delay strategy's first slice runs the motifs' hot plans; its later ones are short.
    lead, rest = [LEAD_SLICE_S] * 2, [SLICE_S] * 3
    assert [_slice_s(DEFAULT_MIX, i) for i in range(5)] == lead + rest
    assert _slice_s(DEFAULT_MIX, order.index("delay", 4)) == DELAY_SLICE_S
    assert _slice_s(("delay",), 5) == SLICE_S  # alone, it has the whole budget
    assert _strategy_at(("contract",), 0) == "contract"
    assert _strategy_at(("contract",), 1) is None
    assert [_strategy_at(("contract", "history"), i) for i in range(4)] == ["contract"] + ["history"] * 3
    assert [_strategy_at(("pct", "random"), i) for i in range(3)] == ["pct", "random", "pct"]
    assert _slice_s(("pct", "random"), 0) == SLICE_S


def test_a_mix_runs_as_written_with_a_short_lead() -> None:
    """Every search slice written ahead of the contract is short; the contract may come first;
    afterwards only the search strategies cycle, in their written order."""
    from kvstress.fuzz._run import LEAD_SLICE_S, SLICE_S, _slice_s

    mix = ("random", "pct", "contract", "stress")
    order = [_strategy_at(mix, i) for i in range(7)]
    assert order == ["random", "pct", "contract", "stress", "random", "pct", "stress"]
    assert [_slice_s(mix, i) for i in range(5)] == [LEAD_SLICE_S, LEAD_SLICE_S, SLICE_S, SLICE_S, SLICE_S]
    assert [_strategy_at(("contract", "pct"), i) for i in range(3)] == ["contract", "pct", "pct"]
    assert _slice_s(("contract", "pct"), 1) == SLICE_S


def test_a_contract_finding_is_reported_and_replays_exactly(tmp_path: Path) -> None:
    """The report names the contract and carries its program; replay runs it once more."""
    target = load_target("kvstress.mutants:ClampedReleasePool")
    # The contract alone: in the default mix, the lead's motifs find this double release first.
    outcome = fuzz(target, budget_s=10, mix=("contract",), report_dir=tmp_path)
    assert outcome.finding is not None and outcome.report is not None
    report = json.loads(outcome.report.read_text())
    assert report["strategy"] == "contract" and report["config"]["kind"] == "contract"
    assert "state.double_release(ref=retired_1)" in report["program"]
    again = replay_report(report)
    assert again.reproduced and again.tries == 1


def test_a_contract_only_mix_ends_when_the_program_has_run(tmp_path: Path) -> None:
    """``--strategy contract`` runs the program and stops, clean, well inside its budget."""
    outcome = fuzz(
        load_target("kvstress:ThreadedBlockPool"), budget_s=60, mix=("contract",), report_dir=tmp_path
    )
    assert outcome.finding is None and outcome.executions == 1 and outcome.elapsed_s < 30


def test_the_contract_takes_every_block_after_one_came_back_unused() -> None:
    """A block released unused (an aborted request's), then every block at once: a pool that
    gives back a semaphore's unit only for blocks put in use cannot hand out its last one."""
    from kvstress.mutants import AsyncioSemaphorePool, AsyncioSemaphoreUnusedReleasePool

    target = load_target(f"kvstress.mutants:{AsyncioSemaphoreUnusedReleasePool.__qualname__}")
    violation, program = run_contract(target)
    assert violation is not None and violation.invariant == "lost-block"
    assert "retired_2 = state.release(ref=blocks_2)" in program
    assert program.count("state.acquire(holder='h3', timeout=0)") == target.num_blocks
    assert run_contract(load_target(f"kvstress.mutants:{AsyncioSemaphorePool.__qualname__}"))[0] is None
