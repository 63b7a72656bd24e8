"""The delay strategy (delay-bounded search of protocol motifs, hints first) and the naive baseline."""

from __future__ import annotations

import dis
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from kvstress._violation import Operation
from kvstress.controlled._baton import hot_lines
from kvstress.fuzz import fuzz
from kvstress.fuzz._naive import naive_time
from kvstress.fuzz._replay import replay_report
from kvstress.fuzz._slices import DELAY_FIRST, run_slice, scenario_config
from kvstress.fuzz._target import load_target
from kvstress.linearize import check_history
from kvstress.reports import load_report
from kvstress.scenarios._motifs import PARKED_WAIT, motifs
from kvstress.scenarios._programs import HANDOFF_WAIT, Scenario
from kvstress.scenarios._search import search
from kvstress.schedulers import DelayBoundedScheduler, RandomScheduler


def _target(name: str, backend: str = "asyncio") -> object:
    return load_target(f"kvstress.mutants:{name}", backend=backend)


@pytest.mark.parametrize(
    ("name", "within"),
    [("RetainLostUpdatePool", 120), ("PollingCheckThenPopPool", 200), ("LateZeroTestPool", 100)],
)
def test_the_delay_strategy_finds_a_one_delay_race_in_its_hot_round(name: str, within: int) -> None:
    """A lost update and a check-then-act, each one switch inside a hinted window of one motif:
    found in the first round (the hot plans of every motif), in a bounded number of runs."""
    result = run_slice("delay", _target(name), 0, 30.0, memo={})
    assert result.finding is not None, name
    assert result.finding.violation.invariant in ("lost-block", "refcount", "crash", "queue-corruption")
    assert result.executions <= within, result.executions


def test_the_delay_strategy_opens_with_each_motifs_first_plans() -> None:
    """A race that needs one cold delay (a notify spent on a waiter whose timeout expires at the
    same instant) falls to the opening round, before any motif's long hot round."""
    result = run_slice("delay", _target("ThreadConditionTimedOutDropsNotifyPool"), 0, 30.0, memo={})
    assert result.finding is not None and result.finding.violation.invariant == "lost-wakeup"
    assert result.executions <= len(motifs(2, False)) * DELAY_FIRST, result.executions


def _motif_runs(name: str, pick: Any, cap: int) -> tuple[bool, int]:
    """Delay-bounded runs of the one motif ``pick`` selects, on corpus pool ``name``: (found, runs)."""
    target = load_target(f"kvstress.mutants:{name}")
    (motif,) = [m for m in motifs(2, False) if pick(m)]
    scheduler = DelayBoundedScheduler(2, woken_first=True)
    found = search(
        replace(scenario_config(target), scenario=motif), scheduler, max_executions=cap, budget_s=60
    )
    return found.failure is not None, found.executions


def _aba(motif: Scenario) -> bool:
    return any(step == ("release", "oldest") for program in motif.programs for step in program)


def _two_parked(motif: Scenario) -> bool:
    """Two waiters parked alike beside the holder alone (not one parked and one arriving as the
    blocks come back, nor two beside a third whose deadline lands as one comes back)."""
    parked = [program for program in motif.programs if program[-1] == ("acquire", PARKED_WAIT)]
    return (
        len(motif.programs) == 3
        and len(parked) == 2
        and parked[0] == parked[1]
        and all(step[0] != "cancel" for program in motif.programs for step in program)
    )


def test_the_churn_motif_reaches_a_race_past_an_index_threshold() -> None:
    """A ring whose consumer rewinds both indexes once its own passes twice the size (zephyr PR
    #37323, rebuilt blind: random's drawn programs found it on one seed of three in 10 s): the
    race needs four acquires before a release's ``tail += 1`` can meet the rewind. The churn
    motif gets there under random schedules; the ring that wraps each index on its own side
    stays clean."""
    churn = [m for m in motifs(2, False) if len(m.programs[0]) == 2 * (2 * 2 + 1)]
    assert len(churn) == 1
    found = []
    for name in ("RingRewindPool", "RingWrapPool"):
        config = replace(scenario_config(load_target(f"pools.ring_rewind:{name}")), scenario=churn[0])
        result = search(config, RandomScheduler(seed=1), max_executions=400, budget_s=60, shrink=False)
        found.append(None if result.failure is None else result.failure.violation.invariant)
    assert found[0] in ("queue-corruption", "lost-block", "counter-mismatch") and found[1] is None


