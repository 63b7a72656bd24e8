"""Free-running stress: real threads and the real clock, with seeded noise and reproduction rates."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import pytest
from pools import broken

from kvstress import AsyncBlockPool, ThreadedBlockPool
from kvstress.checkers import TimingPolicy
from kvstress.mutants import AsyncLockLeakPool, LockLeakPool
from kvstress.scenarios import ScenarioConfig, StressResult, run_stress_execution, stress


def test_a_correct_threaded_pool_passes_a_few_stress_runs() -> None:
    """Real threads, tiny switch interval, noise at the pool's lines: nothing to report."""
    result = stress(ScenarioConfig(ThreadedBlockPool, False, length=4), seed=1, max_executions=3)
    assert result.failure is None and result.executions == 3


def test_a_correct_async_pool_passes_a_few_stress_runs() -> None:
    """The async flavour runs on a plain event loop and is clean too."""
    result = stress(ScenarioConfig(AsyncBlockPool, True, length=4), seed=1, max_executions=3)
    assert result.failure is None


def test_stress_runs_an_async_pool_on_the_backend_asked_for() -> None:
    """A trio-only pool (trio's own Semaphore) runs clean on trio: stress honours the backend."""
    from kvstress.mutants import TrioSemaphorePool

    config = ScenarioConfig(TrioSemaphorePool, True, length=4, backend="trio")
    result = stress(config, seed=1, max_executions=3)
    assert result.failure is None, result.failure


def test_reset_after_offer_is_found_and_its_reproduction_rate_reported() -> None:
    """The planted dirty read shows up under noise, and the report says how often its seed repeats it."""
    config = ScenarioConfig(broken.ResetAfterOfferPool, False)
    result = stress(config, seed=1, max_executions=20, yield_probability=0.2, replays=4)
    assert result.failure is not None
    failure = result.failure
    assert failure.violation.invariant == "dirty-read"
    assert failure.replays == 4 and 0 <= failure.reproduced <= 4
    assert failure.reproduction_rate == failure.reproduced / 4


def test_the_switch_interval_is_restored() -> None:
    """A stress run leaves the interpreter's GIL switch interval as it found it."""
    before = sys.getswitchinterval()
    run_stress_execution(ScenarioConfig(ThreadedBlockPool, False, length=2), seed=3)
    assert sys.getswitchinterval() == before


def test_a_hanging_pool_is_reported_not_waited_for() -> None:
    """A pool that never lets go of its lock is a hang within the bound, not a stuck test."""
    config = ScenarioConfig(broken.DeadlockPool, False, length=3)
    result = stress(config, seed=2, max_executions=3, replays=0, timing=TimingPolicy(hang_bound=0.5))
    assert result.failure is not None and result.failure.violation.invariant == "hang"


def test_replays_of_a_hang_stop_at_the_replay_budget() -> None:
    """Each re-run of a hang costs its whole bound: none starts once the replay budget is spent,
    and the failure counts only the re-runs that ran."""
    config = ScenarioConfig(broken.DeadlockPool, False, length=3)
    timing = TimingPolicy(hang_bound=0.5)
    result = stress(config, seed=2, max_executions=3, replays=5, replay_budget_s=0.0, timing=timing)
    assert result.failure is not None and result.failure.violation.invariant == "hang"
    assert result.failure.replays == 0 and result.failure.reproduced == 0
    again = stress(config, seed=2, max_executions=3, replays=5, replay_budget_s=0.1, timing=timing)
    assert again.failure is not None and again.failure.replays == 1  # the first re-run outlasts 0.1 s


@pytest.mark.parametrize(
    ("factory", "is_async", "seed", "says"),
    [
        (LockLeakPool, False, 89, "final release of a block still held"),  # a fixed share, below
        (AsyncLockLeakPool, True, 0, "async run did not end"),
    ],
)
def test_a_pool_that_hangs_the_harness_s_own_calls_is_a_hang(
    factory: type, is_async: bool, seed: int, says: str
) -> None:
    """After the workers, the harness releases what they still hold; a pool that never returns
    from that (a leaked lock; a shielded wait on it) is reported as a hang, never waited for."""
    outcome: list[StressResult] = []
    config = ScenarioConfig(factory, is_async)
    if not is_async:
        # Fixed programs: one block shared and never released, so the leaked lock bites only in
        # the harness's final releases whatever the threads' timing (seed 89's drawn programs
        # had a peer that could give up its wait under load: flaky).
        from kvstress.scenarios._programs import Scenario

        shared = Scenario(((("acquire", 0.0), ("share", 1)), (("pause", 1),)))
        config = ScenarioConfig(factory, is_async, scenario=shared)
    worker = threading.Thread(
        target=lambda: outcome.append(
            stress(config, seed=seed, max_executions=1, replays=0, timing=TimingPolicy(hang_bound=0.3))
        ),
        daemon=True,
    )
    worker.start()
    worker.join(60)
    assert outcome, "stress() did not come back"
    failure = outcome[0].failure
    assert failure is not None and failure.violation.invariant == "hang"
    assert says in failure.violation.message


@pytest.mark.parametrize(
    ("options", "word"),
    [
        ({}, "max_executions or budget_s"),
        ({"max_executions": 1, "yield_probability": 2.0}, "yield_probability"),
        ({"max_executions": 1, "replays": -1}, "replays"),
        ({"max_executions": 1, "replay_budget_s": -1.0}, "replay_budget_s"),
    ],
)
def test_stress_rejects_bad_arguments(options: dict[str, float], word: str) -> None:
    """stress() names the argument it cannot use."""
    with pytest.raises(ValueError, match=word):
        stress(ScenarioConfig(ThreadedBlockPool, False), seed=0, **options)  # type: ignore[arg-type]


