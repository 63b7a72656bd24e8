"""Replay a failure report: the recorded schedule (or seed) on the recorded pool, once more.

A controlled failure replays exactly from its schedule string, and a contract failure from its
fixed program, so one run says whether it recurs. Free-running stress and the state machine on
real threads can only re-run their seed; they are tried several times and the answer is a
reproduction rate.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from kvstress.fuzz._contract import run_contract
from kvstress.fuzz._slices import run_machine, scenario_config
from kvstress.fuzz._target import FuzzTarget, load_target
from kvstress.scenarios import replay, run_stress_execution
from kvstress.scenarios._programs import Scenario
from kvstress.schedulers import ScheduleDivergence

KINDS = ("scenario", "stress", "machine", "contract")


@dataclass(frozen=True)
class ReplayOutcome:
    """``hits`` of ``tries`` runs failed with the report's invariant; ``note`` says more."""

    invariant: str
    tries: int
    hits: int
    note: str = ""

    @property
    def reproduced(self) -> bool:
        """True when at least one try failed the same way."""
        return self.hits > 0


def replay_report(report: Mapping[str, Any], *, tries: int = 10) -> ReplayOutcome:
    """Re-run what ``report`` recorded (a loaded, checked report); see the module docstring."""
    config = report.get("config")
    kind = config.get("kind") if isinstance(config, dict) else None
    if kind not in KINDS:
        raise ValueError(f"the report's config.kind is {kind!r}, expected one of {KINDS}")
    assert isinstance(config, dict)
    target = load_target(
        report["pool"],
        num_blocks=config.get("num_blocks", 2),
        block_shape=config.get("block_shape", (2, 4)),
        backend=report.get("backend") or "asyncio",
    )
    invariant = report["invariant"]
    if kind == "scenario":
        return _replay_schedule(target, report, invariant)
    if kind == "contract":
        violation, _ = run_contract(target)
        if violation is None:
            return ReplayOutcome(
                invariant, 1, 0, "the contract program ran clean: the pool no longer fails it"
            )
        if violation.invariant != invariant:
            return ReplayOutcome(invariant, 1, 0, f"it failed differently: {violation}")
        return ReplayOutcome(invariant, 1, 1, "exact replay of the fixed contract program")
    if kind == "stress":
        hits = sum(_stress_hit(target, report["seed"], invariant) for _ in range(tries))
        return ReplayOutcome(invariant, tries, hits, "free-running: a reproduction rate, not an exact replay")
    hits = 0
    for _ in range(tries):
        violation = run_machine(target, report["seed"], batches=bool(config.get("batches", True)))
        hits += violation is not None and violation.invariant == invariant
    return ReplayOutcome(invariant, tries, hits, "state machine on real threads: re-run from its seed")


def _replay_schedule(target: FuzzTarget, report: Mapping[str, Any], invariant: str) -> ReplayOutcome:
    schedule = report.get("schedule")
    if not isinstance(schedule, str):
        raise ValueError("the report has no schedule string to replay")
    config = scenario_config(target)
    if report["config"].get("fixed_scenario"):  # a motif: its programs are in the report
        config = replace(config, scenario=Scenario.from_json(report.get("scenario")))
    try:
        failure = replay(config, schedule)
    except ScheduleDivergence as divergence:
        return ReplayOutcome(invariant, 1, 0, f"the run no longer follows the schedule: {divergence}")
    if failure is None:
        return ReplayOutcome(invariant, 1, 0, "the schedule ran clean: the pool no longer fails this way")
    if failure.violation.invariant != invariant:
        return ReplayOutcome(invariant, 1, 0, f"it failed differently: {failure.violation}")
    return ReplayOutcome(invariant, 1, 1, "exact replay of the recorded schedule")


def _stress_hit(target: FuzzTarget, seed: int, invariant: str) -> bool:
    record = run_stress_execution(scenario_config(target), seed)
    return record.failure is not None and record.failure.invariant == invariant