def test_the_aba_motif_finds_a_lock_free_head_compared_by_id_alone() -> None:
    """ABA on a Treiber stack: a take paused between its read of the head and its CAS while
    another worker takes two blocks and gives the first back. One delay, at a hinted decision
    (the read before a compare-and-set): a few runs; the stamped head stays clean."""
    assert _motif_runs("TreiberPointerCasPool", _aba, 20)[0]
    assert _motif_runs("TreiberPool", _aba, 300) == (False, 300)


def test_the_two_waiter_motif_finds_the_aqs_shared_release_without_propagate() -> None:
    """JDK-6801020: the first waiter woken takes the last block it sees, and the second release
    lands before it becomes the head. One hot delay inside the woken waiter's run, which the
    search tries first (it was the 44th hot plan in decision order); Java 7's fix stays clean."""
    found, runs = _motif_runs("ClhNoPropagatePool", _two_parked, 40)
    assert found, runs
    assert _motif_runs("ClhQueuePool", _two_parked, 300) == (False, 300)


@pytest.mark.parametrize("name", ["ResetAfterOfferPool", "ThreadQueuePutBeforeResetPool"])
def test_the_delay_strategy_runs_a_woken_waiter_before_its_waker_goes_on(name: str) -> None:
    """A block offered before it is zeroed: from the woken-first base a parked waiter reads it
    with no delay at all, in the opening round; from the waker's base alone it is one delay at
    one decision among hundreds (ResetAfterOfferPool: not found in 600 runs; the other 353)."""
    result = run_slice("delay", _target(name), 0, 30.0, memo={})
    assert result.finding is not None and result.finding.violation.invariant == "dirty-read"
    assert result.executions <= len(motifs(2, False)) * DELAY_FIRST, result.executions


def test_a_double_release_racing_the_holders_own_is_found() -> None:
    """A double-release guard read outside the lock that drops the reference: two releases of
    one handle at once both pass it (Netty's Recycler). Only the racing-release motif makes two
    such calls overlap; the sequential double release of the contract and the machine is refused."""
    result = run_slice("delay", _target("ThreadQueueUnlockedGuardPool"), 0, 30.0, memo={})
    assert result.finding is not None
    assert result.finding.violation.invariant in ("queue-corruption", "shared-block", "lost-block")
    assert result.executions <= 200, result.executions


def _release(index: int, worker: str, start: float, end: float, result: bool, **args: Any) -> Operation:
    return Operation(index, worker, "release", {"block": 0, **args}, start, end, "ok", result)


def test_of_a_release_and_a_double_racing_it_exactly_one_puts_the_block_back() -> None:
    """The pool cannot tell two calls through one handle apart, so either may answer True; the
    other, refused, leaves the FREE block as it is. Both True is a block offered twice, neither a
    block lost."""
    acquire = Operation(0, "b0", "acquire", {"timeout": 0.0}, 0.0, 0.1, "ok", 0)
    for holder_won, racer_won, right in (
        (True, False, True),
        (False, True, True),
        (True, True, False),
        (False, False, False),
    ):
        history = (
            acquire,
            _release(1, "b0", 1.0, 3.0, holder_won),
            _release(2, "b1", 2.0, 2.5, racer_won, double=True, racing="b0"),
        )
        assert (check_history(history, 2).status == "ok") is right, (holder_won, racer_won)


def test_a_release_that_lost_the_race_to_a_double_may_refuse_by_raising() -> None:
    """When the racing double release put the block back first, the holder's own call is the
    double: a pool that refuses it by raising is correct. Every interleaving of the racing motif
    within two delays, on such a pool (it was a `crash` finding)."""
    target = load_target("pools.tiny:TinyStrictPool")
    (racing,) = [m for m in motifs(2, False) if any(step[0] == "rerelease" for p in m.programs for step in p)]
    scheduler = DelayBoundedScheduler(2, woken_first=True)
    found = search(
        replace(scenario_config(target), scenario=racing), scheduler, max_executions=5000, budget_s=120
    )
    assert found.failure is None, found.failure
    assert scheduler.exhausted and found.executions > 20


