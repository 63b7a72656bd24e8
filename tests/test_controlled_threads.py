"""run_threads/explore_threads: one thread at a time, the scheduler's order, virtual time, named failures.

This module is passed as ``modules=[__name__]``: every line of it that a controlled thread runs
is a scheduling point, and its ``threading``/``time`` names are the cooperative ones during a run.
"""

from __future__ import annotations

import _thread
import functools
import gc
import queue
import re
import sys
import threading
import time
import types
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from hint_log import HintLog, WarmLog

from kvstress.controlled import (
    SchedulerExhausted,
    SchedulerMisbehaved,
    StepLimitExceeded,
    StuckThread,
    ThreadDeadlock,
    _coop,
    _coop_queue,
    explore_threads,
    run_threads,
    spawn,
)
from kvstress.controlled._baton import HarnessLock, ThreadController
from kvstress.controlled._loop import FIRE_HORIZON
from kvstress.explorer._strategies import SleepersOnlyRandom
from kvstress.schedulers import (
    DelayBoundedScheduler,
    DFSScheduler,
    PCTScheduler,
    RandomScheduler,
    ReplayScheduler,
    Scheduler,
)

REAL_THREADING, REAL_TIME, REAL_QUEUE = threading, time, queue
REAL_LOCK = threading.Lock  # _thread.allocate_lock before Python 3.13, the _thread.lock class since


def run(main: Callable[[], Any], scheduler: Scheduler | None = None, **options: Any) -> Any:
    """``main()`` as one controlled execution with this module traced and patched."""
    return run_threads(main, scheduler or RandomScheduler(seed=0), modules=[__name__], **options)


def writers() -> list[str]:
    """Three threads each append four tagged events; the list is the interleaving."""
    out: list[str] = []

    def writer(name: str) -> None:
        for k in range(4):
            out.append(f"{name}{k}")

    threads = [spawn(functools.partial(writer, name), name=name) for name in "abc"]
    for thread in threads:
        thread.join()
    return out


def counter(*, locked: bool) -> None:
    """Two threads add one to a shared counter: read, then write, on separate traced lines."""
    lock = threading.Lock()
    state = {"x": 0}

    def bump() -> None:
        with lock if locked else _NoLock():
            x = state["x"]
            state["x"] = x + 1

    threads = [spawn(bump), spawn(bump)]
    for thread in threads:
        thread.join()
    assert state["x"] == 2, f"lost update: x == {state['x']}"


def one_line_counter(*, locked: bool) -> None:
    """Two threads add one to a shared counter in one line: ``state.x += 1``."""
    lock = threading.Lock()
    state = types.SimpleNamespace(x=0, cells=[0])

    def bump() -> None:
        with lock if locked else _NoLock():
            state.x += 1
            state.cells[0] += 1

    threads = [spawn(bump), spawn(bump)]
    for thread in threads:
        thread.join()
    assert (state.x, state.cells[0]) == (2, 2), f"lost update: {state.x}, {state.cells[0]}"


class _NoLock:
    """A context manager that protects nothing."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def module_from_source(name: str, source: str, monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """A module built from ``source`` and registered in ``sys.modules`` for this test only."""
    module = types.ModuleType(name)
    module.__file__ = f"/kvstress-test-modules/{name}.py"
    monkeypatch.setitem(sys.modules, name, module)
    exec(compile(source, module.__file__, "exec"), module.__dict__)
    return module


# -- one execution -------------------------------------------------------------------------------


def test_run_threads_returns_what_main_returns() -> None:
    """run_threads returns main's value; threads ran one at a time to completion."""

    def main() -> tuple[list[int], float]:
        lock = threading.Lock()
        out: list[int] = []

        def worker(i: int) -> None:
            with lock:
                out.append(i)
                time.sleep(0.5)

        threads = [spawn(functools.partial(worker, i)) for i in range(3)]
        for thread in threads:
            thread.join()
        return sorted(out), time.monotonic()

    assert run(main) == ([0, 1, 2], 1.5)


@pytest.mark.parametrize("make", [lambda: RandomScheduler(seed=7), lambda: PCTScheduler(depth=3, seed=7)])
def test_same_seed_gives_same_interleaving_and_schedule(make: Callable[[], Scheduler]) -> None:
    """Two runs with the same seed produce the same event trace, result and recorded schedule."""
    first, second = make(), make()
    assert run(writers, first) == run(writers, second)
    assert first.schedule() == second.schedule()


def test_different_seeds_give_different_interleavings() -> None:
    """Across a handful of seeds the random scheduler produces more than one interleaving."""
    traces = {tuple(run(writers, RandomScheduler(seed=seed))) for seed in range(6)}
    assert len(traces) > 1
    assert all(sorted(trace) == sorted(f"{n}{k}" for n in "abc" for k in range(4)) for trace in traces)


def test_replay_reproduces_a_random_execution() -> None:
    """A random run's schedule, as a Schedule or as its ks1: text, replays to the same trace."""
    scheduler = RandomScheduler(seed=11)
    trace = run(writers, scheduler)
    schedule = scheduler.schedule()
    assert run(writers, ReplayScheduler(schedule)) == trace
    assert run(writers, ReplayScheduler(schedule.encode())) == trace


def sleepers_around_a_worker(
    sleeps: Sequence[tuple[str, float]],
) -> Callable[[], tuple[list[float], float, list[tuple[str, float]]]]:
    """A run: the first two sleepers, a worker reading the clock 20 times, then the rest; it
    returns the worker's readings, the jumps credited to it, and who woke when."""
    from kvstress.controlled._coop import excused_seconds

    def main() -> tuple[list[float], float, list[tuple[str, float]]]:
        busy: list[float] = []
        woke: list[tuple[str, float]] = []
        credit = [0.0]

        def sleeper(name: str, secs: float) -> None:
            time.sleep(secs)
            woke.append((name, time.monotonic()))

        def worker() -> None:
            for _ in range(20):
                busy.append(time.monotonic())
            credit[0] = excused_seconds()

        threads = [spawn(functools.partial(sleeper, name, secs)) for name, secs in sleeps[:2]]
        threads.append(spawn(worker))
        threads += [spawn(functools.partial(sleeper, name, secs)) for name, secs in sleeps[2:]]
        for thread in threads:
            thread.join()
        return busy, credit[0], woke

    return main


