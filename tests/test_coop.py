"""The cooperative primitives: the standard library's semantics, with timeouts on virtual time.

Each ``*_protocol`` function below runs twice: outside a run, where this module's ``threading``,
``time`` and ``queue`` are the real ones, and inside ``run_threads`` with this module patched.
The two must observe the same things. The timing tests then pin where on the virtual clock each
timeout lands.
"""

from __future__ import annotations

import _thread
import functools
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from pools.lock_likes import CountingLock

from kvstress.controlled import SchedulerExhausted, ThreadDeadlock, _coop, _coop_queue, run_threads, spawn
from kvstress.schedulers import DFSScheduler, RandomScheduler, Scheduler

SHORT = 0.01  # a timeout that expires; real seconds outside a run, virtual ones inside


def run(main: Callable[[], Any], seed: int = 0) -> Any:
    """``main()`` as one controlled execution, with this module's primitives cooperative."""
    return run_threads(main, RandomScheduler(seed=seed), modules=[__name__])


def outcome(call: Callable[[], Any]) -> object:
    """What ``call()`` returns, or the type of what it raises."""
    try:
        return call()
    except Exception as error:
        return type(error)


def same_as_stdlib(protocol: Callable[[], Any]) -> Any:
    """Run ``protocol`` with real and cooperative primitives; they must observe the same."""
    expected = protocol()
    got = run(protocol)
    assert got == expected
    return got


# -- the patched names are the cooperative ones --------------------------------------------------


def test_run_patches_this_module_to_cooperative_classes() -> None:
    """Inside a run, this module's threading/time/queue names resolve to the cooperative ones."""

    def main() -> tuple[object, ...]:
        return (
            threading.Lock, threading.RLock, threading.Condition, threading.Semaphore,
            threading.BoundedSemaphore, threading.Event, threading.Thread, time.sleep,
            time.monotonic, queue.Queue, queue.LifoQueue, queue.PriorityQueue, queue.SimpleQueue,
        )  # fmt: skip

    assert run(main) == (
        _coop.Lock, _coop.RLock, _coop.Condition, _coop.Semaphore, _coop.BoundedSemaphore,
        _coop.Event, _coop.Thread, _coop.sleep, _coop.monotonic, _coop_queue.Queue,
        _coop_queue.LifoQueue, _coop_queue.PriorityQueue, _coop_queue.SimpleQueue,
    )  # fmt: skip


# -- Lock and RLock ------------------------------------------------------------------------------


def lock_protocol() -> list[object]:
    """A Lock's acquire/release/locked answers, its timeouts and its misuse errors."""
    lock = threading.Lock()
    seen: list[object] = [lock.acquire(), lock.locked(), lock.acquire(blocking=False)]
    seen += [lock.acquire(timeout=SHORT), outcome(lambda: lock.acquire(False, 1))]
    lock.release()
    seen += [lock.locked(), outcome(lock.release), outcome(lambda: lock.acquire(timeout=-2))]
    with lock:
        seen.append(lock.locked())
    seen.append(lock.locked())
    return seen


def test_lock_matches_stdlib() -> None:
    """Lock: acquire/locked/non-blocking/timeout answers and release-unlocked RuntimeError."""
    assert same_as_stdlib(lock_protocol) == [
        True,
        True,
        False,
        False,
        ValueError,
        False,
        RuntimeError,
        ValueError,
        True,
        False,
    ]


def test_lock_released_by_another_thread_matches_stdlib() -> None:
    """Lock: any thread may release it, and a waiter then gets it."""

    def protocol() -> list[object]:
        lock = threading.Lock()
        lock.acquire()
        seen: list[object] = []
        releaser = threading.Thread(target=lock.release)
        releaser.start()
        releaser.join()
        seen += [lock.locked(), lock.acquire(blocking=False)]
        lock.release()
        return seen

    assert same_as_stdlib(protocol) == [False, True]