def test_a_shared_block_s_peer_releases_only_after_the_sharer_s_refcount_check() -> None:
    """On real threads the peer of a share parks until its reference is handed over, and that
    happens only after the sharer has read the refcount its retain left: a peer releasing in
    between made a correct pool's refcount read 1 (a false alarm on ThreadSemaphorePool). The
    sharer's read is slowed here so that an early hand-over would surely lose the race."""
    import time

    from kvstress.harness._runner import run_to_completion
    from kvstress.mutants import ThreadSemaphorePool
    from kvstress.scenarios._execution import ScenarioOps, build_pool

    config = ScenarioConfig(ThreadSemaphorePool, False)
    ops = ScenarioOps(config, build_pool(config), time.monotonic, virtual=False, timing=TimingPolicy())
    events: list[str] = []
    read = ops._refcount

    def slow_read(block: object) -> int:
        time.sleep(0.05)
        events.append("sharer read")
        return read(block)

    ops._refcount = slow_read  # type: ignore[method-assign]
    release = ops.pool.release

    def logged_release(block: object) -> bool:
        events.append(f"release by {threading.current_thread().name}")
        return bool(release(block))

    ops.pool.release = logged_release
    programs = {"b0": (("acquire", 0.0), ("share", 1)), "b1": (("wait", 1.0), ("release", None))}
    errors: list[BaseException] = []

    def work(holder: str) -> None:
        try:
            run_to_completion(ops.run_program(holder, programs[holder]))
        except BaseException as error:  # the test reports it below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(h,), name=h) for h in programs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(5)
    assert not errors, errors
    assert events[-1] == "release by b1" and events.count("release by b1") == 1, events


def test_fixed_scenarios_run_free_and_a_failure_says_it_ran_one() -> None:
    """Given motifs, stress runs them too, and a failure found on one carries its programs."""
    from kvstress.scenarios._motifs import motifs

    config = ScenarioConfig(broken.ResetAfterOfferPool, False)
    fixed = motifs(config.num_blocks, False)
    result = stress(config, seed=3, budget_s=30, fixed=fixed, fixed_only=True, replays=0)
    assert result.failure is not None and result.failure.violation.invariant == "dirty-read"
    assert result.failure.fixed and result.failure.scenario in fixed


@pytest.mark.parametrize("pool", [ThreadedBlockPool, AsyncBlockPool])
def test_a_correct_pool_passes_the_motifs_run_free(pool: type) -> None:
    """Our pools, threaded and async, stay clean through every motif on real threads or a real loop."""
    from kvstress.scenarios._motifs import motifs

    config = ScenarioConfig(pool, pool is AsyncBlockPool)
    fixed = motifs(config.num_blocks, config.is_async)
    result = stress(config, seed=5, max_executions=3 * len(fixed), fixed=fixed, fixed_only=True)
    assert result.failure is None, result.failure and result.failure.violation


def test_a_stress_slice_shares_its_time_between_motifs_and_drawn_scenarios(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A long slice runs both kinds; a short one (a lead) runs only the motifs."""
    from kvstress.fuzz import load_target
    from kvstress.fuzz._slices import SHORT_STRESS_S, run_slice
    from kvstress.scenarios import _stress as stress_module

    ran: list[bool] = []
    real = stress_module.run_stress_execution

    def counting(config: ScenarioConfig, *args: object) -> object:
        ran.append(config.scenario is not None)
        return real(config, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(stress_module, "run_stress_execution", counting)
    target = load_target("kvstress:ThreadedBlockPool")
    assert run_slice("stress", target, 1, 1.0).finding is None
    assert True in ran and False in ran
    ran.clear()
    assert run_slice("stress", target, 1, SHORT_STRESS_S / 2).finding is None
    assert ran and all(ran)


def test_a_stress_finding_on_a_motif_replays_that_motif(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The report keeps the motif's programs, and replay runs them, not a scenario drawn from the seed."""
    from kvstress.fuzz import _replay as replay_module
    from kvstress.fuzz import _slices as slices_module
    from kvstress.fuzz import fuzz, load_target
    from kvstress.scenarios._programs import Scenario

    monkeypatch.setattr(slices_module, "SHORT_STRESS_S", 1e9)  # every stress slice runs only the motifs
    outcome = fuzz(
        load_target("kvstress.mutants:ResetAfterOfferPool"), budget_s=30, mix=("stress",), report_dir=tmp_path
    )
    assert outcome.finding is not None and outcome.report is not None
    report = json.loads(outcome.report.read_text())
    assert report["strategy"] == "stress" and report["config"]["fixed_scenario"] is True
    ran: list[object] = []
    real = replay_module.run_stress_execution

    def recording(config: ScenarioConfig, seed: int) -> object:
        ran.append(config.scenario)
        return real(config, seed)

    monkeypatch.setattr(replay_module, "run_stress_execution", recording)
    replay_module.replay_report(report, tries=2)
    assert ran == [Scenario.from_json(report["scenario"])] * 2


def test_a_stress_finding_carries_the_interleaving_table() -> None:
    """A report of a free-running finding printed no operation at all (a blind user's): it
    carries the history as the table, in the order calls returned on the real clock."""
    from kvstress.fuzz import load_target
    from kvstress.fuzz._slices import run_slice

    target = load_target("kvstress.mutants:ResetAfterOfferPool")
    finding = None
    for seed in range(5):
        finding = run_slice("stress", target, seed, 5.0).finding
        if finding is not None:
            break
    assert finding is not None and finding.table is not None
    assert finding.table.splitlines()[0].split("|")[1].strip() == "b0"
    assert "<- failed here" in finding.table