def test_virtual_time_moves_only_when_no_thread_is_runnable() -> None:
    """A busy thread sees the clock stand still; sleepers wake in deadline order at their exact times."""
    main = sleepers_around_a_worker([("three", 3), ("one", 1), ("two", 2)])
    for seed in range(3):
        busy, _, woke = run(main, PCTScheduler(seed=seed))
        assert busy == [0.0] * 20
        assert woke == [("one", 1.0), ("two", 2.0), ("three", 3.0)]


def test_a_random_schedule_may_fire_a_sleeper_s_timer_while_others_run() -> None:
    """With ``fires_timers`` (random) a sleeper is a choice: its timer may fire while a busy
    thread is still runnable, never before its own deadline, and the busy thread is credited
    every jump it sat through runnable. A sleep longer than ``FIRE_HORIZON`` still ends only
    once every thread is blocked."""
    least = {"one": 0.001, "two": 0.002, "three": 0.003, "long": 1.0}
    main = sleepers_around_a_worker([("three", 0.003), ("one", 0.001), ("two", 0.002), ("long", 1.0)])
    moved = 0
    for seed in range(10):
        busy, credit, woke = run(main, RandomScheduler(seed=seed))
        assert all(at >= least[name] for name, at in woke) and woke[-1][0] == "long"
        assert busy == sorted(busy) and busy[-1] < 1.0
        assert busy[-1] - busy[0] <= credit <= busy[-1] < 1.0
        moved += busy[-1] > 0
    assert moved > 0  # some schedule woke a sleeper while the worker was still busy