def rlock_protocol() -> list[object]:
    """An RLock's reentrancy, owner-only release and misuse errors."""
    lock = threading.RLock()
    seen: list[object] = [lock.acquire(), lock.acquire(), lock.acquire(blocking=False)]
    other: list[object] = []

    def intruder() -> None:
        other.extend([outcome(lock.release), lock.acquire(blocking=False), lock.acquire(timeout=SHORT)])

    thread = threading.Thread(target=intruder)
    thread.start()
    thread.join()
    seen.append(list(other))
    for _ in range(3):
        lock.release()
    seen.append(outcome(lock.release))
    thread = threading.Thread(target=lambda: other.append(lock.acquire(blocking=False)))
    thread.start()
    thread.join()
    seen.append(other[-1])
    return seen


def test_rlock_matches_stdlib() -> None:
    """RLock: reentrant for its owner, RuntimeError on a non-owner's release, free once fully released."""
    assert same_as_stdlib(rlock_protocol) == [
        True,
        True,
        True,
        [RuntimeError, False, False],
        RuntimeError,
        True,
    ]


def test_lock_timeout_lands_exactly_on_virtual_time() -> None:
    """acquire(timeout=30) on a held lock fails at exactly +30 virtual seconds, almost no wall time."""

    def main() -> tuple[bool, float, float]:
        lock = threading.Lock()
        holder_has_it = threading.Event()

        def holder() -> None:
            with lock:
                holder_has_it.set()
                time.sleep(1000)

        spawn(holder)
        holder_has_it.wait()
        start = time.monotonic()
        got = lock.acquire(timeout=30)
        return got, start, time.monotonic()

    wall = time.monotonic()
    got, start, end = run(main)
    wall = time.monotonic() - wall
    assert (got, start, end) == (False, 0.0, 30.0)
    assert wall < 15  # a real 30 s wait would exceed this by a factor of two


def test_lock_acquire_with_timeout_succeeds_when_released_in_time() -> None:
    """acquire(timeout=30) returns True at the virtual instant the holder releases (+10)."""

    def main() -> tuple[bool, float]:
        lock = threading.Lock()
        lock.acquire()

        def releaser() -> None:
            time.sleep(10)
            lock.release()

        spawn(releaser)
        got = lock.acquire(timeout=30)
        return got, time.monotonic()

    assert run(main) == (True, 10.0)


# -- Condition -----------------------------------------------------------------------------------


def condition_protocol() -> list[object]:
    """A Condition's misuse errors, its timeouts, and waiting on a reentrant lock held twice."""
    cond = threading.Condition()
    seen: list[object] = [outcome(cond.wait), outcome(cond.notify), outcome(cond.notify_all)]
    cond.acquire()
    cond.acquire()  # the default lock is an RLock: wait releases both levels and restores both
    seen += [cond.wait(SHORT), cond.wait_for(lambda: 0, timeout=SHORT), cond.wait_for(lambda: "ready")]
    cond.notify()
    cond.notify_all()
    cond.release()
    cond.release()
    seen.append(outcome(cond.release))
    return seen


def test_condition_matches_stdlib() -> None:
    """Condition: RuntimeError without the lock, timeouts return False/the predicate, RLock levels kept."""
    assert same_as_stdlib(condition_protocol) == [RuntimeError] * 3 + [False, 0, "ready", RuntimeError]


def test_condition_notify_wakes_one_and_notify_all_wakes_the_rest() -> None:
    """notify() wakes exactly one waiter, notify_all() every remaining one."""

    def main() -> list[int]:
        cond = threading.Condition()
        woke: list[int] = []

        def waiter(i: int) -> None:
            with cond:
                cond.wait()
                woke.append(i)

        threads = [spawn(functools.partial(waiter, i)) for i in range(3)]
        time.sleep(1)  # the clock moves only once all three are parked
        with cond:
            cond.notify()
        time.sleep(1)  # and again only once the woken one has run
        counts = [len(woke)]
        time.sleep(100)  # nothing else wakes the other two, however long it waits
        counts.append(len(woke))
        with cond:
            cond.notify_all()
        for thread in threads:
            thread.join()
        return [*counts, len(woke)]

    for seed in range(3):
        assert run(main, seed) == [1, 1, 3]