def test_a_slow_machine_runs_the_opening_and_hot_rounds_in_the_first_slice() -> None:
    """The opening and hot rounds run to their end within the slice's grace, however long they
    take; the rounds after them end with the slice's length (next to nothing here, standing in
    for a machine on which the opening alone took past it). CI missed the timed-out notify when
    the opening was cut at one second on a machine running 15 executions a second, and the AQS
    bug (JDK-6801020, one hot delay in the two-waiter motif) waited 5-15 s for its motif's hot
    round while the later slices ran a quarter-second each."""
    memo: dict[str, Any] = {}
    result = run_slice("delay", _target("CondvarPool"), 0, 1e-9, memo=memo, grace_s=60.0)
    assert result.finding is None
    assert result.executions > len(motifs(2, False)) * DELAY_FIRST
    assert memo["delay"].round == 3  # both passes of every motif's hot round ran, no cold plan after
    assert run_slice("delay", _target("CondvarPool"), 1, 1e-9, memo=memo, grace_s=60.0).executions == 0


@pytest.mark.parametrize("name", ["CondvarPool", "ThreadSemaphorePool", "PollingCasPool"])
def test_the_delay_strategy_is_silent_on_correct_pools(name: str) -> None:
    """Every motif's hot round and some cold delays on correct threaded pools: nothing found."""
    memo: dict[str, object] = {}
    first = run_slice("delay", _target(name), 0, 5.0, memo=memo)  # the hot round
    # Cold delays, going on. A slice that began inside the hot round ends with it: where the
    # first one's time ran out in its second pass, the next slice only finishes that pass (no
    # execution, if every hot plan ran in the first), and cold plans come in the one after.
    more = [run_slice("delay", _target(name), stream, 1.5, memo=memo) for stream in (1, 2)]
    assert first.finding is None and all(slice.finding is None for slice in more)
    assert first.executions >= len(motifs(2, False)) and sum(slice.executions for slice in more) > 0


def test_the_delay_strategy_is_silent_on_a_correct_async_pool() -> None:
    """On the controlled loop every motif of a small async pool is exhausted (no hints there)."""
    memo: dict[str, object] = {}
    result = run_slice("delay", _target("AsyncioSemaphorePool"), 0, 20.0, memo=memo)
    result = run_slice("delay", _target("AsyncioSemaphorePool"), 1, 20.0, memo=memo)
    assert result.finding is None


def test_a_delay_finding_is_reported_and_replays_exactly(tmp_path: Path) -> None:
    """The report carries the motif's programs; replay runs them under the recorded schedule."""
    outcome = fuzz(_target("RetainLostUpdatePool"), budget_s=20, mix=("delay",), report_dir=tmp_path)
    assert outcome.finding is not None and outcome.report is not None
    report = load_report(outcome.report)
    assert report["strategy"] == "delay" and report["config"]["fixed_scenario"] is True
    replayed = replay_report(report)
    assert replayed.reproduced and "exact replay" in replayed.note


def test_motifs_cover_the_protocol_pairs_and_grow_with_the_pool() -> None:
    """Twenty motifs for threads, twenty-two with cancellation for async; on real time the ones
    whose waiters park for a second of virtual time are left out (or wait for less); a larger
    pool is drained, and churned through more rounds (each index of the pool passed four times
    and more)."""
    assert len(motifs(2, False)) == 20 and len(motifs(2, True)) == 22
    assert len(motifs(2, False, virtual=False)) == 15 and len(motifs(2, True, virtual=False)) == 16
    assert any(len(program) == 5 + 4 for m in motifs(4, False) for program in m.programs)
    assert any(len(program) == 2 * (2 * 4 + 1) for m in motifs(4, False) for program in m.programs)


def test_a_scenario_round_trips_through_json_and_bad_json_is_named() -> None:
    for scenario in motifs(3, True):
        assert Scenario.from_json(scenario.to_json()) == scenario
    # A step's argument of the wrong kind too ("soon" for a timeout: a report edited by hand
    # said "could not convert string to float: 'soon'", naming no field; a blind reader's)
    wrong = ([[["acquire", "soon"]]], [[["sleep", -1]]], [[["share", True]]], [[["acquire_many", [0, None]]]])
    for bad in ([], "x", [[["fly", 1]]], [[["acquire"]]], [3], *wrong):
        with pytest.raises(ValueError, match="scenario"):
            Scenario.from_json(bad)


def test_a_check_then_act_on_a_container_is_a_hot_window() -> None:
    """``if self.items:`` then ``self.items.popleft()``: the lines after the check are hot, as
    after a read of an attribute that a later line stores."""

    class Pool:
        def __init__(self) -> None:
            self.items: list[int] = []

        def take(self) -> int | None:
            if not self.items:
                return None
            return self.items.pop()

    code = Pool.take.__code__
    first = code.co_firstlineno
    assert hot_lines(code) == frozenset({first + 2, first + 3})
    assert any(i.argval == "pop" for i in dis.get_instructions(code))