def _gaps_beside_tickers() -> float:
    """The longest gap between two adjacent clock reads of a thread that never blocks, beside two
    threads that sleep 2 ms at a time (a blind user's test)."""
    gaps: list[float] = []

    def busy() -> None:
        for _ in range(60):
            first = time.monotonic()
            second = time.monotonic()  # two adjacent lines, nothing to wait for
            gaps.append(second - first)

    def ticker() -> None:
        for _ in range(20):
            time.sleep(0.002)

    threads = [
        threading.Thread(target=ticker),
        threading.Thread(target=ticker),
        threading.Thread(target=busy),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return max(gaps)


def test_early_timers_keep_a_runnable_thread_waiting_five_ms_at_most() -> None:
    """In an explored test, sleeps that end ahead of a runnable thread keep it waiting at most
    ``FIRE_HORIZON`` in all, from when it became runnable until it blocks: one 2 ms jump after
    another, each with one line of the busy thread between them, had kept it 9 ms between two
    adjacent lines. A pool's fuzzing (ALL_TIMERS) keeps its chains: its checks credit them."""
    worst = max(run(_gaps_beside_tickers, SleepersOnlyRandom(seed=seed)) for seed in range(30))
    assert 0 < worst <= FIRE_HORIZON
    chained = max(run(_gaps_beside_tickers, RandomScheduler(seed=seed)) for seed in range(30))
    assert chained > FIRE_HORIZON


def test_thread_from_patched_threading_is_controlled() -> None:
    """A threading.Thread started inside the run is a controlled thread on the virtual clock."""

    def main() -> tuple[float, bool]:
        thread = threading.Thread(target=lambda: time.sleep(60), name="sleeper")
        thread.start()
        thread.join()
        return time.monotonic(), isinstance(thread, _coop.Thread)

    assert run(main) == (60.0, True)


# -- deadlocks -----------------------------------------------------------------------------------


def ab_ba(names: Sequence[str | None]) -> Callable[[], None]:
    """Two threads take locks A and B in opposite orders, sleeping in between: always a deadlock."""

    def main() -> None:
        a, b = threading.Lock(), threading.Lock()

        def take(first: threading.Lock, second: threading.Lock) -> None:
            with first:
                time.sleep(1)
                with second:
                    pass

        threads = [spawn(lambda: take(a, b), name=names[0]), spawn(lambda: take(b, a), name=names[1])]
        for thread in threads:
            thread.join()

    return main


@pytest.mark.parametrize(("names", "one", "two"), [(("a", "b"), "a", "b"), ((None, None), "t1", "t2")])
def test_ab_ba_deadlock_reports_wait_for_graph_and_cycle(
    names: Sequence[str | None], one: str, two: str
) -> None:
    """An AB/BA deadlock raises ThreadDeadlock with each waiter's lock and holder, and the cycle."""
    for seed in range(3):
        with pytest.raises(ThreadDeadlock) as info:
            run(ab_ba(names), RandomScheduler(seed=seed))
        error = info.value
        assert error.wait_for == {
            "main": (f"join({one})", one),
            one: (f"Lock#2 held by {two}", two),
            two: (f"Lock#1 held by {one}", one),
        }
        assert error.cycle == (one, two, one)
        assert error.now == 1.0
        assert f"cycle: {one} -> {two} -> {one}" in str(error)


def test_lost_notify_is_a_deadlock_without_a_cycle() -> None:
    """A Condition wait nobody notifies, with no timeout, is a deadlock whose graph names no holder."""

    def main() -> None:
        cond = threading.Condition()

        def consumer() -> None:
            with cond:
                cond.wait()

        spawn(consumer, name="consumer").join()

    with pytest.raises(ThreadDeadlock) as info:
        run(main)
    what, holder = info.value.wait_for["consumer"]
    assert what.startswith("notify on Condition#") and holder is None
    assert info.value.wait_for["main"] == ("join(consumer)", "consumer")
    assert info.value.cycle == ()
    assert "cycle" not in str(info.value)


def test_a_wait_for_what_is_left_of_a_timeout_lets_time_move() -> None:
    """``remaining = timeout - (now - start)`` leaves 1.4e-17 s at 0.3 s for a 0.05 s wait from
    0.25 s, where a real clock would have moved on; added to the virtual now it rounds back to
    0.3. The wait still ends one float later, so a correct pool's timed wait returns instead of
    spinning at one instant until the step limit."""

    def main() -> float:
        time.sleep(0.25)
        cond = threading.Condition()
        start, timeout = time.monotonic(), 0.05
        with cond:
            while True:
                remaining = timeout - (time.monotonic() - start)
                if remaining <= 0:
                    return time.monotonic()
                cond.wait(remaining)

    assert run(main, max_steps=200) == pytest.approx(0.3)


def test_timed_wait_is_not_a_deadlock() -> None:
    """The same lost notify with a timeout is not a deadlock: the clock jumps to its deadline."""

    def main() -> tuple[bool, float]:
        cond = threading.Condition()
        with cond:
            return cond.wait(timeout=45), time.monotonic()

    assert run(main) == (False, 45.0)


# -- runaway threads -----------------------------------------------------------------------------


def test_spin_in_traced_module_exceeds_step_limit_naming_culprit() -> None:
    """Polling the clock without parking never reaches the deadline: StepLimitExceeded names the poller."""

    def main() -> None:
        def poll() -> None:
            deadline = time.monotonic() + 1
            while time.monotonic() < deadline:  # virtual time stands still while this runs
                pass

        spawn(poll, name="poller").join()

    with pytest.raises(StepLimitExceeded) as info:
        run(main, max_steps=500)
    assert info.value.culprit == "poller"
    assert "passed 500 scheduling points" in str(info.value)
    assert f"thread poller was running at {__file__}:" in str(info.value)


def _controlled_thread(name: str) -> bool:
    """A controlled thread's OS thread (``kvstress-t3``), not another harness thread
    (``kvstress-trio``, which a hang test elsewhere may have left behind)."""
    return re.fullmatch(r"kvstress-t\d+", name) is not None


def _join_abandoned_threads() -> None:
    """Wait (bounded) for the OS threads of an abandoned run to unwind once unblocked."""
    for thread in REAL_THREADING.enumerate():
        if _controlled_thread(thread.name):
            thread.join(timeout=10)


def test_thread_blocked_on_a_real_lock_is_reported_stuck() -> None:
    """A thread parked in a real _thread lock holds the baton with no scheduling point: StuckThread."""
    gate = _thread.allocate_lock()
    gate.acquire()

    def main() -> None:
        spawn(gate.acquire, name="blocked").join()  # the real lock: invisible to the controller

    try:
        with pytest.raises(StuckThread, match=r"thread blocked kept running for 0\.3 s") as info:
            run(main, stall_timeout=0.3)
        assert "without reaching a scheduling point" in str(info.value)
    finally:
        gate.release()  # lets the abandoned threads unwind
        _join_abandoned_threads()
    assert threading is REAL_THREADING


def test_a_thread_its_run_left_unfinished_is_joined_at_once_after_the_run() -> None:
    """A thread parked when its run was abandoned (a StuckThread beside it) is never run again.
    Joining it after the run returns at once: ``concurrent.futures`` joins its workers at exit,
    and a blind user's session printed "joining decode_0 outside a controlled thread would wait
    forever" as an ignored exception after the finding."""
    gate = _thread.allocate_lock()
    gate.acquire()
    made: list[Any] = []

    def main() -> None:
        event = _coop.Event()
        parked = _coop.Thread(target=event.wait, name="parked")
        parked.start()
        made.append(parked)
        spawn(gate.acquire, name="blocked").join()  # a real lock: the run is abandoned here

    try:
        with pytest.raises(StuckThread):
            run(main, stall_timeout=0.3)
        made[0].join()  # returns: before, RuntimeError
        assert made[0].is_alive()
    finally:
        gate.release()
        _join_abandoned_threads()


def test_ctrl_c_in_the_supervisor_unwinds_every_controlled_thread() -> None:
    """KeyboardInterrupt while threads run: they unwind before run_threads re-raises it, so none is
    left running pool (or torch) code when the interpreter exits."""
    finished: list[str] = []

    def spinner(name: str) -> None:
        try:
            for _ in range(10**7):
                pass
        finally:
            finished.append(name)

    def main() -> None:
        threads = [spawn(functools.partial(spinner, name), name=name) for name in "ab"]
        _thread.interrupt_main()  # lands in the supervisor, on the real main thread
        for thread in threads:
            thread.join()

    started = REAL_TIME.monotonic()
    with pytest.raises(KeyboardInterrupt):
        run(main, max_steps=10**8, stall_timeout=30)
    assert REAL_TIME.monotonic() - started < 5
    assert sorted(finished) == ["a", "b"]
    assert not [t for t in REAL_THREADING.enumerate() if _controlled_thread(t.name)]


# -- exceptions ----------------------------------------------------------------------------------


def test_exception_in_spawned_thread_fails_the_run_and_unwinds_the_others() -> None:
    """A KeyError in a spawned thread is what run raises; blocked threads are unwound (finally runs)."""
    unwound: list[str] = []

    def main() -> None:
        never = threading.Event()

        def parked() -> None:
            try:
                never.wait()
            finally:
                unwound.append("parked")

        def boom() -> None:
            time.sleep(1)
            raise KeyError("boom")

        spawn(parked, name="parked")
        try:
            spawn(boom, name="boom").join()
        finally:
            unwound.append("main")

    for seed in range(3):
        unwound.clear()
        with pytest.raises(KeyError) as info:
            run(main, RandomScheduler(seed=seed))
        assert info.value.args == ("boom",)
        assert sorted(unwound) == ["main", "parked"]


def test_exception_in_main_fails_the_run() -> None:
    """An exception raised by main itself is what run raises, even with another thread still parked."""

    def main() -> None:
        spawn(threading.Event().wait, name="parked")
        raise ValueError("main failed")

    with pytest.raises(ValueError, match="main failed"):
        run(main)


# -- patching ------------------------------------------------------------------------------------


IMPORTS_SOURCE = """
import queue, threading, time
import threading as th
from queue import Empty, Queue
from threading import Lock
from time import monotonic, sleep

def names():
    return dict(threading=threading, th=th, time=time, queue=queue, Lock=Lock, Queue=Queue,
                Empty=Empty, monotonic=monotonic, sleep=sleep)
"""


def test_named_modules_are_patched_only_during_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """A named module sees cooperative modules and from-imports in the run; a bystander never does."""
    named = module_from_source("kvstress_test_named", IMPORTS_SOURCE, monkeypatch)
    bystander = module_from_source("kvstress_test_bystander", IMPORTS_SOURCE, monkeypatch)
    before = named.names()

    def main() -> tuple[dict[str, Any], dict[str, Any], object]:
        return named.names(), bystander.names(), queue.threading  # type: ignore[attr-defined]

    inside, untouched, stdlib_queue_threading = run_threads(main, RandomScheduler(seed=0), modules=[named])
    assert untouched == before
    assert stdlib_queue_threading is REAL_THREADING
    assert inside["threading"] is not REAL_THREADING and inside["th"] is inside["threading"]
    assert (
        inside["threading"].Lock is _coop.Lock and inside["threading"].get_ident is REAL_THREADING.get_ident
    )
    assert inside["time"].sleep is _coop.sleep and inside["queue"].Queue is _coop_queue.Queue
    assert (inside["Lock"], inside["Queue"], inside["monotonic"], inside["sleep"]) == (
        _coop.Lock, _coop_queue.Queue, _coop.monotonic, _coop.sleep,
    )  # fmt: skip
    assert inside["Empty"] is REAL_QUEUE.Empty
    assert named.names() == before
    assert REAL_THREADING.Lock is REAL_LOCK  # the real modules themselves never change


def test_patching_is_restored_after_a_failed_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """After a run that raises (a thread's error, a deadlock), every swapped name is restored."""
    named = module_from_source("kvstress_test_failing", IMPORTS_SOURCE, monkeypatch)
    before = named.names()

    def fails() -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        run_threads(fails, RandomScheduler(seed=0), modules=[named, __name__])
    assert named.names() == before
    with pytest.raises(ThreadDeadlock):
        run(ab_ba(("a", "b")))
    assert (threading, time, queue) == (REAL_THREADING, REAL_TIME, REAL_QUEUE)
    assert threading.Lock is REAL_LOCK


GLOBALS_SOURCE = """
import queue
import threading

LOCK = threading.Lock()
HELD = threading.Lock()
HELD.acquire()
RLOCK = threading.RLock()
COND = threading.Condition(LOCK)
SEMAPHORE = threading.Semaphore(3)
SEMAPHORE.acquire()
BOUNDED = threading.BoundedSemaphore(4)
BOUNDED.acquire()
EVENT = threading.Event()
EVENT.set()
JOBS = queue.Queue()
for job in range(3):
    JOBS.put(job)
STACK = queue.LifoQueue(maxsize=5)
STACK.put("bottom")
STACK.put("top")


class Holder:
    lock = threading.Lock()


def bump(counter):
    with COND:
        seen = counter[0]
        COND.notify_all()
        counter[0] = seen + 1
    with Holder.lock, RLOCK, RLOCK:
        pass


def take(taken):
    taken.append(JOBS.get(timeout=5))


def names():
    return dict(LOCK=LOCK, HELD=HELD, RLOCK=RLOCK, COND=COND, SEMAPHORE=SEMAPHORE, BOUNDED=BOUNDED,
                EVENT=EVENT, class_lock=Holder.lock, JOBS=JOBS, STACK=STACK)
"""


def test_primitives_made_at_import_are_cooperative_during_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """A named module's module-level and class-level primitives are cooperative copies in their
    present state during the run (a held lock is left alone), and the real ones come back after:
    threads that take a lock made at import no longer stall a correct program."""
    shared = module_from_source("kvstress_test_globals", GLOBALS_SOURCE, monkeypatch)
    before = shared.names()

    def main() -> tuple[dict[str, Any], int, list[int]]:
        counter = [0]
        taken: list[int] = []
        workers = [threading.Thread(target=shared.bump, args=(counter,)) for _ in range(3)]
        workers += [threading.Thread(target=shared.take, args=(taken,)) for _ in range(4)]
        for worker in workers:
            worker.start()
        time.sleep(1)
        shared.JOBS.put(3)  # the fourth taker waits for it
        for worker in workers:
            worker.join()
        return shared.names(), counter[0], sorted(taken)

    for seed in range(20):
        inside, count, taken = run_threads(main, RandomScheduler(seed), modules=[shared, __name__])
        assert count == 3 and taken == [0, 1, 2, 3]
    assert isinstance(inside["LOCK"], _coop.Lock) and isinstance(inside["class_lock"], _coop.Lock)
    assert isinstance(inside["RLOCK"], _coop.RLock) and inside["HELD"] is before["HELD"]
    assert isinstance(inside["COND"], _coop.Condition) and inside["COND"]._lock is inside["LOCK"]
    assert inside["SEMAPHORE"]._value == 2 and not isinstance(inside["SEMAPHORE"], _coop.BoundedSemaphore)
    assert (inside["BOUNDED"]._value, inside["BOUNDED"]._initial) == (3, 4)
    assert inside["EVENT"].is_set()
    assert isinstance(inside["JOBS"], _coop_queue.Queue) and isinstance(
        inside["STACK"], _coop_queue.LifoQueue
    )
    assert (inside["STACK"].maxsize, inside["STACK"].get_nowait()) == (5, "top")
    assert shared.names() == before  # the real ones are back, in the state they were in
    assert before["BOUNDED"]._value == 3 and before["SEMAPHORE"]._value == 2 and before["HELD"].locked()
    assert list(before["JOBS"].queue) == [0, 1, 2] and before["STACK"].qsize() == 2


HIERARCHY_SOURCES = {
    "kvstress_test_base": (
        "import threading\n\nclass Base:\n    def lock(self):\n        return threading.Lock()\n"
    ),
    "kvstress_test_derived": (
        "import threading\nfrom kvstress_test_base import Base\n\nclass Derived(Base):\n    pass\n\n"
        "def make():\n    return threading.Lock()\n"
    ),
}


@pytest.mark.parametrize(
    ("target", "base_patched", "derived_patched"),
    [("class", True, True), ("function", False, True), ("name", True, False), ("module", False, True)],
)
def test_modules_accepts_classes_functions_names_and_modules(
    monkeypatch: pytest.MonkeyPatch, target: str, base_patched: bool, derived_patched: bool
) -> None:
    """A class brings its whole MRO's modules; a function its own module; a name or module just itself."""
    base = module_from_source("kvstress_test_base", HIERARCHY_SOURCES["kvstress_test_base"], monkeypatch)
    derived = module_from_source(
        "kvstress_test_derived", HIERARCHY_SOURCES["kvstress_test_derived"], monkeypatch
    )
    given = {"class": derived.Derived, "function": derived.make, "name": base.__name__, "module": derived}[
        target
    ]

    def main() -> tuple[bool, bool]:
        return isinstance(derived.Derived().lock(), _coop.Lock), isinstance(derived.make(), _coop.Lock)

    assert run_threads(main, RandomScheduler(seed=0), modules=[given]) == (base_patched, derived_patched)


@pytest.mark.parametrize(
    ("bad", "message"), [(42, "expected a module"), ("kvstress_no_such_module", "cannot import")]
)
def test_modules_rejects_what_it_cannot_resolve(bad: object, message: str) -> None:
    """modules= raises ValueError naming a target that is not a module, name, class or function."""
    with pytest.raises(ValueError, match=message):
        run_threads(lambda: None, RandomScheduler(seed=0), modules=[bad])


# -- exploration ---------------------------------------------------------------------------------


def test_dfs_exhausts_a_correct_two_thread_program() -> None:
    """DFS with preemption bound 2 runs every interleaving of the locked counter and finds nothing."""
    found = explore_threads(
        lambda: counter(locked=True),
        DFSScheduler(preemption_bound=2),
        max_executions=2000,
        modules=[__name__],
    )
    assert found.exhausted and found.failure is None and found.schedule is None
    assert 2 <= found.executions < 2000


@pytest.mark.skipif(sys.version_info[:2] == (3, 12), reason="3.12 drops opcode events set at a call")
def test_a_lost_update_inside_one_line_is_found_between_its_load_and_its_store() -> None:
    """``x += 1`` is a load and a store: a switch between them loses the other thread's update
    (CPython can switch there; a free-threaded build always can). DFS finds it, and the locked
    version runs clean through every interleaving."""
    found = explore_threads(
        lambda: one_line_counter(locked=False),
        DFSScheduler(preemption_bound=2),
        max_executions=2000,
        modules=[__name__],
    )
    assert isinstance(found.failure, AssertionError) and "lost update" in str(found.failure)
    clean = explore_threads(
        lambda: one_line_counter(locked=True),
        DFSScheduler(preemption_bound=2),
        max_executions=2000,
        modules=[__name__],
    )
    assert clean.exhausted and clean.failure is None


def test_read_modify_write_points_are_the_stores_that_write_back_what_the_line_read() -> None:
    """Only a store whose location the same line loaded gets a point: an augmented assignment,
    a store of an expression over the same attribute or item; not a plain store, nor a store
    of another attribute."""
    from kvstress.controlled._baton import rmw_points

    def rmw(box: Any, items: list[int], i: int) -> None:
        box.n += 1
        box.n = max(box.n - 1, 0)
        items[i] -= 1

    def plain(box: Any, items: list[int], i: int) -> None:
        box.n = 1
        box.m = box.n + 1
        items[i] = i
        local = i
        local += 1

    assert len(rmw_points(rmw.__code__)) == 3
    assert rmw_points(plain.__code__) == frozenset()


def test_hot_lines_run_from_a_read_of_an_attribute_to_its_store() -> None:
    """A lost-update window: the lines after ``count = box.n`` up to ``box.n = count + 1``;
    lines that only read, or store what they never read, open none."""
    from kvstress.controlled._baton import hot_lines

    def window(box: Any) -> None:
        count = box.n  # the def's line + 1
        box.m = 0  # + 2
        box.n = count + 1  # + 3

    def none(box: Any) -> None:
        box.n = 1
        print(box.m)

    first = window.__code__.co_firstlineno
    assert hot_lines(window.__code__) == {first + 2, first + 3}
    assert hot_lines(none.__code__) == frozenset()


def test_hot_lines_run_from_a_read_to_a_compare_and_set() -> None:
    """A lock-free take reads the head, then swaps it in a compare-and-set of its own (Python has
    none): the lines after the read up to the CAS are a window (ABA), whatever the CAS is named
    in the usual ways; a call of another name opens none."""
    from kvstress.controlled._baton import hot_lines, is_cas_name

    def pop(stack: Any) -> Any:
        head = stack.head  # the def's line + 1
        below = head.next  # + 2
        if stack._cas_head(head, below):  # + 3
            return head
        return None

    def pop_plain(stack: Any) -> Any:
        head = stack.head
        below = head.next
        if stack.swap(head, below):
            return head
        return None

    first = pop.__code__.co_firstlineno
    assert {first + 2, first + 3} <= hot_lines(pop.__code__)
    assert hot_lines(pop_plain.__code__) == frozenset()
    for name in ("cas", "_cas_head", "compare_and_swap", "compareAndSet", "compare_exchange", "CAS"):
        assert is_cas_name(name), name
    for name in ("cascade", "case", "casual", "swap", "release"):
        assert not is_cas_name(name), name


def test_quiet_lines_touch_only_locals_and_constants() -> None:
    """A line that only moves locals and constants needs no scheduling point; a truth test of a
    local (it may alias a shared list), a call, an attribute and a return keep theirs."""
    from kvstress.controlled._quiet import quiet_lines

    def sample(box: Any, free: list[int]) -> int:
        n = 0  # the def's line + 1: quiet
        alias = free  # + 2: quiet
        if alias:  # + 3: reads the list's length through the alias
            n = len(alias)  # + 4
        if n is None:  # + 5: quiet, an identity test
            alias = []  # + 6: builds a list
        box.n = n  # + 7
        return n  # + 8

    first = sample.__code__.co_firstlineno
    assert quiet_lines(sample.__code__) - {first} == {first + 1, first + 2, first + 5}


def padded(*, pad: bool) -> list[str]:
    """Two threads append their names; with ``pad``, each also runs lines of locals alone."""
    out: list[str] = []

    def worker(name: str) -> None:
        out.append(name)
        out.append(name)

    def padded_worker(name: str) -> None:
        a = 1
        b = a
        out.append(name)
        a = b
        del a
        out.append(name)

    work = padded_worker if pad else worker
    threads = [spawn(functools.partial(work, name), name=name) for name in "ab"]
    for thread in threads:
        thread.join()
    return out


def test_lines_of_locals_alone_add_no_interleaving() -> None:
    """Every interleaving of two threads, with and without lines that touch only their locals:
    as many executions either way (each such line had its own point, a decision to explore)."""
    runs = []
    for pad in (False, True):
        found = explore_threads(
            lambda pad=pad: padded(pad=pad),
            DFSScheduler(preemption_bound=3),
            max_executions=5000,
            modules=[__name__],
        )
        assert found.exhausted and found.failure is None
        runs.append(found.executions)
    assert runs[0] == runs[1]


def test_a_loop_of_quiet_lines_still_passes_a_point() -> None:
    """A spin on locals alone passes a scheduling point each time round, so the step limit ends
    it: a loop with no point at all would never hand the baton back."""

    def main() -> None:
        def spin() -> None:
            x = 0
            while True:
                x = 1
                del x

        spawn(spin, name="spinner").join()

    with pytest.raises(StepLimitExceeded) as info:
        run(main, max_steps=500)
    assert info.value.culprit == "spinner"


def test_a_park_closes_a_window_from_the_check_before_it() -> None:
    """``block = self._scan()`` ... ``with self._cond:`` ``self._cond.wait()``: the lines after
    the check, up to the ``with`` that shuts the notifier out, are a check-then-park window;
    with no ``with`` on the waited object, up to the wait. Kept apart from the lost-update
    windows: only a scheduler that asks for them (delay) gets them."""
    from kvstress.controlled._baton import hot_lines, park_lines

    class Waiter:
        def acquire(self) -> Any:
            block = self._scan()  # the def's line + 1
            if block is not None:  # + 2
                return block  # + 3
            with self._cond:  # + 4
                self._cond.wait()  # + 5
            return None

        def on_event(self) -> None:
            ready = self._ready()  # the def's line + 1
            if not ready:  # + 2
                self._event.wait()  # + 3

    acquire, on_event = Waiter.acquire.__code__, Waiter.on_event.__code__
    first = acquire.co_firstlineno
    assert park_lines(acquire) == {first + 2, first + 3, first + 4}
    assert hot_lines(acquire) == frozenset()
    first = on_event.co_firstlineno
    assert park_lines(on_event) == {first + 2, first + 3}
    assert ThreadController(DelayBoundedScheduler())._broad_hints
    assert not ThreadController(PCTScheduler(seed=0))._broad_hints


def test_pct_spends_one_change_point_among_hot_decisions() -> None:
    """Told that a decision is hot, PCT lowers the running task at the h-th hot decision of an
    execution (h drawn from recent hot counts), once, besides its d - 1 change points."""
    scheduler = PCTScheduler(depth=1, seed=3)  # no change points of its own
    switched = 0
    for _ in range(50):
        assert scheduler.new_execution()
        order: list[int] = []
        for step in range(10):
            scheduler.hot = step % 2 == 0  # five hot decisions of ten
            order.append(scheduler.next_task([1, 2], order[-1] if order else None))
        switches = [i for i in range(1, 10) if order[i] != order[i - 1]]
        assert len(switches) <= 1 and all(i % 2 == 0 for i in switches)  # only at a hot one
        switched += len(switches)
    assert switched >= 30  # the first execution learns; a change at the first decision is no switch


def test_dfs_finds_lost_update_and_its_schedule_replays() -> None:
    """DFS finds the unprotected counter's lost update; ReplayScheduler on its schedule fails the same way."""
    found = explore_threads(
        lambda: counter(locked=False),
        DFSScheduler(preemption_bound=2),
        max_executions=2000,
        modules=[__name__],
    )
    assert isinstance(found.failure, AssertionError) and found.schedule is not None
    assert "lost update: x == 1" in str(found.failure)
    assert found.executions >= 2 and not found.exhausted  # the first, preemption-free run passes
    for replay in (found.schedule, found.schedule.encode()):
        with pytest.raises(AssertionError) as info:
            run(lambda: counter(locked=False), ReplayScheduler(replay))
        assert str(info.value) == str(found.failure)


def test_explore_finds_an_ab_ba_deadlock_that_needs_a_preemption() -> None:
    """Without sleeps, AB/BA deadlocks only in some interleavings; DFS finds one with its cycle."""

    def main() -> None:
        a, b = threading.Lock(), threading.Lock()

        def take(first: threading.Lock, second: threading.Lock) -> None:
            with first, second:
                pass

        threads = [spawn(lambda: take(a, b), name="ab"), spawn(lambda: take(b, a), name="ba")]
        for thread in threads:
            thread.join()

    found = explore_threads(main, DFSScheduler(preemption_bound=2), max_executions=2000, modules=[__name__])
    assert isinstance(found.failure, ThreadDeadlock)
    assert found.failure.cycle == ("ab", "ba", "ab")


def test_explore_stops_at_max_executions() -> None:
    """A clean program under a random scheduler runs exactly max_executions times, not exhausted."""
    ran: list[int] = []

    def main() -> None:
        ran.append(1)
        counter(locked=True)

    found = explore_threads(main, RandomScheduler(seed=3), max_executions=3, modules=[__name__])
    assert (found.executions, found.exhausted, found.failure, len(ran)) == (3, False, None, 3)


def test_run_threads_raises_scheduler_exhausted_without_running_main() -> None:
    """A replay scheduler runs once; a second run_threads raises SchedulerExhausted and main never runs."""
    first = RandomScheduler(seed=0)
    run(writers, first)
    replay = ReplayScheduler(first.schedule())
    run(writers, replay)
    ran: list[int] = []
    with pytest.raises(SchedulerExhausted, match="ReplayScheduler has no execution left"):
        run(lambda: ran.append(1), replay)
    assert ran == []


class _Rogue(RandomScheduler):
    """Answers a task id that was not offered."""

    def _pick(self, runnable: Sequence[int], current: int | None) -> int:
        return 99


def test_scheduler_choosing_a_non_runnable_thread_is_reported() -> None:
    """A scheduler answering an id it was not offered raises SchedulerMisbehaved; explore propagates it."""
    with pytest.raises(SchedulerMisbehaved, match="returned 99"):
        run(writers, _Rogue(seed=0))
    with pytest.raises(SchedulerMisbehaved):
        explore_threads(writers, _Rogue(seed=0), max_executions=2, modules=[__name__])


# -- misuse --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_steps": 0}, "max_steps must be an int >= 1, got 0 (int)"),
        ({"max_steps": 1.5}, "max_steps must be an int >= 1, got 1.5 (float)"),
        ({"max_steps": True}, "max_steps must be an int >= 1, got True (bool)"),
        ({"stall_timeout": 0}, "stall_timeout must be a number of seconds > 0, got 0"),
        ({"stall_timeout": -1.0}, "stall_timeout must be a number of seconds > 0, got -1.0"),
        ({"stall_timeout": "1"}, "stall_timeout must be a number of seconds > 0, got '1'"),
    ],
)
def test_bad_limits_raise_value_error(options: dict[str, Any], message: str) -> None:
    """run_threads and explore_threads reject bad max_steps/stall_timeout, naming argument and value."""
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        run(writers, **options)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        explore_threads(writers, RandomScheduler(seed=0), max_executions=1, modules=[__name__], **options)
    assert threading is REAL_THREADING