def test_condition_wait_times_out_on_virtual_time() -> None:
    """wait(timeout=5) without a notify returns False at exactly +5 virtual seconds."""

    def main() -> tuple[bool, float]:
        cond = threading.Condition(threading.Lock())
        with cond:
            got = cond.wait(timeout=5)
        return got, time.monotonic()

    assert run(main) == (False, 5.0)


def test_condition_wait_for_returns_when_predicate_turns_true() -> None:
    """wait_for(pred, timeout=7) returns True at +3 when another thread makes pred true then."""

    def main() -> tuple[bool, float, bool, float]:
        cond = threading.Condition()
        state = {"ready": False}

        def setter() -> None:
            time.sleep(3)
            with cond:
                state["ready"] = True
                cond.notify_all()

        spawn(setter)
        with cond:
            got = cond.wait_for(lambda: state["ready"], timeout=7)
            at = time.monotonic()
            state["ready"] = False
            missed = cond.wait_for(lambda: state["ready"], timeout=7)
        return got, at, missed, time.monotonic()

    assert run(main) == (True, 3.0, False, 10.0)


def test_condition_rejects_a_real_lock() -> None:
    """A cooperative Condition over a real lock raises TypeError naming the lock's type."""
    real = threading.Lock()
    with pytest.raises(TypeError, match="cooperative lock, got a real lock made where kvstress"):
        _coop.Condition(real)


def condition_over_lock_likes_protocol() -> list[object]:
    """``Condition(Condition())`` (the two share the inner one's lock) and a Condition over a
    lock class of one's own, as threading takes them: a wait that times out, a notified
    waiter, and a notify without the lock."""
    seen: list[object] = []
    # The lock class's inner Lock is made here, in this module: cooperative inside the run.
    own = (lambda: threading.Condition(CountingLock(threading.Lock())),)
    for make in (lambda: threading.Condition(threading.Condition()), *own):
        cond = make()
        with cond:
            seen.append(cond.wait(timeout=SHORT))
        ready: list[int] = []
        got: list[bool] = []

        def waiter(cond: Any = cond, ready: list[int] = ready, got: list[bool] = got) -> None:
            with cond:
                got.append(cond.wait_for(lambda: ready, timeout=100))

        thread = threading.Thread(target=waiter)
        thread.start()
        with cond:
            ready.append(1)
            cond.notify()
        thread.join()
        seen += [got, outcome(cond.notify)]
    return seen


def test_a_condition_over_another_condition_or_an_own_lock_behaves_as_threading_s() -> None:
    """A correct pool made so (a blind sweep's housekeeper shared the pool's lock through a
    Condition over the pool's Condition) raised TypeError under control, reported as a crash."""
    assert same_as_stdlib(condition_over_lock_likes_protocol) == [
        False, [[1]], RuntimeError, False, [[1]], RuntimeError,
    ]  # fmt: skip


# -- Semaphore and BoundedSemaphore --------------------------------------------------------------


def semaphore_protocol() -> list[object]:
    """A Semaphore's counting, timeouts and ValueErrors; a BoundedSemaphore's over-release."""
    sem = threading.Semaphore(2)
    seen: list[object] = [
        sem.acquire(),
        sem.acquire(),
        sem.acquire(blocking=False),
        sem.acquire(timeout=SHORT),
    ]
    sem.release(2)
    seen += [
        sem.acquire(blocking=False),
        outcome(lambda: sem.release(0)),
        outcome(lambda: sem.acquire(False, 1)),
    ]
    seen += [outcome(lambda: threading.Semaphore(-1)), outcome(lambda: threading.BoundedSemaphore(-1))]
    bounded = threading.BoundedSemaphore(1)
    seen += [outcome(bounded.release), bounded.acquire()]
    bounded.release()
    with bounded:
        seen.append(bounded.acquire(blocking=False))
    seen += [bounded.acquire(blocking=False), outcome(lambda: bounded.release(2))]
    return seen


