"""What an async pool's own tasks raise where asyncio only logs it ("Task exception was never
retrieved", "Exception in callback"): a ``crash``, named with the task and its coroutine, on the
controlled loop and on the state machine's real one alike. A blind tester's pool awaited a probe
through ``asyncio.shield`` and ignored its failure; an acquire cancelled mid-probe left the probe
to raise alone: PCT said ``crash`` with no task named, the state machine printed 25 tracebacks on
stderr and called the run clean."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvstress.fuzz._run import fuzz
from kvstress.fuzz._slices import scenario_config
from kvstress.fuzz._target import load_target
from kvstress.scenarios import ScenarioConfig, search
from kvstress.schedulers import PCTScheduler, RandomScheduler


def _config(pool: str) -> ScenarioConfig:
    return scenario_config(load_target(f"tests.pools.task_raises:{pool}"))


def test_a_probe_left_to_raise_alone_is_named_with_its_coroutine() -> None:
    result = search(_config("ShieldedProbePool"), RandomScheduler(seed=2), max_executions=100, shrink=False)
    assert result.failure is not None
    violation = result.failure.violation
    assert violation.invariant == "crash", violation
    assert "(ShieldedProbePool._probe) with RuntimeError: probe failed, never retrieved" in violation.message
    assert "runs on alone once its awaiter is cancelled" in violation.message
    assert violation.message.count("probe failed") <= 3 + 3  # the crash's own and the deaths', once


@pytest.mark.parametrize("pool", ["ShieldedProbePool", "HelperTaskRaisesPool", "HelperCallbackRaisesPool"])
def test_the_state_machine_on_a_real_loop_finds_it_too(tmp_path: Path, pool: str) -> None:
    outcome = fuzz(
        load_target(f"tests.pools.task_raises:{pool}"), budget_s=30, mix=("machine",), report_dir=tmp_path
    )
    assert outcome.finding is not None
    assert outcome.finding.violation.invariant == "crash", outcome.finding.violation
    assert "a task or callback of the pool's own raised" in outcome.finding.violation.message


def test_a_probe_that_reads_its_own_outcome_is_clean(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    result = search(_config("ShieldedProbeReadPool"), PCTScheduler(seed=0), max_executions=200)
    assert result.failure is None, result.failure.violation
    target = load_target("tests.pools.task_raises:ShieldedProbeReadPool")
    outcome = fuzz(target, budget_s=3, mix=("machine",), report_dir=tmp_path)
    assert outcome.finding is None, outcome.finding.violation
    assert "never retrieved" not in capfd.readouterr().err