@pytest.mark.parametrize("bad", [0, -1, 1.0, "3", None])
def test_bad_max_executions_raises_value_error(bad: object) -> None:
    """explore_threads rejects a max_executions that is not an int >= 1, naming it and its type."""
    with pytest.raises(ValueError, match=f"max_executions must be an int >= 1, got {bad!r}"):
        explore_threads(writers, RandomScheduler(seed=0), max_executions=bad)  # type: ignore[arg-type]


def test_spawn_outside_a_run_raises() -> None:
    """spawn() outside run_threads raises RuntimeError instead of starting an uncontrolled thread."""
    with pytest.raises(RuntimeError, match="outside a controlled run"):
        spawn(lambda: None)


def test_nested_run_is_rejected() -> None:
    """run_threads inside a controlled thread raises RuntimeError: one run at a time per process."""
    with pytest.raises(RuntimeError, match="another controlled thread run is in progress"):
        run(lambda: run_threads(lambda: None, RandomScheduler(seed=1)))


def test_thread_polling_with_sleeps_is_bounded_by_virtual_time_not_steps() -> None:
    """A poll loop that sleeps lets time move (no step limit); past max_time it is a time limit."""
    from kvstress.controlled import TimeLimitExceeded

    def poll(until: float) -> float:
        while time.monotonic() < until:
            time.sleep(0.001)
        return time.monotonic()

    assert run_threads(lambda: poll(3.0), RandomScheduler(seed=1), modules=[__name__], max_steps=50) >= 3.0
    with pytest.raises(TimeLimitExceeded):
        run_threads(lambda: poll(float("inf")), RandomScheduler(seed=1), modules=[__name__], max_time=1.0)