def test_semaphore_and_bounded_semaphore_match_stdlib() -> None:
    """Semaphore/BoundedSemaphore: counting, timeouts, ValueError on bad values and over-release."""
    assert same_as_stdlib(semaphore_protocol) == [
        True, True, False, False, True, ValueError, ValueError, ValueError, ValueError, ValueError,
        True, False, True, ValueError,
    ]  # fmt: skip


def test_semaphore_timeout_and_wakeup_on_virtual_time() -> None:
    """A semaphore at 0 times out at +4, and a waiter gets it at the virtual instant of a release."""

    def main() -> list[object]:
        sem = threading.Semaphore(0)
        seen: list[object] = [sem.acquire(timeout=4), time.monotonic()]

        def releaser() -> None:
            time.sleep(2)
            sem.release()

        spawn(releaser)
        seen += [sem.acquire(timeout=4), time.monotonic()]
        return seen

    assert run(main) == [False, 4.0, True, 6.0]


# -- Event ---------------------------------------------------------------------------------------


def event_protocol() -> list[object]:
    """An Event's flag and waits with and without timeouts."""
    event = threading.Event()
    seen: list[object] = [event.is_set(), event.wait(SHORT), event.wait(0)]
    event.set()
    seen += [event.is_set(), event.wait(), event.wait(SHORT)]
    event.clear()
    seen += [event.is_set(), event.wait(SHORT)]
    return seen


def test_event_matches_stdlib() -> None:
    """Event: is_set/set/clear, and wait returns the flag or False on timeout."""
    assert same_as_stdlib(event_protocol) == [False, False, False, True, True, True, False, False]


def test_event_wait_true_when_set_then_cleared_before_waiter_runs() -> None:
    """A waiter woken by set() returns True even if clear() ran before it did, as threading does."""

    def main() -> bool:
        event = threading.Event()
        got: list[bool] = []
        waiter = spawn(lambda: got.append(event.wait()))
        time.sleep(1)  # the clock moves only once the waiter is parked
        event.set()
        event.clear()
        waiter.join()
        return got[0]

    for seed in range(3):
        assert run(main, seed) is True


def test_event_wait_timeout_and_set_on_virtual_time() -> None:
    """wait(timeout=2) with nobody setting fails at +2; a set at +1 wakes a waiter at +1."""

    def main() -> list[object]:
        event = threading.Event()
        seen: list[object] = [event.wait(timeout=2), time.monotonic()]

        def setter() -> None:
            time.sleep(1)
            event.set()

        spawn(setter)
        seen += [event.wait(timeout=5), time.monotonic()]
        return seen

    assert run(main) == [False, 2.0, True, 3.0]


# -- sleep and the clock -------------------------------------------------------------------------


def test_sleep_and_clocks_run_on_virtual_time() -> None:
    """sleep(2.5) advances monotonic/perf_counter/time by exactly 2.5; negative sleeps raise ValueError."""

    def main() -> list[object]:
        before = (time.monotonic(), time.perf_counter(), time.time(), time.monotonic_ns())
        time.sleep(2.5)
        after = (time.monotonic(), time.perf_counter(), time.time(), time.monotonic_ns())
        return [after[0] - before[0], after[1] - before[1], after[2] - before[2], after[3] - before[3],
                outcome(lambda: time.sleep(-1))]  # fmt: skip

    assert run(main) == [2.5, 2.5, pytest.approx(2.5), 2_500_000_000, ValueError]