def test_a_waiter_that_parks_without_looking_again_falls_to_a_hot_delay() -> None:
    """``ShardedScanThenParkPool`` scans the stripes, then parks under the condition's lock
    without scanning again: a release between the two is a lost wake-up. The window before the
    park is hot for the delay strategy, so the arrival motif finds it among its first one-delay
    plans (376 runs of the motif when only lost-update windows were hot)."""
    target = _target("ShardedScanThenParkPool")
    arrival = motifs(target.num_blocks, target.is_async)[7]
    assert arrival.programs[1][0][0] == "sleep"  # the acquirer that arrives as blocks come back
    found = search(
        replace(scenario_config(target), scenario=arrival),
        DelayBoundedScheduler(2, woken_first=True),
        max_executions=60,
        budget_s=60,
    )
    assert found.failure is not None and found.failure.violation.invariant == "lost-wakeup"


def test_the_naive_baseline_finds_plain_bugs_and_is_silent_on_correct_pools() -> None:
    """The afternoon stress test: the sequential misuse at once, nothing on correct pools."""
    assert naive_time(_target("ClampedReleasePool"), 5.0) is not None
    assert naive_time(_target("CondvarPool"), 1.0) is None
    assert naive_time(_target("AnyioSemaphorePool", "trio"), 1.0) is None
    assert naive_time(_target("AsyncResetAfterOfferPool"), 5.0) is not None


def test_a_delay_only_run_ends_once_every_motif_is_exhausted(tmp_path: Path) -> None:
    """On trio the scheduler has no per-step choice, so each motif has one interleaving: a
    delay-only run ends after them rather than spin out its budget."""
    outcome = fuzz(_target("AnyioSemaphorePool", "trio"), budget_s=60, mix=("delay",), report_dir=tmp_path)
    assert outcome.finding is None and outcome.elapsed_s < 30
    assert outcome.executions == len(motifs(2, True))


class _SlowHandle:
    """A handle whose fields are properties that take virtual time to read (a slotmap-style
    handle's properties are the pool's code: another thread runs, time may move)."""

    def __init__(self, block: Any) -> None:
        self._block = block

    @property
    def id(self) -> int:
        time.sleep(0.01)
        return int(self._block.id)

    @property
    def data(self) -> Any:
        return self._block.data

    @property
    def state(self) -> Any:
        return self._block.state

    @property
    def refcount(self) -> int:
        return int(self._block.refcount)


class SlowHandlePool:
    """A correct Condition pool handing out ``_SlowHandle`` wrappers."""

    backoff_bound = 0.0

    def __init__(self, num_blocks: int, block_shape: Any, **kwargs: Any) -> None:
        from kvstress.mutants import CondvarPool

        self._pool = CondvarPool(num_blocks, block_shape, **kwargs)
        self.num_blocks = num_blocks

    def acquire(self, timeout: float | None = None) -> Any:
        block = self._pool.acquire(timeout)
        return None if block is None else _SlowHandle(block)

    def mark_in_use(self, handle: _SlowHandle) -> None:
        self._pool.mark_in_use(handle._block)

    def retain(self, handle: _SlowHandle) -> None:
        self._pool.retain(handle._block)

    def release(self, handle: _SlowHandle) -> bool:
        return bool(self._pool.release(handle._block))

    def free_count(self) -> int:
        return int(self._pool.free_count())

    def free_ids(self) -> list[int]:
        return list(self._pool.free_ids())


def test_an_acquire_ends_when_the_pool_returns_not_when_its_handle_is_read() -> None:
    """A parked waiter gets its block; reading the handle's ``id`` (a property that takes 10 ms
    of virtual time) is the harness's, after the call: the wake-up check must not count it as
    waiting beside the free block (a correct pool with slotmap handles was a lost-wakeup)."""
    target = load_target(f"{__name__}:SlowHandlePool")
    waiter = next(m for m in motifs(2, False) if ("acquire", HANDOFF_WAIT) in m.programs[1])
    found = search(
        replace(scenario_config(target), scenario=waiter),
        DelayBoundedScheduler(2, woken_first=True),
        max_executions=40,
        budget_s=60,
    )
    assert found.failure is None, found.failure