def test_a_loaded_machine_stretches_the_stall_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the cores oversubscribed tenfold, a thread without a scheduling point for 0.6 s is
    not yet stuck under a 0.3 s stall_timeout: load is not a hang; it is reported later."""
    import kvstress.controlled._baton as baton

    monkeypatch.setattr(baton, "load_factor", lambda: 10.0)
    gate = _thread.allocate_lock()
    gate.acquire()
    releaser = threading.Timer(0.6, gate.release)

    def main() -> None:
        spawn(gate.acquire, name="slow").join()

    releaser.start()
    try:
        run(main, stall_timeout=0.3)  # no StuckThread: released after 0.6 s, within 3 s
    finally:
        releaser.cancel()
        _join_abandoned_threads()


def housekeeper(rounds: list[float], period: float = 30.0) -> Callable[[], None]:
    """A background worker as pools start them: wake every ``period`` s, note the time."""

    def work() -> None:
        stop = _coop.Event()
        while not stop.wait(period):
            rounds.append(_coop.monotonic())

    return work


def test_a_daemon_waiting_out_its_period_ends_with_the_run_and_is_no_hang() -> None:
    """A daemon that sleeps 30 s between rounds neither holds the run open nor counts as a wait
    past a timeout (max_time 8 s): the run ends when its other threads do."""
    rounds: list[float] = []

    def main() -> str:
        _coop.Thread(target=housekeeper(rounds), daemon=True).start()
        _coop.sleep(1.0)
        return "done"

    assert run(main, max_time=8.0) == "done"
    assert rounds == []
    _join_abandoned_threads()


def test_a_daemon_is_scheduled_like_any_thread_while_the_run_lasts() -> None:
    """Virtual time that passes its period (main sleeps 65 s) runs the daemon's rounds."""
    rounds: list[float] = []

    def main() -> None:
        _coop.Thread(target=housekeeper(rounds), daemon=True).start()
        _coop.sleep(65.0)

    run(main)
    assert rounds == [30.0, 60.0]
    _join_abandoned_threads()