def interleaving_main(pause: Callable[[float], None], count: int) -> str:
    """Two threads each write ``count`` letters, calling ``pause(0)`` after each."""
    out: list[str] = []

    def writer(letter: str) -> None:
        for _ in range(count):
            out.append(letter)
            pause(0)

    threads = [spawn(lambda: writer("a")), spawn(lambda: writer("b"))]
    for thread in threads:
        thread.join()
    return "".join(out)


def interleaving(scheduler: Scheduler, pause: Callable[[float], None], count: int = 3) -> str:
    """``interleaving_main`` with nothing traced, so only primitives are scheduling points."""
    return run_threads(lambda: interleaving_main(pause, count), scheduler)


def test_sleep_zero_is_a_scheduling_point() -> None:
    """With no traced lines, sleep(0) alone lets the threads interleave; a no-op pause does not."""
    with_sleep = {interleaving(RandomScheduler(seed=seed), _coop.sleep) for seed in range(12)}
    without = {interleaving(RandomScheduler(seed=seed), lambda secs: None) for seed in range(12)}
    assert without <= {"aaabbb", "bbbaaa"}
    assert with_sleep - {"aaabbb", "bbbaaa"}


def test_sleep_zero_interleavings_are_all_explored() -> None:
    """DFS over two writers of two letters separated only by sleep(0) reaches all C(4,2)=6 orders."""
    scheduler = DFSScheduler(preemption_bound=2)
    seen: set[str] = set()
    with pytest.raises(SchedulerExhausted):
        for _ in range(1000):  # about 100 executions in all
            seen.add(interleaving(scheduler, _coop.sleep, count=2))
    assert seen == {"aabb", "abab", "abba", "baab", "baba", "bbaa"}


# -- Thread --------------------------------------------------------------------------------------


def thread_protocol() -> list[object]:
    """A Thread subclass overriding run(), target/args/kwargs, names, join(timeout) and misuse."""
    gate = threading.Event()
    seen: list[object] = []

    class Worker(threading.Thread):
        def run(self) -> None:
            gate.wait()
            seen.append(("worker", self.name))

    worker = Worker(name="w")
    seen += [worker.name, worker.is_alive(), outcome(worker.join)]
    worker.start()
    worker.join(timeout=SHORT)
    seen += [worker.is_alive(), outcome(worker.start)]
    gate.set()
    worker.join()
    seen.append(worker.is_alive())
    plain = threading.Thread(target=lambda a, b: seen.append(a + b), args=(1,), kwargs={"b": 2}, daemon=True)
    plain.start()
    plain.join()
    seen.append(plain.daemon)
    return seen


def test_thread_matches_stdlib() -> None:
    """Thread: run() override, args/kwargs, join(timeout) on a live thread, start twice, join too early."""
    assert same_as_stdlib(thread_protocol) == [
        "w", False, RuntimeError, True, RuntimeError, ("worker", "w"), False, 3, True,
    ]  # fmt: skip


def test_thread_join_timeout_on_virtual_time() -> None:
    """join(timeout=5) on a thread sleeping 100 returns at +5 with it alive; join() then waits to +100."""

    def main() -> list[object]:
        thread = threading.Thread(target=lambda: time.sleep(100), name="sleeper")
        thread.start()
        thread.join(timeout=5)
        seen: list[object] = [time.monotonic(), thread.is_alive()]
        thread.join()
        return [*seen, time.monotonic(), thread.is_alive()]

    assert run(main) == [5.0, True, 100.0, False]


