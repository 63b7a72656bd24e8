"""Schedulers: the schedule encoding, each strategy on a model program, replay and the wrappers.

The model program drives a scheduler the way the controlled loop does, without asyncio: task t
has ``steps[t]`` steps, a task is runnable while it has steps left, and each decision runs one
step of the chosen task. Its interleavings can be counted by hand.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence

import pytest
from hypothesis import find, given, settings
from hypothesis import strategies as st

import kvstress.schedulers
from kvstress.schedulers import (
    RANDOM_DRAW,
    DelayBoundedScheduler,
    DFSScheduler,
    GuidedScheduler,
    HypothesisScheduler,
    MetricsScheduler,
    PCTScheduler,
    RandomScheduler,
    ReplayScheduler,
    Schedule,
    ScheduleDivergence,
    Scheduler,
    hypothesis_schedulers,
)

PUBLIC = {
    "RANDOM_DRAW",
    "SLEEPERS",
    "ALL_TIMERS",
    "DFSScheduler",
    "DelayBoundedScheduler",
    "HypothesisScheduler",
    "GuidedScheduler",
    "MetricsScheduler",
    "PCTScheduler",
    "RandomScheduler",
    "ReplayScheduler",
    "Schedule",
    "ScheduleDivergence",
    "Scheduler",
    "SchedulerBase",
    "SchedulerMetrics",
    "hypothesis_schedulers",
}
FAST = settings(max_examples=60, deadline=None, database=None)


def run_model(scheduler: Scheduler, steps: dict[int, int], draws_at: Sequence[int] = ()) -> list[int]:
    """One execution of the model program; returns the order of task steps taken.

    ``draws_at`` lists decision numbers before which the program asks for a random value.
    """
    left, order, current = dict(steps), [], None
    while any(left.values()):
        if len(order) in draws_at:
            scheduler.next_u64()
        runnable = [task for task in sorted(left) if left[task]]
        current = scheduler.next_task(runnable, current)
        assert current in runnable
        left[current] -= 1
        order.append(current)
    return order


def all_executions(scheduler: Scheduler, steps: dict[int, int], limit: int = 1000) -> list[tuple[int, ...]]:
    """Every execution the scheduler runs on the model program, until it says it is done."""
    runs = []
    while scheduler.new_execution():
        runs.append(tuple(run_model(scheduler, steps)))
        assert len(runs) <= limit, "the scheduler did not stop"
    return runs


def all_executions_bounded(scheduler: Scheduler, steps: dict[int, int], count: int) -> list[tuple[int, ...]]:
    """``count`` executions of a scheduler that never runs out."""
    runs = []
    for _ in range(count):
        assert scheduler.new_execution()
        runs.append(tuple(run_model(scheduler, steps)))
    return runs


def preemptions(order: Sequence[int], steps: dict[int, int]) -> int:
    """Switches away from a task that still had steps left, in one model execution."""
    left, count = dict(steps), 0
    for previous, following in itertools.pairwise(order):
        left[previous] -= 1
        count += previous != following and left[previous] > 0
    return count


# -- the public names ------------------------------------------------------------------------------


def test_public_names_are_pinned() -> None:
    """kvstress.schedulers exports exactly the pinned names, each defined in a private module."""
    # isidentifier: pytest rewrites kvstress (it ships a pytest11 plugin), adding @py_builtins, @pytest_ar
    exported = {name for name in vars(kvstress.schedulers) if name.isidentifier() and name[0] != "_"}
    assert exported == PUBLIC
    for name in PUBLIC - {"RANDOM_DRAW", "SLEEPERS", "ALL_TIMERS"}:
        assert "._" in getattr(kvstress.schedulers, name).__module__, name


# -- Schedule and its text form --------------------------------------------------------------------

task_ids = st.one_of(st.integers(-1, 20), st.integers(-1, 2**63 - 1))
schedules = st.builds(
    Schedule,
    strategy=st.text(min_size=1, max_size=24),
    seed=st.integers(0, 2**64 - 1),
    choices=st.lists(task_ids, max_size=300).map(tuple),
)


@FAST
@given(schedules)
def test_encoding_round_trips(schedule: Schedule) -> None:
    """decode(encode(s)) == s for any schedule, and the text is one versioned line."""
    text = schedule.encode()
    assert text.startswith("ks1:")
    assert text.isprintable() and " " not in text
    assert Schedule.decode(text) == schedule
    assert str(schedule) == text


@FAST
@given(schedules, st.integers(1, 40))
def test_decoding_ignores_line_wrapping(schedule: Schedule, width: int) -> None:
    """A schedule wrapped over several lines (as a terminal or an email does) still decodes."""
    text = schedule.encode()
    wrapped = "\n".join(text[i : i + width] for i in range(0, len(text), width))
    assert Schedule.decode(f"  {wrapped}\n") == schedule


def test_long_repetitive_schedule_stays_short() -> None:
    """Ten thousand choices of a typical run encode to a few hundred characters at most."""
    choices = tuple(itertools.islice(itertools.cycle([1, 1, 2, 3, 1, RANDOM_DRAW, 2]), 10_000))
    text = Schedule("random", 12345, choices).encode()
    assert len(text) < 300
    assert Schedule.decode(text).choices == choices


def _valid() -> str:
    return Schedule("pct", 7, (1, 2, -1, 3, 1)).encode()


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("hello world", "not a kvstress schedule"),
        ("", "not a kvstress schedule"),
        ("shuttle:AAAA", "not a kvstress schedule"),
        ("ks2:AAAAAAAA", "format 'ks2' is not supported"),
        ("ks1:AA!A", "not a urlsafe base64 character"),
        ("ks1:AAAAA", "ends mid-byte"),
        ("ks1:AAAA", "truncated"),
        (_valid()[:-3], "truncated"),
        (_valid()[:-6], "checksum mismatch"),
        (_valid()[:10] + ("B" if _valid()[10] != "B" else "C") + _valid()[11:], "checksum mismatch"),
    ],
)
def test_foreign_truncated_and_corrupt_strings_are_rejected(text: str, problem: str) -> None:
    """decode raises ValueError naming the problem, never returns a wrong schedule."""
    with pytest.raises(ValueError, match=problem):
        Schedule.decode(text)


def test_corrupt_framing_behind_a_valid_checksum_is_rejected() -> None:
    """A well-checksummed payload whose fields do not parse is reported as truncated or corrupt."""
    import base64
    import zlib

    def framed(body: bytes) -> str:
        payload = b"\x00" + body
        payload += zlib.crc32(payload).to_bytes(4, "big")
        return "ks1:" + base64.urlsafe_b64encode(payload).rstrip(b"=").decode()

    with pytest.raises(ValueError, match="announces 9 choices"):
        Schedule.decode(framed(b"\x01x\x00\x09\x01"))
    with pytest.raises(ValueError, match="after the last choice"):
        Schedule.decode(framed(b"\x01x\x00\x01\x01\x01"))
    with pytest.raises(ValueError, match="not UTF-8"):
        Schedule.decode(framed(b"\x01\xff\x00\x00"))


@pytest.mark.parametrize(
    ("kwargs", "problem"),
    [
        ({"strategy": "", "seed": 0}, "strategy must be a non-empty str"),
        ({"strategy": "x", "seed": -1}, r"seed must be an int in \[0, 2\*\*64\), got -1 \(int\)"),
        ({"strategy": "x", "seed": 2**64}, "seed must be an int"),
        ({"strategy": "x", "seed": 0, "choices": (1, -2)}, r"choices\[1\] must be a task id"),
        ({"strategy": "x", "seed": 0, "choices": (1.0,)}, r"got 1.0 \(float\)"),
    ],
)
def test_schedule_fields_are_validated(kwargs: dict[str, object], problem: str) -> None:
    """A Schedule refuses bad fields, naming the field, what it expects and what it got."""
    with pytest.raises((TypeError, ValueError), match=problem):
        Schedule(**kwargs)  # type: ignore[arg-type]


# -- the base class: recording, randomness, misuse ---------------------------------------------------


def test_schedule_records_task_choices_and_draw_positions() -> None:
    """schedule() lists each pick and each random draw (as RANDOM_DRAW), in order."""
    scheduler = RandomScheduler(seed=3)
    assert scheduler.new_execution()
    order = run_model(scheduler, {1: 2, 2: 2}, draws_at=(0, 2))
    recorded = scheduler.schedule()
    assert recorded.strategy == "random"
    assert recorded.tasks == tuple(order)
    assert recorded.choices.count(RANDOM_DRAW) == 2
    assert recorded.choices[0] == RANDOM_DRAW


def test_random_values_come_from_the_execution_seed() -> None:
    """next_u64 values are 64-bit and a function of the execution seed alone."""
    scheduler = RandomScheduler(seed=11)
    assert scheduler.new_execution()
    values = [scheduler.next_u64() for _ in range(5)]
    assert all(0 <= value < 2**64 for value in values)
    expected = random.Random(scheduler.schedule().seed)
    assert values == [expected.getrandbits(64) for _ in range(5)]


def test_use_outside_an_execution_is_refused() -> None:
    """next_task or next_u64 before new_execution raises, saying to call new_execution first."""
    scheduler = RandomScheduler(seed=1)
    with pytest.raises(RuntimeError, match="call new_execution"):
        scheduler.next_task([1, 2], None)
    with pytest.raises(RuntimeError, match="call new_execution"):
        scheduler.next_u64()


def test_empty_runnable_and_bad_seeds_are_refused() -> None:
    """An empty runnable set and a seed outside [0, 2**64) raise ValueError naming them."""
    scheduler = RandomScheduler(seed=1)
    assert scheduler.new_execution()
    with pytest.raises(ValueError, match="runnable must name at least one task"):
        scheduler.next_task([], None)
    with pytest.raises(ValueError, match=r"seed must be an int in \[0, 2\*\*64\) or None, got -5 \(int\)"):
        RandomScheduler(seed=-5)


# -- uniform random ---------------------------------------------------------------------------------


def test_random_same_seed_same_executions() -> None:
    """Two random schedulers with one seed make the same choices, execution after execution."""
    first, second = RandomScheduler(seed=42), RandomScheduler(seed=42)
    for _ in range(20):
        assert first.new_execution() and second.new_execution()
        steps = {1: 3, 2: 3, 3: 3}
        assert run_model(first, steps) == run_model(second, steps)
        assert first.schedule() == second.schedule()


def test_random_reaches_every_interleaving() -> None:
    """Over enough executions, uniform random produces all 6 interleavings of 2 x 2 steps."""
    scheduler = RandomScheduler(seed=5)
    seen = {tuple(run_model(scheduler, {1: 2, 2: 2})) for _ in range(200) if scheduler.new_execution()}
    assert len(seen) == 6


def test_unseeded_scheduler_is_seeded_by_hypothesis() -> None:
    """seed=None draws from the global random module, which Hypothesis seeds per example."""
    seeds: list[int] = []

    @settings(max_examples=1, database=None, derandomize=True)
    @given(st.just(None))
    def record(_: None) -> None:
        seeds.append(RandomScheduler().seed)

    record()
    record()
    assert seeds[0] == seeds[1]


# -- PCT --------------------------------------------------------------------------------------------


def test_pct_first_execution_learns_k() -> None:
    """The first execution has no change points; later ones draw d - 1 of them from 1..k."""
    scheduler = PCTScheduler(depth=3, seed=2)
    assert scheduler.new_execution()
    assert scheduler.change_points == ()
    run_model(scheduler, {1: 4, 2: 4, 3: 2})
    for _ in range(30):
        assert scheduler.new_execution()
        assert scheduler.k == 10
        points = scheduler.change_points
        assert len(points) == 2 and len(set(points)) == 2
        assert all(1 <= point <= 10 for point in points)
        run_model(scheduler, {1: 4, 2: 4, 3: 2})


def test_pct_draws_k_from_recent_lengths_not_the_longest() -> None:
    """Executions of differing lengths: k is one of the recent lengths, so a short execution's
    change points fall inside it most of the time, however long the longest one was."""
    scheduler = PCTScheduler(depth=3, seed=5)
    assert scheduler.new_execution()
    run_model(scheduler, {1: 400, 2: 400})  # one long execution: 800 decisions
    drawn = []
    for _ in range(200):
        assert scheduler.new_execution()
        drawn.append(scheduler.k)
        run_model(scheduler, {1: 5, 2: 5})  # then only short ones
    assert set(drawn) <= {10, 800}
    assert drawn[-100:].count(10) >= 90  # the long one has left the window (or nearly)


def test_pct_depth_one_never_preempts() -> None:
    """With d = 1 there are no change points: a task runs until it has no steps left."""
    scheduler = PCTScheduler(depth=1, seed=9)
    runs = set(all_executions_bounded(scheduler, {1: 3, 2: 3}, 40))
    assert runs == {(1, 1, 1, 2, 2, 2), (2, 2, 2, 1, 1, 1)}


def test_pct_change_point_lowers_the_running_task() -> None:
    """With d = 2 each execution preempts at most once, exactly at its change point."""
    scheduler = PCTScheduler(depth=2, seed=4, k=6)
    switched_at = set()
    for _ in range(60):
        assert scheduler.new_execution()
        (point,) = scheduler.change_points
        order = run_model(scheduler, {1: 3, 2: 3})
        count = preemptions(order, {1: 3, 2: 3})
        assert count <= 1
        if count:
            # The switch happens at the change point: decision number `point` runs the other task.
            assert order[point - 1] != order[point - 2]
            switched_at.add(point)
    assert len(switched_at) > 1


def test_pct_meets_its_probability_bound() -> None:
    """A depth-2 bug (task 1 starts, task 2 runs before task 1's last step) hits >= 1/(n*k) of runs."""
    steps, n, k, runs = {1: 3, 2: 3}, 2, 6, 400
    scheduler = PCTScheduler(depth=2, seed=21)
    hits = 0
    for _ in range(runs):
        assert scheduler.new_execution()
        order = run_model(scheduler, steps)
        hits += order[0] == 1 and order.index(2) < 3
    assert scheduler.k == k
    assert hits >= runs / (n * k)


def test_pct_arguments_are_validated() -> None:
    """depth < 1 or a negative k raise ValueError naming the argument and the value."""
    with pytest.raises(ValueError, match=r"depth must be an int >= 1, got 0 \(int\)"):
        PCTScheduler(depth=0)
    with pytest.raises(ValueError, match=r"k must be None or an int >= 0, got -1"):
        PCTScheduler(k=-1)


# -- bounded exhaustive search -------------------------------------------------------------------


def all_interleavings(steps: dict[int, int]) -> set[tuple[int, ...]]:
    """Every interleaving of the model program, by brute force over permutations."""
    tokens = [task for task, count in steps.items() for _ in range(count)]
    return set(itertools.permutations(tokens))


@pytest.mark.parametrize(
    ("bound", "expected"),
    [
        # Two tasks of two steps. 1122 and 2211 switch only when a task is done (0 preemptions);
        # 1221 and 2112 preempt once; 1212 and 2121 twice.
        (0, {(1, 1, 2, 2), (2, 2, 1, 1)}),
        (1, {(1, 1, 2, 2), (2, 2, 1, 1), (1, 2, 2, 1), (2, 1, 1, 2)}),
        (2, {(1, 1, 2, 2), (2, 2, 1, 1), (1, 2, 2, 1), (2, 1, 1, 2), (1, 2, 1, 2), (2, 1, 2, 1)}),
        (None, all_interleavings({1: 2, 2: 2})),
    ],
)
def test_dfs_enumerates_interleavings_within_the_bound(
    bound: int | None, expected: set[tuple[int, ...]]
) -> None:
    """DFS runs each interleaving with at most `bound` preemptions exactly once, then stops."""
    scheduler = DFSScheduler(preemption_bound=bound)
    runs = all_executions(scheduler, {1: 2, 2: 2})
    assert len(runs) == len(set(runs)) == len(expected)
    assert set(runs) == expected
    assert scheduler.exhausted and not scheduler.new_execution()


@pytest.mark.parametrize("bound", [0, 1, 2])
def test_dfs_single_step_tasks_need_no_preemption(bound: int) -> None:
    """Three one-step tasks: all 3! = 6 orders at any bound (finishing a task is no preemption)."""
    runs = all_executions(DFSScheduler(preemption_bound=bound), {1: 1, 2: 1, 3: 1})
    assert sorted(runs) == sorted(itertools.permutations([1, 2, 3]))


def test_dfs_counts_match_preemptions_by_brute_force() -> None:
    """For 2 x 3 steps, DFS at bound b runs exactly the interleavings with <= b preemptions."""
    steps = {1: 3, 2: 3}
    for bound in range(4):
        runs = set(all_executions(DFSScheduler(preemption_bound=bound), steps))
        assert runs == {order for order in all_interleavings(steps) if preemptions(order, steps) <= bound}


# -- delay-bounded search, hints first -----------------------------------------------------------


def delays(order: Sequence[int], steps: dict[int, int]) -> int:
    """Decisions of one model execution that ran another task than the default: the one that
    ran last while it has steps left, else the lowest id with steps left."""
    left, count, current = dict(steps), 0, None
    for task in order:
        runnable = sorted(t for t in left if left[t])
        default = current if current in runnable else runnable[0]
        count += task != default
        left[task] -= 1
        current = task
    return count


def test_delay_bounded_runs_each_interleaving_within_the_bound_once() -> None:
    """For 2 x 3 and 3 x 2 steps, every interleaving with <= b delays, each once, then done."""
    for steps in ({1: 3, 2: 3}, {1: 2, 2: 2, 3: 2}):
        for bound in range(4):
            scheduler = DelayBoundedScheduler(bound)
            runs = all_executions(scheduler, steps)
            assert len(runs) == len(set(runs))
            assert set(runs) == {o for o in all_interleavings(steps) if delays(o, steps) <= bound}
            assert scheduler.exhausted and not scheduler.new_execution()


def test_delay_bounded_tries_hot_decisions_first() -> None:
    """After the plain run, the first plans delay at hinted decisions, whatever their place."""
    hot_at = {4, 5}
    scheduler = DelayBoundedScheduler(1)
    firsts = []
    while scheduler.new_execution():
        left, order, current = {1: 5, 2: 5}, [], None
        while any(left.values()):
            scheduler.hot = len(order) in hot_at
            current = scheduler.next_task([t for t in sorted(left) if left[t]], current)
            left[current] -= 1
            order.append(current)
        firsts.append(next((i for i, (a, b) in enumerate(itertools.pairwise(order)) if a != b), None))
    # run 0: 1111122222 (switch at 4); then delays at decisions 4 and 5 (hot), then 1, 2, 3, ...
    assert firsts[:4] == [4, 3, 4, 0]


def _woken_model(scheduler: DelayBoundedScheduler) -> tuple[int, ...]:
    """Task 1 takes 3 steps; task 2 (2 steps) waits until task 1's first step wakes it. The
    controller tells the scheduler which task was just woken, as the thread baton does."""
    left, order, current, was = {1: 3, 2: 2}, [], None, set()
    while any(left.values()):
        runnable = [t for t in (1, 2) if left[t] and (t == 1 or left[1] < 3)]
        scheduler.woken = next((t for t in runnable if t not in was and t != current), None)
        was = set(runnable)
        current = scheduler.next_task(runnable, current)
        left[current] -= 1
        order.append(current)
    return tuple(order)


def test_delay_bounded_runs_a_woken_task_first_from_its_second_base() -> None:
    """With ``woken_first`` the plain run hands over to the task just woken, and is ranked first;
    the waker's base still covers every interleaving within the bound. Without it, nothing
    changes: the hint is ignored."""
    scheduler = DelayBoundedScheduler(0, woken_first=True)
    runs = []
    while scheduler.new_execution():
        runs.append(_woken_model(scheduler))
    assert runs == [(1, 2, 2, 1, 1), (1, 1, 1, 2, 2)]
    steps = {1: 3, 2: 2}
    for bound in range(3):
        scheduler = DelayBoundedScheduler(bound, woken_first=True)
        runs = []
        while scheduler.new_execution():
            runs.append(_woken_model(scheduler))
        # The model's order always starts with task 1 (task 2 is not runnable before it).
        within = {o for o in all_interleavings(steps) if o[0] == 1 and delays(o, steps) <= bound}
        assert within <= set(runs)
    plain = DelayBoundedScheduler(0)
    assert plain.new_execution() and _woken_model(plain) == (1, 1, 1, 2, 2)
    assert not plain.new_execution()


def _model_runs(
    scheduler: DelayBoundedScheduler,
    steps: dict[int, int],
    sleeper: int,
    waker_left: int,
    known: frozenset[int] = frozenset(),
) -> list[tuple[int, ...]]:
    """Every run of a model: each task takes ``steps[task]`` steps, and ``sleeper`` waits until
    task 1 has fewer than ``waker_left`` steps left (0: it never waits); the controller tells
    the scheduler which task was just woken, as the thread baton does (tasks in ``known`` are
    runnable from the start, not woken)."""
    runs = []
    while scheduler.new_execution():
        left, order, current, was = dict(steps), [], None, set(known)
        while any(left.values()):
            runnable = [
                t
                for t in sorted(left)
                if left[t] and (t != sleeper or left[1] < waker_left or not waker_left)
            ]
            scheduler.woken = next((t for t in runnable if t not in was and t != current), None)
            was = set(runnable)
            current = scheduler.next_task(runnable, current)
            left[current] -= 1
            order.append(current)
        runs.append(tuple(order))
    return runs


def _woken_runs(scheduler: DelayBoundedScheduler, wakes: bool) -> list[tuple[int, ...]]:
    """Every run of a three-task model: task 1 takes 3 steps, tasks 2 and 3 two each; with
    ``wakes``, task 3 waits until task 1's second step wakes it."""
    return _model_runs(scheduler, {1: 3, 2: 2, 3: 2}, sleeper=3, waker_left=2 if wakes else 0)


@pytest.mark.parametrize("bound", [0, 1, 2])
def test_delay_bounded_runs_a_plan_once_where_its_base_changed_nothing(bound: int) -> None:
    """A plan whose run from the woken-first base never let the base change a choice would run the
    same execution from the other base: it runs once, and the interleavings the other base
    reaches are all still run. Where nothing is woken, that is every plan: no run twice (each
    ran twice before: 70 runs of 35 interleavings at bound 2)."""
    for wakes in (False, True):
        runs = _woken_runs(DelayBoundedScheduler(bound, woken_first=True), wakes)
        plain = _woken_runs(DelayBoundedScheduler(bound), wakes)
        assert set(plain) <= set(runs)
        if not wakes:
            assert sorted(runs) == sorted(plain)  # each once, and no more than the plain base runs


def test_delay_bounded_tries_a_woken_tasks_run_first() -> None:
    """Among plans of equal rank, a delay inside the run of a task just woken (the hand-off: a
    woken waiter preempted as it takes its block) comes before the others, where the order of
    decisions alone would try every earlier one first."""
    # Task 1 takes 6 steps, task 3 two, and task 2 (3 steps) waits until task 1's fifth step
    # wakes it. Tasks 1 and 3 are runnable from the start: not woken.
    scheduler = DelayBoundedScheduler(1, woken_first=True)
    runs = _model_runs(scheduler, {1: 6, 2: 3, 3: 2}, sleeper=2, waker_left=2, known=frozenset({1, 3}))
    plain = (1, 1, 1, 1, 1, 2, 2, 2, 1, 3, 3)  # task 2 runs as soon as it is woken
    assert runs[0] == plain
    first_change = [
        next((i for i, (a, b) in enumerate(zip(run, plain, strict=True)) if a != b), None) for run in runs[2:]
    ]
    # After the other base's plain run: the delays inside task 2's run (decisions 5-7), then
    # the earlier decisions 0-4 (where only task 3 could go instead).
    assert first_change[:6] == [5, 5, 6, 6, 7, 7]
    assert first_change[6] == 0


def test_delay_bounded_holds_back_cold_plans_until_allowed() -> None:
    """With ``max_cold = 0`` only all-hot plans run; raising it goes on where it stopped."""
    steps = {1: 2, 2: 2}
    scheduler = DelayBoundedScheduler(1)
    scheduler.max_cold = 0
    first = all_executions(scheduler, steps)
    assert first == [(1, 1, 2, 2)] and not scheduler.exhausted
    scheduler.max_cold = None
    rest = all_executions(scheduler, steps)
    assert set(first + rest) == {o for o in all_interleavings(steps) if delays(o, steps) <= 1}
    assert scheduler.exhausted


def test_delay_bounded_arguments_are_validated() -> None:
    with pytest.raises(ValueError, match="bound must be an int >= 0"):
        DelayBoundedScheduler(-1)


def test_dfs_random_values_are_the_same_every_execution() -> None:
    """DFS varies the interleaving only: each execution draws the same random values."""
    scheduler = DFSScheduler(preemption_bound=1, seed=77)
    draws = set()
    while scheduler.new_execution():
        draws.add(scheduler.next_u64())
        run_model(scheduler, {1: 2, 2: 2})
    assert len(draws) == 1


def test_dfs_detects_a_nondeterministic_program() -> None:
    """A program whose runnable tasks change between executions raises ScheduleDivergence."""
    scheduler = DFSScheduler(preemption_bound=1)
    assert scheduler.new_execution()
    run_model(scheduler, {1: 2, 2: 2})
    assert scheduler.new_execution()
    with pytest.raises(ScheduleDivergence, match="not deterministic"):
        run_model(scheduler, {1: 2, 3: 2})


# -- replay -----------------------------------------------------------------------------------------


def test_replay_reproduces_an_execution_exactly() -> None:
    """Replaying a random execution's schedule (as text) repeats its steps and its random values."""
    original = RandomScheduler(seed=8)
    for _ in range(5):
        assert original.new_execution()
        order = run_model(original, {1: 3, 2: 2, 3: 3}, draws_at=(1, 4))
    recorded = original.schedule()
    original_draws = _draws(recorded)

    replay = ReplayScheduler(recorded.encode())
    assert replay.new_execution()
    assert run_model(replay, {1: 3, 2: 2, 3: 3}, draws_at=(1, 4)) == order
    assert replay.schedule() == recorded and replay.finished
    assert _draws(replay.schedule()) == original_draws
    assert not replay.new_execution()


def _draws(schedule: Schedule) -> list[int]:
    """The random values an execution of ``schedule`` saw, regenerated from its seed."""
    stream = random.Random(schedule.seed)
    return [stream.getrandbits(64) for choice in schedule.choices if choice == RANDOM_DRAW]


@pytest.mark.parametrize(
    ("choices", "problem"),
    [
        ((1, 1, 1, 2), "the schedule chose task 1, but the runnable tasks are \\[2\\]"),
        ((1, -1, 2, 2), "the run asks for a task among \\[1, 2\\], but the schedule drew a random value"),
        ((1, 1), "schedule ends after 2 choices"),
    ],
)
def test_replay_divergence_is_reported(choices: tuple[int, ...], problem: str) -> None:
    """A run that leaves the recorded path raises ScheduleDivergence saying where and how."""
    replay = ReplayScheduler(Schedule("random", 0, choices))
    assert replay.new_execution()
    with pytest.raises(ScheduleDivergence, match=problem):
        run_model(replay, {1: 2, 2: 2})


def test_replay_refuses_a_random_draw_where_a_task_was_chosen() -> None:
    """A random draw where the schedule chose a task raises ScheduleDivergence."""
    replay = ReplayScheduler(Schedule("random", 0, (1, 2)))
    assert replay.new_execution()
    with pytest.raises(ScheduleDivergence, match="asks for a random value, but the schedule chose task 1"):
        replay.next_u64()


# -- wrappers and Hypothesis ---------------------------------------------------------------------


def test_metrics_count_without_changing_decisions() -> None:
    """MetricsScheduler counts executions, decisions, draws and preemptions; choices are unchanged."""
    plain, counted = RandomScheduler(seed=13), MetricsScheduler(RandomScheduler(seed=13))
    total_preemptions = 0
    for _ in range(10):
        assert plain.new_execution() and counted.new_execution()
        order = run_model(plain, {1: 2, 2: 3}, draws_at=(0,))
        assert run_model(counted, {1: 2, 2: 3}, draws_at=(0,)) == order
        total_preemptions += preemptions(order, {1: 2, 2: 3})
    metrics = counted.metrics
    assert (metrics.executions, metrics.decisions, metrics.random_draws) == (10, 50, 10)
    assert metrics.preemptions == total_preemptions
    assert metrics.longest_execution == 5
    assert counted.schedule() == plain.schedule()


def test_hypothesis_shrinks_to_one_preemption() -> None:
    """A failure needing one preemption shrinks to a schedule with exactly one."""
    steps = {1: 4, 2: 4}

    def fails(scheduler: HypothesisScheduler) -> bool:
        assert scheduler.new_execution()
        order = run_model(scheduler, steps)
        return order.index(2) in (1, 2, 3) if order[0] == 1 else False

    found = find(
        hypothesis_schedulers(), fails, settings=settings(database=None, derandomize=True, max_examples=300)
    )
    order = list(found.schedule().tasks)
    assert preemptions(order, steps) == 1
    assert not found.new_execution()


@settings(max_examples=25, deadline=None, database=None)
@given(hypothesis_schedulers())
def test_hypothesis_scheduler_picks_runnable_tasks(scheduler: HypothesisScheduler) -> None:
    """Every choice a HypothesisScheduler makes is runnable, and its schedule replays."""
    assert scheduler.new_execution()
    order = run_model(scheduler, {1: 2, 2: 2, 3: 1}, draws_at=(2,))
    replay = ReplayScheduler(scheduler.schedule())
    assert replay.new_execution()
    assert run_model(replay, {1: 2, 2: 2, 3: 1}, draws_at=(2,)) == order


def test_guided_follows_its_choices_then_keeps_the_current_task() -> None:
    """GuidedScheduler takes a listed choice when runnable, else (and after the list) stays put."""
    guided = GuidedScheduler([2, RANDOM_DRAW, 1, 5], seed=9, strategy="pct")
    assert guided.new_execution()
    assert guided.next_task([0, 1, 2], 0) == 2
    guided.next_u64()
    assert guided.next_task([0, 1, 2], 2) == 1
    assert guided.next_task([0, 1, 2], 1) == 1  # 5 is not runnable: keep the current task
    assert guided.next_task([0, 2], 1) == 0  # the current one blocked: the lowest id
    assert guided.schedule() == Schedule("pct", 9, (2, RANDOM_DRAW, 1, 1, 0))
    assert not guided.new_execution()


def test_a_guided_run_replays_exactly() -> None:
    """What a guided run recorded replays with ReplayScheduler, draws included."""
    guided = GuidedScheduler([1, 0], seed=3)
    guided.new_execution()
    picks = [guided.next_task([0, 1], None), guided.next_u64(), guided.next_task([0, 1], 1)]
    replay = ReplayScheduler(guided.schedule())
    replay.new_execution()
    assert [replay.next_task([0, 1], None), replay.next_u64(), replay.next_task([0, 1], 1)] == picks
    assert replay.finished


def test_a_divergence_at_a_timers_choice_says_so() -> None:
    """It said "the schedule chose task 1048578", an id no user can find (a blind user's
    explored test whose work in to_thread made the replay diverge)."""
    from kvstress.controlled._loop import TIMER_LANE

    replay = ReplayScheduler(Schedule("random", 0, (TIMER_LANE + 2,)))
    assert replay.new_execution()
    with pytest.raises(ScheduleDivergence, match="chose to fire timer 2") as caught:
        replay.next_task([0, 3], 0)
    assert "to_thread" in str(caught.value)


def test_a_dfs_divergence_says_which_task_was_running() -> None:
    """The same runnable tasks with another one running read "[0, 3] differ from [0, 3]"."""
    scheduler = DFSScheduler()
    assert scheduler.new_execution()
    scheduler.next_task([0, 3], 0)
    assert scheduler.new_execution()
    with pytest.raises(ScheduleDivergence) as caught:
        scheduler.next_task([0, 3], 3)
    said = str(caught.value)
    assert "runnable tasks [0, 3], task 3 running" in said and "task 0 running" in said
    assert "real threads" in said