def test_a_daemon_that_fails_fails_the_run() -> None:
    """A background worker is still code under test: its exception is the run's."""

    def bad() -> None:
        _coop.sleep(2.0)
        raise RuntimeError("housekeeping corrupted the pool")

    def main() -> None:
        _coop.Thread(target=bad, daemon=True).start()
        _coop.sleep(5.0)

    with pytest.raises(RuntimeError, match="housekeeping corrupted"):
        run(main)
    _join_abandoned_threads()


def test_threads_blocked_for_good_beside_a_sleeping_daemon_are_a_deadlock() -> None:
    """Only a daemon waits on time, the others wait on each other: a deadlock, not a jump of
    virtual time to the daemon's next round."""
    rounds: list[float] = []
    lock = _coop.Lock()

    def main() -> None:
        _coop.Thread(target=housekeeper(rounds), daemon=True).start()
        lock.acquire()
        lock.acquire()  # never released

    with pytest.raises(ThreadDeadlock) as info:
        run(main, max_time=8.0)
    # the daemon's round is a deadline: the message does not say there is none
    assert info.value.daemons_timed and "none but a daemon has a deadline" in str(info.value)
    _join_abandoned_threads()


def test_without_max_time_a_deadlock_beside_a_daemon_ends_at_the_horizon() -> None:
    """With no max_time, time jumps for the daemon alone up to DAEMON_HORIZON, then the blocked
    threads are a deadlock: the run never spins on the daemon's rounds forever."""
    rounds: list[float] = []
    lock = _coop.Lock()

    def main() -> None:
        _coop.Thread(target=housekeeper(rounds), daemon=True).start()
        lock.acquire()
        lock.acquire()

    with pytest.raises(ThreadDeadlock):
        run(main)
    assert len(rounds) == 120  # 3600 s of 30 s rounds
    _join_abandoned_threads()