def test_unnamed_threads_get_distinct_names() -> None:
    """Threads started without a name are named t1, t2, ... by the controller, not all 'Thread'."""

    def main() -> list[str]:
        threads = [threading.Thread(target=lambda: None) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return [thread.name for thread in threads]

    assert run(main) == ["t1", "t2", "t3"]


def test_a_started_thread_is_joinable_before_start_returns() -> None:
    """The started thread itself may run first and see its record: join/is_alive work at once."""

    def main() -> list[object]:
        seen: list[object] = []
        holder: list[Any] = []

        def child() -> None:
            seen.append(holder[0].is_alive())

        thread = threading.Thread(target=child, name="child")
        holder.append(thread)
        thread.start()
        thread.join()
        return seen

    for seed in range(4):
        assert run(main, seed) == [True]


# -- queues --------------------------------------------------------------------------------------


def queue_protocol(kind: str) -> list[object]:
    """A queue's order, sizes, task tracking and its Empty/Full/ValueError answers."""
    q = getattr(queue, kind)(maxsize=2)
    seen: list[object] = [q.empty(), q.full(), outcome(q.get_nowait), outcome(lambda: q.get(timeout=SHORT))]
    q.put(3)
    q.put_nowait(1)
    seen += [q.qsize(), q.full(), outcome(lambda: q.put_nowait(9)), outcome(lambda: q.put(9, timeout=SHORT))]
    seen += [
        outcome(lambda: q.put(9, block=False)),
        q.get(),
        q.get(timeout=SHORT),
        outcome(lambda: q.get(timeout=-1)),
    ]
    q.task_done()
    q.task_done()
    q.join()  # every put item was marked done: returns at once
    seen.append(outcome(q.task_done))
    return seen


@pytest.mark.parametrize(
    ("kind", "order"), [("Queue", [3, 1]), ("LifoQueue", [1, 3]), ("PriorityQueue", [1, 3])]
)
def test_queue_matches_stdlib(kind: str, order: list[int]) -> None:
    """Queue/LifoQueue/PriorityQueue: order, sizes, queue.Empty/queue.Full, ValueError, task_done."""
    empty, full = queue.Empty, queue.Full
    expected = [True, False, empty, empty, 2, True, full, full, full, *order, ValueError, ValueError]
    assert same_as_stdlib(lambda: queue_protocol(kind)) == expected


def test_simple_queue_matches_stdlib() -> None:
    """SimpleQueue: FIFO order, sizes and queue.Empty on get_nowait/get(timeout)."""

    def protocol() -> list[object]:
        q: queue.SimpleQueue[int] = queue.SimpleQueue()
        seen: list[object] = [q.empty(), outcome(q.get_nowait), outcome(lambda: q.get(timeout=SHORT))]
        q.put(2)
        q.put_nowait(1)
        seen += [q.qsize(), q.get(), q.get_nowait(), q.empty()]
        return seen

    assert same_as_stdlib(protocol) == [True, queue.Empty, queue.Empty, 2, 2, 1, True]


@pytest.mark.parametrize("kind", ["Queue", "LifoQueue", "PriorityQueue", "SimpleQueue"])
def test_queue_get_timeout_raises_empty_on_virtual_time(kind: str) -> None:
    """get(timeout=5) on an empty queue raises queue.Empty at exactly +5 virtual seconds."""

    def main() -> tuple[object, float]:
        q = getattr(queue, kind)()
        return outcome(lambda: q.get(timeout=5)), time.monotonic()

    assert run(main) == (queue.Empty, 5.0)


def test_queue_put_timeout_raises_full_on_virtual_time() -> None:
    """put(timeout=5) on a full bounded queue raises queue.Full at exactly +5 virtual seconds."""

    def main() -> tuple[object, float]:
        q: queue.Queue[str] = queue.Queue(maxsize=1)
        q.put("x")
        return outcome(lambda: q.put("y", timeout=5)), time.monotonic()

    assert run(main) == (queue.Full, 5.0)


def test_queue_producer_consumer_on_virtual_time() -> None:
    """A blocked get returns at the virtual instant of the put; join() returns once all are done."""

    def main() -> list[object]:
        q: queue.Queue[int] = queue.Queue(maxsize=1)
        got: list[object] = []

        def consumer() -> None:
            for _ in range(3):
                item = q.get()
                got.append((item, time.monotonic()))
                q.task_done()

        spawn(consumer)
        for i in range(3):
            time.sleep(2)
            q.put(i)
        q.join()
        return got

    for seed in range(3):
        assert run(main, seed) == [(0, 2.0), (1, 4.0), (2, 6.0)]


# -- outside a run -------------------------------------------------------------------------------


def test_primitives_outside_a_run_are_plain_ones() -> None:
    """With no run in progress a primitive is a plain one (its timeouts on the real clock; real
    threads blocking on it: tests/test_coop_after_run.py)."""
    lock, sem, event, q = _coop.Lock(), _coop.Semaphore(1), _coop.Event(), _coop_queue.Queue()
    assert lock.acquire() and not lock.acquire(blocking=False) and not lock.acquire(timeout=0.001)
    assert sem.acquire() and not sem.acquire(blocking=False) and not sem.acquire(timeout=0.001)
    assert not event.wait(0.001)
    q.put(1)
    assert q.get() == 1
    with pytest.raises(RuntimeError, match="started outside a controlled run"):
        _coop.Thread(target=lambda: None).start()


def test_an_uncontrolled_thread_in_a_run_raises_instead_of_waiting_for_ever() -> None:
    """While a run is in progress, a thread that is not a controlled one (the harness reading
    the pool) cannot wait for a controlled thread: it would wait forever, so it raises."""
    lock, sem, event = _coop.Lock(), _coop.Semaphore(0), _coop.Event()
    errors: list[str] = []

    done = _thread.allocate_lock()  # real: the run's threads see only what it patches

    def outside() -> None:
        for call in (lock.acquire, sem.acquire, event.wait):
            try:
                call()
            except RuntimeError as error:
                errors.append(str(error))
        done.release()

    def main() -> None:
        assert lock.acquire()
        done.acquire()
        _thread.start_new_thread(outside, ())  # a thread of no run's
        done.acquire()  # the controlled thread holds the baton until it is done
        lock.release()

    run(main)
    assert len(errors) == 3 and all("would wait forever" in error for error in errors)


def test_primitives_built_before_the_run_work_inside_it() -> None:
    """A lock and queue built outside the run (as a pool's may be) are shared correctly inside it."""
    lock, q = _coop.Lock(), _coop_queue.Queue()
    q.put("before")

    def main() -> list[str]:
        got: list[object] = []

        def worker() -> None:
            with lock:
                got.append(q.get())

        threads = [spawn(worker), spawn(worker)]
        q.put("during")
        for thread in threads:
            thread.join()
        return sorted(map(str, got))

    assert run(main) == ["before", "during"]
    assert not lock.locked() and q.empty()


def test_lock_never_released_is_a_deadlock_naming_its_holder() -> None:
    """A waiter on a lock whose holder finished without releasing it deadlocks, naming the lock."""

    def main() -> None:
        lock = threading.Lock()
        spawn(lock.acquire, name="forgetful").join()
        lock.acquire()

    with pytest.raises(ThreadDeadlock) as info:
        run(main)
    assert info.value.wait_for == {"main": ("Lock#1 held by forgetful", "forgetful")}
    assert info.value.cycle == ()


def test_the_cooperative_wall_clock_is_the_real_one_outside_a_run() -> None:
    """Outside a controlled thread ``time.time`` of a cooperative module is the real wall clock."""
    assert abs(_coop.time() - time.time()) < 1.0


def test_a_sleep_read_back_on_the_virtual_clock_is_never_short() -> None:
    """``monotonic() - t0`` after ``sleep(d)`` is at least ``d``, as on every real clock: the
    virtual instant is not ``t0 + d`` rounded down (0.003999999999999997 for 0.004 failed a
    blind user's own check that a sleep lasts its length)."""

    def main() -> list[float]:
        short = []
        time.sleep(0.01)  # away from 0, where t0 + d - t0 is exact
        for d in (0.002, 0.004, 0.003, 0.001, 0.0007, 0.05) * 20:
            t0 = time.monotonic()
            time.sleep(d)
            if time.monotonic() - t0 < d:
                short.append(d)
        return short

    assert run(main) == []
