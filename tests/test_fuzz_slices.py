"""Fuzzing slices: what each strategy reports, and how its time to detect is counted."""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from kvstress import InvariantViolation
from kvstress.fuzz import _slices as slices_module
from kvstress.fuzz import fuzz, load_target
from kvstress.fuzz._slices import MACHINE_HANG_BOUND, MACHINE_SHRINK_CAP_S, run_machine, run_slice


def test_the_machine_s_time_to_detect_excludes_shrinking() -> None:
    """As for the controlled strategies, the finding's time stops when the search does: a hang
    shrunk and replayed costs its bound again after that, and is not counted."""
    target = load_target("kvstress.mutants:LockLeakPool")
    start = time.monotonic()
    result = run_slice("machine", target, 0, 5.0)
    wall = time.monotonic() - start
    assert result.finding is not None and result.finding.violation.invariant == "hang"
    assert wall - result.finding.elapsed_s >= MACHINE_HANG_BOUND  # at least the final replay


@pytest.mark.parametrize(("budget", "expected"), [(5.0, 5.0), (100.0, MACHINE_SHRINK_CAP_S)])
def test_a_fuzz_run_gives_the_machine_what_is_left_of_its_budget_to_shrink(
    budget: float, expected: float, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fuzz run stops at its first finding, so the machine may shrink it with what is left of
    the whole budget (up to the cap), not of its one-second slice."""
    granted: list[float] = []

    def finding_at_once(target: object, seed: int, shrink_s: float, **options: object) -> InvariantViolation:
        granted.append(shrink_s)
        return InvariantViolation("double-release", "planted")

    monkeypatch.setattr(slices_module, "run_machine", finding_at_once)
    target = load_target("kvstress:ThreadedBlockPool")
    outcome = fuzz(target, budget_s=budget, seed=0, mix=("machine",), report_dir=tmp_path)
    assert outcome.finding is not None and len(granted) == 1
    assert expected - 1.0 < granted[0] <= expected


def test_a_machine_run_starts_no_example_past_its_search_time() -> None:
    """A run's ten examples take seconds of real time; the last slice of a fuzz run must not
    carry the run past its budget (a 3 s fuzz of a correct pool took 5.4 s), so no example
    starts once the search time is spent, and the run counts the examples it really ran."""
    target = load_target("kvstress:ThreadedBlockPool")
    counts = slices_module.MachineCounts()
    assert slices_module.run_machine(target, 0, counts=counts, search_s=0.0) is None
    assert counts.examples == 0 and counts.operations == 0
    result = run_slice("machine", target, 0, 1e-9, shrink_s=1e-9)
    assert result.finding is None and result.executions == 0
    full = slices_module.MachineCounts()
    assert slices_module.run_machine(target, 0, batches=False, counts=full) is None
    assert full.examples >= slices_module.MACHINE_EXAMPLES and full.operations > 0


def test_a_replay_of_a_machine_finding_does_not_shrink_it() -> None:
    """A replay only asks whether the violation recurs: each of its tries shrinking again took
    seconds of real threads (``kvstress replay`` tries ten times by default)."""
    target = load_target("pools.broken:DoubleReleaseTruePool")
    # The first seed whose ten examples find it (which one depends on the rules the machine has
    # and on Hypothesis' version: the lowest release CI installs draws differently).
    for seed in range(10):
        shrunk, found = slices_module.MachineCounts(), slices_module.MachineCounts()
        first = slices_module.run_machine(target, seed, batches=False, counts=shrunk)
        if first is not None:
            break
    again = slices_module.run_machine(target, seed, batches=False, counts=found, shrink=False)
    assert first is not None and again is not None and again.invariant == first.invariant
    assert found.examples < shrunk.examples, (found, shrunk)


def test_random_runs_every_motif_first_then_one_execution_in_four(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run's first slice of random runs each motif once, in order, then alternates: one motif
    (the next in turn) and three drawn scenarios; the next slice goes on with the motif after
    the last one run. On a correct pool, none of it finds anything."""
    strategy = "random"

    calls: list[tuple[object, int | None]] = []
    real_search = slices_module.search

    def recorded(config: object, scheduler: object, **limits: object) -> object:
        calls.append((config.scenario, limits.get("max_executions")))  # type: ignore[attr-defined]
        return real_search(config, scheduler, **limits)  # type: ignore[arg-type]

    monkeypatch.setattr(slices_module, "search", recorded)
    # The slice's clock moves 5 ms a reading, whatever the machine's load: on a loaded machine a
    # real 0.6 s ran out before the first pass was over (a CI rehearsal beside other jobs).
    ticks = itertools.count(1)
    monkeypatch.setattr(slices_module, "time", SimpleNamespace(monotonic=lambda: next(ticks) * 0.005))
    target = load_target("kvstress:ThreadedBlockPool")
    programs = slices_module.target_motifs(target)  # ours has acquire_many and release_many
    memo: dict[str, object] = {}
    result = run_slice(strategy, target, 3, 0.6, memo=memo)
    assert result.finding is None
    first = len(programs)
    assert [scenario for scenario, _ in calls[:first]] == list(programs)
    assert all(cap == 1 for _, cap in calls[:first])
    after = calls[first:]
    assert len(after) >= 4, "the slice ran out before any drawn scenario"
    assert [scenario for scenario, _ in after[:4]] == [programs[0], None, programs[1], None]
    assert after[1][1] == slices_module.MOTIF_EVERY - 1
    motifs_run = [scenario for scenario, _ in calls if scenario is not None]
    calls.clear()
    run_slice(strategy, target, 4, 0.05, memo=memo)
    following = programs[len(motifs_run) % len(programs)]
    assert calls[0][0] == following  # no second first pass: the turn goes on


def test_a_race_a_motif_exposes_falls_to_random_at_once_and_replays_from_its_report(tmp_path: Path) -> None:
    """Two sharers' releases and a retain racing on one block (a refcount updated without the
    lock) come up under most random schedules of the three-holder motif: the run's first pass
    finds it, and the report replays it from the motif's programs it carries."""
    from kvstress.fuzz._replay import replay_report

    target = load_target("kvstress.mutants:RetainLostUpdatePool")
    outcome = fuzz(target, budget_s=10, seed=0, mix=("random",), report_dir=tmp_path)
    assert outcome.finding is not None and outcome.report is not None
    assert outcome.finding.options.get("fixed_scenario") is True
    assert outcome.executions <= 3 * 12
    report = __import__("json").loads(outcome.report.read_text())
    again = replay_report(report)
    assert again.reproduced and again.tries == 1


def test_ctrl_c_while_the_machine_shrinks_keeps_its_finding(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C during shrinking returns the failure as far as it was shrunk (the run then writes
    its report), instead of losing it: a blind tester's interrupted run wrote no report."""
    target = load_target("pools.broken:DoubleReleaseTruePool")
    real_check = slices_module._MachineClock.check

    def interrupted_once_shrinking(self: slices_module._MachineClock) -> None:
        if self.found_at is not None and self.shrink_s != float("inf"):
            raise KeyboardInterrupt  # the first shrink step
        real_check(self)

    monkeypatch.setattr(slices_module._MachineClock, "check", interrupted_once_shrinking)
    # The first seed whose examples find it (see the test above): interrupted as it shrinks.
    found = next(
        (hit for seed in range(10) if (hit := slices_module.run_machine(target, seed, batches=False))),
        None,
    )
    assert found is not None and found.invariant == "double-release"


def test_hypothesis_finding_the_machine_s_draws_flaky_is_no_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pool whose answers on real threads steer the machine's draws can make Hypothesis raise
    FlakyStrategyDefinition (a subclass of Flaky; a loaded CI rehearsal's run of the test above):
    the machine slice went down with it. With no failure found first, it now finds nothing."""
    from hypothesis.errors import Flaky

    def flaky(machine: object, hypothesis_settings: object) -> None:
        raise Flaky("Inconsistent data generation!")

    monkeypatch.setattr(slices_module, "_run_as_test", flaky)
    target = load_target("pools.broken:DoubleReleaseTruePool")
    assert slices_module.run_machine(target, 0, batches=False) is None


def test_a_machine_finding_is_cut_to_the_steps_it_needs() -> None:
    """Found on the machine's concurrent runs, a three-step sequential bug was reported as a
    24-52 step program: Hypothesis shrinks by replaying real threads, and its time was up. The
    steps are now cut out directly: acquire, share, and the release at teardown."""
    target = load_target("pools.double_down:UnusedSharedDoubleDownPool", num_blocks=2, block_shape=(2, 4))
    violation = run_machine(target, 5, shrink_s=1.0, batches=True)
    assert violation is not None and violation.invariant == "refcount"
    program = violation.program
    assert program.splitlines()[-1] == "state.teardown()"
    steps = program.splitlines()[1:-1]
    assert len(steps) <= 3, program
    assert any("share" in step for step in steps), program