def test_the_baton_tells_a_woken_thread_but_not_a_started_one() -> None:
    """A thread waiting on a lock the last one released is woken (the delay strategy may run it
    first); a thread just started is not: it was never waiting, and both bases begin alike."""
    log = HintLog()
    controller = ThreadController(log)

    def main() -> None:
        lock = _coop.Lock()
        lock.acquire()
        _coop.Thread(target=lock.acquire, name="waiter").start()
        _coop.Thread(target=functools.partial(_coop.sleep, 0.02), name="other").start()
        _coop.sleep(0.01)  # every other thread runs meanwhile: the waiter parks on the lock
        lock.release()
        controller.yield_point()

    controller.run(main)
    assert [hint for hint in log.hints if hint is not None] == [1]  # after the release only


def test_a_publication_makes_the_next_decision_warm_for_the_delay_strategy_only() -> None:
    """A lock released (a semaphore, an event set: what another thread may now act on) marks
    the next decision warm for a scheduler that takes broad hints (delay), once; PCT, whose one
    hinted change point would be spread thin, is told nothing."""

    def main(controller: ThreadController) -> None:
        def other() -> None:
            for _ in range(6):
                controller.yield_point()

        lock = _coop.Lock()
        _coop.Thread(target=other, name="other").start()
        controller.yield_point()  # nothing published yet
        lock.acquire()
        lock.release()
        controller.yield_point()  # the decision after the release
        controller.yield_point()

    log = WarmLog()
    controller = ThreadController(log)
    controller.run(functools.partial(main, controller))
    # The start, the first yield, the lock's acquire; then the decision after the release, once.
    assert log.warms[:5] == [False, False, False, True, False]

    class Pct(PCTScheduler):
        def __init__(self) -> None:
            super().__init__(seed=0)
            self.hots: list[bool] = []

        def next_task(self, runnable: Sequence[int], current: int | None) -> int:
            self.hots.append(self.hot)
            return super().next_task(runnable, current)

    pct = Pct()
    assert pct.new_execution()
    controller = ThreadController(pct)
    controller.run(functools.partial(main, controller))
    assert pct.hots and not any(pct.hots) and not hasattr(pct, "warm")


class _Finalized:
    """Garbage in a cycle whose finalizer takes a lock of the run: the finalizer runs wherever
    the collection starts, as a pool's may (one that stops its worker when collected)."""

    def __init__(self, lock: Any, out: list[str]) -> None:
        self.me = self  # a cycle: only the collector frees it

        def finalize() -> None:
            out.append("finalizer")
            with lock:
                pass
            out.append("finalized")

        self._finalizer = finalize

    def __del__(self) -> None:
        self._finalizer()


def _interrupted(section: Callable[[threading.Lock, list[str]], None], first: str, last: str) -> list[str]:
    """Runs of ``section`` in one thread beside another that appends "other" whenever it runs;
    the orders where "other" came between ``section``'s marks ``first`` and ``last``."""
    found = []
    for seed in range(40):

        def main() -> list[str]:
            lock, out = threading.Lock(), []

            def other() -> None:
                for _ in range(6):
                    out.append("other")

            peer = spawn(other)
            section(lock, out)
            peer.join()
            return out

        out = run(main, RandomScheduler(seed=seed))
        if first in out and "other" in out[out.index(first) : out.index(last)]:
            found.append(" ".join(out))
    return found


def test_no_switch_while_a_collection_runs_a_finalizer() -> None:
    """A collection on a controlled thread runs finalizers there, inside whatever the thread was
    doing (kvstress's own bookkeeping, with its real locks held): no other thread runs until
    the collection ends, as no real scheduler lets a finalizer be preempted into a deadlock."""

    def collect(lock: Any, out: list[str]) -> None:
        out.append("collect")
        _Finalized(lock, out)
        gc.collect()
        out.append("collected")

    assert _interrupted(collect, "finalizer", "finalized") == []


def test_the_collection_hook_is_there_only_during_a_run() -> None:
    """The hook that stops switches during a collection is installed for a controlled run and
    taken out after it: left in every collection of a process that imported kvstress, it was
    traced by another tool's scheduler (frontrun's DPOR deadlocked inside it)."""
    from kvstress.controlled._baton import _collecting

    seen = []
    assert _collecting not in gc.callbacks
    ThreadController(RandomScheduler(0)).run(lambda: seen.append(_collecting in gc.callbacks))
    assert seen == [True]
    assert _collecting not in gc.callbacks


def test_no_switch_while_a_harness_lock_is_held() -> None:
    """Inside a ``HarnessLock`` section a controlled thread passes no scheduling point, even in
    code the section never called: another thread can never find the real lock held."""
    harness = HarnessLock()

    def section(lock: Any, out: list[str]) -> None:
        with harness:
            out.append("in")
            with lock:
                out.append("locked")
            out.append("out")

    assert _interrupted(section, "in", "out") == []

    def unguarded(lock: Any, out: list[str]) -> None:
        out.append("in")
        with lock:
            out.append("locked")
        out.append("out")

    assert _interrupted(unguarded, "in", "out")  # the same steps, unguarded, are interleaved
