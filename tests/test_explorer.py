"""kvstress.explore: async functions on the controlled loop, threaded ones on the baton.

Each program below has a race that plain asyncio (or a plain thread run) does not hit, and a
fixed twin: explore finds the race, names its schedule and seed, replays it, and stays silent on
the twin.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import functools
import re
import threading
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import kvstress
from kvstress import Explored, explore
from kvstress.controlled import LATE_WINDOW, TimeLimitExceeded, run_controlled
from kvstress.schedulers import RandomScheduler, ScheduleDivergence

REAL_START = threading.Thread.start
REAL_MONOTONIC = time.monotonic

SCHEDULE = re.compile(r"schedule: (ks1:[A-Za-z0-9_-]+)")


class Seats:
    """A booking counter whose check and update are split by an await (or not, when fixed)."""

    def __init__(self, seats: int) -> None:
        self.left = seats

    async def book(self, *, racy: bool) -> bool:
        """Take one seat if any is left."""
        if racy:
            if self.left > 0:
                await asyncio.sleep(0)  # the check and the take are no longer one step
                self.left -= 1
                return True
            return False
        if self.left > 0:
            self.left -= 1
            await asyncio.sleep(0)
            return True
        return False


def booking(*, racy: bool) -> Callable[[], Coroutine[Any, Any, None]]:
    """Two clients book the last seat, the second after two yields; two bookings overbook it.

    On asyncio's FIFO the first client's take always lands before the second one looks.
    """

    async def client(seats: Seats, delay: int) -> bool:
        for _ in range(delay):
            await asyncio.sleep(0)
        return await seats.book(racy=racy)

    async def main() -> None:
        seats = Seats(1)
        results = await asyncio.gather(client(seats, 0), client(seats, 2))
        assert seats.left >= 0, f"overbooked: {results}, seats left {seats.left}"

    return main


def test_plain_asyncio_does_not_overbook() -> None:
    """The racy booking passes under asyncio.run: the FIFO loop never splits it badly."""
    asyncio.run(booking(racy=True)())


def test_explore_finds_the_race_and_names_its_schedule() -> None:
    """explore raises the test's own AssertionError, with schedule, seed and replay call in a note."""
    with pytest.raises(AssertionError, match="overbooked") as caught:
        explore(booking(racy=True), schedules=200, seed=7)
    note = "\n".join(caught.value.__notes__)
    assert "strategy 'pct', seed 7" in note
    assert "replay:   kvstress.explore(" in note
    assert SCHEDULE.search(note) is not None


def test_the_schedule_replays_to_the_same_failure() -> None:
    """replay= runs exactly the failing schedule and fails the same way; its note says so."""
    with pytest.raises(AssertionError) as caught:
        explore(booking(racy=True), schedules=200, seed=7)
    match = SCHEDULE.search("\n".join(caught.value.__notes__))
    assert match is not None
    with pytest.raises(AssertionError, match="overbooked") as again:
        explore(booking(racy=True), replay=match.group(1))
    assert str(again.value).splitlines()[0] == str(caught.value).splitlines()[0]
    assert "the replayed schedule failed" in "\n".join(again.value.__notes__)


def test_the_fixed_program_passes_every_schedule() -> None:
    """The fixed booking passes 200 schedules; explore says how many it ran."""
    explored = explore(booking(racy=False), schedules=200, seed=7)
    assert explored == Explored(schedules=200, strategy="pct", seed=7)
    assert str(explored) == "kvstress explored 200 schedules (strategy 'pct', seed 7)"


@pytest.mark.parametrize("strategy", ["pct", "random"])
def test_each_strategy_finds_the_race(strategy: str) -> None:
    """Both sampling strategies find the overbooking within 200 schedules."""
    with pytest.raises(AssertionError, match="overbooked"):
        explore(booking(racy=True), schedules=200, strategy=strategy, seed=3)


def test_dfs_ends_when_every_interleaving_ran() -> None:
    """DFS on the fixed program runs out before the limit and says so."""
    explored = explore(booking(racy=False), schedules=10_000, strategy="dfs", seed=0)
    assert explored.exhausted and 1 < explored.schedules < 10_000


def test_an_unseeded_search_prints_a_seed_that_repeats_it() -> None:
    """seed=None draws a seed; the failure shows it, and that seed finds the same schedule again."""
    with pytest.raises(AssertionError) as caught:
        explore(booking(racy=True), schedules=200)
    note = "\n".join(caught.value.__notes__)
    seed = re.search(r"seed (\d+)", note)
    schedule = SCHEDULE.search(note)
    assert seed is not None and schedule is not None
    with pytest.raises(AssertionError) as again:
        explore(booking(racy=True), schedules=200, seed=int(seed.group(1)))
    assert schedule.group(1) in "\n".join(again.value.__notes__)


def test_time_is_virtual() -> None:
    """An hour of asyncio.sleep in each of 50 schedules costs no wall time worth noting."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        start = loop.time()
        await asyncio.sleep(3600)
        assert loop.time() - start == 3600

    assert explore(main, schedules=50, seed=1).schedules == 50


async def deadline_on_monotonic(sleep: Callable[[float], Coroutine[Any, Any, None]]) -> None:
    """A poll loop of the ordinary kind: a deadline on time.monotonic, naps on ``sleep``."""
    deadline = time.monotonic() + 3600
    naps = 0
    while time.monotonic() < deadline:
        await sleep(1)
        naps += 1
        assert naps <= 3600, "the deadline never came: time.monotonic is not the loop's clock"
    assert naps == 3600, f"{naps} naps for an hour"


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_the_test_modules_monotonic_clock_is_the_loops(backend: str) -> None:
    """In the explored function's module, time.monotonic reads the loop's virtual clock: an hour's
    deadline polled every second takes 3,600 naps and no wall time worth noting."""
    import trio

    fn = functools.partial(deadline_on_monotonic, trio.sleep if backend == "trio" else asyncio.sleep)
    started = time.monotonic()
    assert explore(fn, schedules=3, seed=1, backend=backend).schedules == 3
    assert time.monotonic() - started < 60
    assert time.monotonic is REAL_MONOTONIC  # restored after the run


class Counter:
    """A counter whose increment is a read and a write on separate lines (a lost update)."""

    def __init__(self) -> None:
        self.value = 0
        self.lock = threading.Lock()

    def bump(self, *, racy: bool) -> None:
        """Add one."""
        if racy:
            seen = self.value
            self.value = seen + 1
        else:
            with self.lock:
                seen = self.value
                self.value = seen + 1


def bumping(*, racy: bool) -> Callable[[], None]:
    """Two threads bump a counter twice each; anything but 4 lost an update."""

    def main() -> None:
        counter = Counter()
        workers = [threading.Thread(target=lambda: [counter.bump(racy=racy) for _ in range(2)]) for _ in "ab"]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        assert counter.value == 4, f"lost update: counter is {counter.value}"

    return main


def test_threads_lost_update_is_found_and_replays() -> None:
    """A plain function's threads take turns on the baton: the lost update is found and replays."""
    with pytest.raises(AssertionError, match="lost update") as caught:
        explore(bumping(racy=True), schedules=200, seed=5)
    match = SCHEDULE.search("\n".join(caught.value.__notes__))
    assert match is not None
    with pytest.raises(AssertionError, match="lost update"):
        explore(bumping(racy=True), replay=match.group(1))


def test_threads_with_a_lock_pass() -> None:
    """The locked counter passes every schedule (its lock is the baton's cooperative one)."""
    assert explore(bumping(racy=False), schedules=100, seed=5).schedules == 100


def pooled(*, racy: bool) -> Callable[[], None]:
    """Two workers of a ThreadPoolExecutor bump a counter twice each."""

    def main() -> None:
        counter = Counter()
        with ThreadPoolExecutor(2) as executor:
            list(executor.map(lambda _: counter.bump(racy=racy), range(4)))
        assert counter.value == 4, f"lost update: counter is {counter.value}"

    return main


class Bumper(threading.Thread):
    """A worker written as a subclass of threading.Thread (made when this module was imported)."""

    def __init__(self, counter: Counter, *, racy: bool) -> None:
        super().__init__()
        self.counter, self.racy = counter, racy

    def run(self) -> None:
        """Bump twice."""
        for _ in range(2):
            self.counter.bump(racy=self.racy)


def subclassed(*, racy: bool) -> Callable[[], None]:
    """Two Bumper threads bump a counter twice each."""

    def main() -> None:
        counter = Counter()
        workers = [Bumper(counter, racy=racy) for _ in "ab"]
        for worker in workers:
            worker.start()
        assert any(worker.is_alive() for worker in workers) or counter.value > 0
        for worker in workers:
            worker.join()
        assert not any(worker.is_alive() for worker in workers)
        assert counter.value == 4, f"lost update: counter is {counter.value}"

    return main


@pytest.mark.parametrize("make", [pooled, subclassed], ids=["executor", "thread-subclass"])
def test_executor_workers_and_thread_subclasses_are_controlled(
    make: Callable[..., Callable[[], None]],
) -> None:
    """Workers of a ThreadPoolExecutor and threads of a Thread subclass made at import run on the
    baton: their lost update is found, and the locked twin passes without a stall."""
    with pytest.raises(AssertionError, match="lost update"):
        explore(make(racy=True), schedules=200, seed=5)
    assert explore(make(racy=False), schedules=50, seed=5).schedules == 50
    assert threading.Thread.start is REAL_START  # restored after the runs


def test_a_thread_keeps_the_name_its_code_gave_it() -> None:
    """``threading.current_thread().name`` inside an explored thread reads the name the test gave."""

    def main() -> None:
        seen: list[str] = []
        worker = threading.Thread(
            target=lambda: seen.append(threading.current_thread().name), name="decoder-0"
        )
        worker.start()
        worker.join()
        assert seen == ["decoder-0"], seen

    assert explore(main, schedules=3, seed=0).schedules >= 1


class Evictor(threading.Thread):
    """A background thread written as a subclass that names itself, as a cache's evictor does."""

    def __init__(self, seen: list[str], name: str | None) -> None:
        super().__init__(name=name, daemon=True)
        self.seen = seen

    def run(self) -> None:
        """Say who it is."""
        self.seen.append(threading.current_thread().name)


def test_a_thread_subclass_keeps_the_name_it_gave_itself() -> None:
    """A subclass's own ``super().__init__(name="evictor")`` was dropped: the thread read as
    ``kvstress-t1`` in the audit's findings (a blind user's evictor). One given no name still
    goes by the controller's ``t<N>``."""

    def main() -> None:
        seen: list[str] = []
        named, unnamed = Evictor(seen, "evictor"), Evictor(seen, None)
        for worker in (named, unnamed):
            worker.start()
            worker.join()
        assert seen[0] == "evictor" and seen[1] != "evictor", seen
        assert not seen[1].startswith("Thread-"), seen

    assert explore(main, schedules=3, seed=0).schedules >= 1


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"schedules": 0}, "schedules"),
        ({"schedules": "many"}, "schedules"),
        ({"strategy": "fifo"}, "strategy"),
        ({"seed": -1}, "seed"),
        ({"replay": "not-a-schedule"}, "replay"),
        ({"backend": "curio"}, "backend"),
    ],
)
def test_bad_arguments_name_themselves(options: dict[str, object], named: str) -> None:
    """Each bad argument raises ValueError naming it."""
    with pytest.raises(ValueError, match=rf"^{named}"):
        explore(booking(racy=False), **options)  # type: ignore[arg-type]


def test_trio_for_a_plain_function_is_refused() -> None:
    """A plain fn runs on threads: ``backend="trio"`` was ignored without a word (a blind sweep)."""
    with pytest.raises(ValueError, match=r"^backend='trio' applies to an async fn"):
        explore(lambda: None, backend="trio", schedules=2, seed=0)


def test_explore_is_public() -> None:
    """kvstress.explore is the explorer's function."""
    assert kvstress.explore is explore


def test_threads_block_on_the_threaded_pool_cooperatively() -> None:
    """Threads that wait on ThreadedBlockPool's condition take turns: 50 schedules, no stall."""

    def main() -> None:
        pool = kvstress.ThreadedBlockPool(1, (2,))
        owners: list[int] = []

        def tenant(mark: int) -> None:
            block = pool.acquire()
            assert block is not None and float(block.data.sum()) == 0.0, "a dirty block"
            block.data.fill_(mark)
            owners.append(mark)
            pool.release(block)

        workers = [threading.Thread(target=tenant, args=(mark,)) for mark in (1, 2, 3)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        assert sorted(owners) == [1, 2, 3]

    assert explore(main, schedules=50, seed=2).schedules == 50


SHARED_POOL = kvstress.ThreadedBlockPool(1, (2,))
"""A pool made when this module was imported, as a server's global pool is: real locks then."""


def test_a_pool_made_at_import_takes_the_batons_locks() -> None:
    """Threads contending for a module-level pool (its locks made before any run) take turns on
    the baton: 30 schedules, no stall, and the pool's real locks are back after."""
    real_lock = SHARED_POOL._lock

    def main() -> None:
        def tenant() -> None:
            block = SHARED_POOL.acquire(timeout=5)
            assert block is not None
            SHARED_POOL.release(block)

        workers = [threading.Thread(target=tenant) for _ in range(3)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        assert SHARED_POOL.free_count() == 1

    assert explore(main, schedules=30, seed=2).schedules == 30
    assert SHARED_POOL._lock is real_lock


def test_a_lambda_returning_a_coroutine_is_refused() -> None:
    """A plain function that returns a coroutine fails with a ValueError saying what to pass, and
    no schedule to replay (it is how explore was called, not a failure of the code)."""
    with pytest.raises(ValueError, match="fn returned a coroutine") as caught:
        explore(lambda: booking(racy=False)(), schedules=3, seed=0)
    assert not getattr(caught.value, "__notes__", None)


def trio_lost_update(*, racy: bool) -> Callable[[], Coroutine[Any, Any, None]]:
    """Two trio tasks started together bump a counter; the racy one reads, yields, then writes."""
    import trio

    async def main() -> None:
        shared = {"n": 0}

        async def slow() -> None:
            if racy:
                seen = shared["n"]
                await trio.sleep(0)
                shared["n"] = seen + 1
            else:
                shared["n"] += 1
                await trio.sleep(0)

        async def quick() -> None:
            shared["n"] += 1

        async with trio.open_nursery() as nursery:
            nursery.start_soon(slow)
            nursery.start_soon(quick)
        assert shared["n"] == 2, f"lost update: {shared['n']}"

    return main


def test_trio_lost_update_is_found_and_replays() -> None:
    """On trio, explore seeds each schedule's batch orders: the race is found, its schedule
    replays it, and the fixed twin passes every schedule."""
    with pytest.raises(AssertionError, match="lost update") as caught:
        explore(trio_lost_update(racy=True), schedules=50, strategy="random", seed=5, backend="trio")
    note = "\n".join(caught.value.__notes__)
    assert "backend='trio'" in note
    found = SCHEDULE.search(note)
    assert found is not None
    for _ in range(3):
        with pytest.raises(AssertionError, match="lost update"):
            explore(trio_lost_update(racy=True), replay=found.group(1), backend="trio")
    assert explore(trio_lost_update(racy=False), schedules=30, seed=5, backend="trio").schedules == 30


def test_on_trio_an_order_one_schedule_in_24_takes_is_found() -> None:
    """Four tasks in step, and a failure only when they reach their fifth step in one order of
    the 24: each schedule's seed steers its own batch orders, so 300 schedules find it (every
    schedule past the 64th had repeated one already, and none of them had it)."""
    import trio

    async def in_step() -> None:
        log: list[str] = []

        async def racer(name: str) -> None:
            for step in range(6):
                await trio.lowlevel.checkpoint()
                if step == 4:
                    log.append(name)

        async with trio.open_nursery() as nursery:
            for index in range(4):
                nursery.start_soon(racer, f"r{index}")
        assert log != ["r3", "r1", "r2", "r0"], "the one order"

    with pytest.raises(AssertionError, match="the one order"):
        explore(in_step, schedules=300, strategy="random", seed=0, backend="trio")


def test_a_schedule_that_never_ends_is_a_finding_not_a_hang() -> None:
    """A task that waits for ever while a watchdog's timer keeps firing: virtual time moves, so
    no instant runs out of steps; the schedule ends at an hour of virtual time, a finding with
    its schedule, on the loop and on threads."""

    async def stuck() -> None:
        async def watchdog() -> None:
            while True:
                await asyncio.sleep(1.0)

        ticking = asyncio.get_running_loop().create_task(watchdog())
        await asyncio.Event().wait()  # nobody sets it
        ticking.cancel()

    with pytest.raises(TimeLimitExceeded, match="virtual time would pass 3600 s"):
        kvstress.explore(stuck, schedules=3, strategy="random", seed=0)

    def stuck_threads() -> None:
        done = threading.Event()

        def watchdog() -> None:
            while not done.is_set():
                time.sleep(1.0)

        threading.Thread(target=watchdog, daemon=False).start()
        done.wait()  # nobody sets it

    with pytest.raises(TimeLimitExceeded, match="virtual time would pass 3600 s"):
        kvstress.explore(stuck_threads, schedules=3, strategy="random", seed=0)


def test_a_schedule_that_never_ends_on_trio_is_a_finding_not_a_hang() -> None:
    """On trio too (its clock is trio's own, with no limit of its own: a blind user's test ran
    on past 60,000 virtual seconds until it was killed)."""
    import trio

    async def stuck() -> None:
        async def watchdog() -> None:
            while True:
                await trio.sleep(1.0)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(watchdog)
            await trio.Event().wait()  # nobody sets it

    with pytest.raises(TimeLimitExceeded, match="virtual time passed 3600 s"):
        kvstress.explore(stuck, schedules=2, strategy="random", seed=0, backend="trio")


def disconnect_during_prefill(*, leaky: bool) -> Callable[[], Coroutine[Any, Any, None]]:
    """A request takes a block, prefills for 2 ms, decodes; its client goes away at 3 ms. The
    leaky one puts the block in its table only after the prefill, so a cancel landing between
    the prefill's wake-up and the request's next step leaves it out of the ``finally``."""

    async def main() -> None:
        async with kvstress.audit(kvstress.AsyncBlockPool(2, (2, 4))) as pool:
            table: list[Any] = []

            async def request() -> None:
                try:
                    block = await pool.acquire()
                    if not leaky:
                        table.append(block)
                    await asyncio.sleep(0.002)  # prefill
                    if leaky:
                        table.append(block)
                    await asyncio.sleep(0.02)  # decode
                finally:
                    for held in table:
                        await pool.release(held)

            task = asyncio.create_task(request())
            await asyncio.sleep(0.003)  # the client goes away
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    return main


def test_a_cancel_inside_a_short_window_is_found_by_pool_fuzzing_and_by_explored_tests() -> None:
    """The prefill ends at 2 ms and the disconnect comes at 3 ms: timers at their exact instants
    put the cancel in the decode every time. The controlled loop under ``RandomScheduler`` (a
    pool's fuzzing, ``ALL_TIMERS``) fires a timer due within 5 ms ahead of a ready task, so the
    cancel lands right after the prefill and the leak shows. An explored test never fires a timer
    ahead of a ready task (its own assertions know nothing of such jumps), but lets one fire up to
    ``LATE_WINDOW`` late: the prefill's wake-up after the 3 ms disconnect, and the leak shows too.
    The correct request stays silent under both."""
    leaks = 0
    for seed in range(60):
        try:
            run_controlled(disconnect_during_prefill(leaky=True), RandomScheduler(seed=seed))
        except kvstress.InvariantViolation as violation:
            assert violation.invariant == "lost-block"
            leaks += 1
        run_controlled(disconnect_during_prefill(leaky=False), RandomScheduler(seed=seed))
    assert leaks > 0
    for strategy in ("pct", "random", "dfs"):
        with pytest.raises(kvstress.InvariantViolation, match="lost-block"):
            explore(disconnect_during_prefill(leaky=True), schedules=200, strategy=strategy, seed=0)
        explored = explore(disconnect_during_prefill(leaky=False), schedules=100, strategy=strategy, seed=0)
        assert explored.schedules == 100 or explored.exhausted  # dfs: every schedule, silent


def test_timers_fire_late_only_within_the_window_and_never_ahead_of_a_ready_task() -> None:
    """An explored test's timers fire in their order, or later by at most ``LATE_WINDOW``; every
    task that is ready runs before time moves, and no sleep reads back short. Timers further
    apart than the window always fire in order."""
    orders: set[tuple[str, ...]] = set()

    def timeline() -> Callable[[], Coroutine[Any, Any, None]]:
        async def main() -> None:
            loop = asyncio.get_running_loop()
            start = loop.time()
            fired: list[str] = []

            async def sleeper(name: str, seconds: float) -> None:
                began = loop.time()
                await asyncio.sleep(seconds)
                late = loop.time() - began - seconds
                assert -1e-12 <= late <= LATE_WINDOW + 1e-12, (name, late)
                fired.append(name)

            async def ready() -> None:
                assert loop.time() == start  # a ready task runs before time moves

            async with asyncio.TaskGroup() as group:
                group.create_task(sleeper("a", 0.010))
                group.create_task(sleeper("b", 0.011))  # within the window of a: either first
                group.create_task(sleeper("c", 0.020))  # 9 ms after b: always after both
                group.create_task(ready())
            assert fired[-1] == "c"
            orders.add(tuple(fired))

        return main

    explore(timeline(), schedules=200, strategy="random", seed=0)
    assert orders == {("a", "b", "c"), ("b", "a", "c")}


def test_an_explored_failure_shows_the_acquire_stack_once() -> None:
    """The acquire's stack is in the message; the notes add the history, not the stack again."""

    async def leak() -> None:
        async with kvstress.audit(kvstress.AsyncBlockPool(2, (2, 4))) as pool:
            await pool.acquire()

    with pytest.raises(kvstress.InvariantViolation, match="lost-block") as caught:
        explore(leak, schedules=3, seed=0)
    assert "acquired by" in str(caught.value) and " at:" in str(caught.value)
    assert " at:" not in "\n".join(caught.value.__notes__)


def test_a_violation_inside_a_task_group_keeps_its_history_note() -> None:
    """A violation a task group wraps in an ExceptionGroup is detailed on itself (its history),
    as one raised bare is: a blind user's anyio test showed only the schedule and replay."""

    async def double_release() -> None:
        async with kvstress.audit(kvstress.AsyncBlockPool(2, (2, 4))) as pool:
            block = await pool.acquire()

            async def release() -> None:
                await pool.release(block)

            async with asyncio.TaskGroup() as group:
                group.create_task(release())
            async with asyncio.TaskGroup() as group:
                group.create_task(release())

    with pytest.raises(ExceptionGroup) as caught:
        explore(double_release, schedules=3, seed=0)
    inner = caught.value.exceptions[0]
    assert isinstance(inner, kvstress.InvariantViolation) and inner.invariant == "double-release"
    assert "release" in "\n".join(getattr(inner, "__notes__", ()))
    assert "schedule:" in "\n".join(caught.value.__notes__)


def reaper_beside_a_finishing_worker(*, racy: bool, abort_at: float) -> Callable[[], None]:
    """A worker holds a block for three 10 ms steps, then ends its request; a reaper aborts it at
    ``abort_at``. Whoever ends it first releases the block. The racy one checks the request's
    state and takes its block in two lock sections, so a reaper and a worker that end it at once
    both release it: a double release, reachable only when the reaper's abort comes inside the
    worker's window (just after its last sleep ends)."""

    def main() -> None:
        with kvstress.audit(kvstress.ThreadedBlockPool(2, (2, 4))) as pool:
            lock = threading.Lock()
            request: dict[str, Any] = {"state": "running", "block": pool.acquire()}

            def end(state: str) -> None:
                with lock:
                    if request["state"] != "running":
                        return
                    if not racy:
                        request["state"], block = state, request["block"]
                if racy:  # the state checked above may have changed since
                    with lock:
                        request["state"], block = state, request["block"]
                pool.release(block)

            def worker() -> None:
                for _ in range(3):
                    time.sleep(0.01)
                end("finished")

            def reaper() -> None:
                time.sleep(abort_at)
                end("aborted")

            threads = [threading.Thread(target=worker), threading.Thread(target=reaper)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()

    return main


@pytest.mark.parametrize("abort_at", [0.029, 0.03])
def test_a_reaper_due_just_before_a_worker_wakes_is_explored_both_ways(abort_at: float) -> None:
    """The reaper is due up to 1 ms before the worker's last sleep ends: at exact instants it
    always runs first and finds the request running alone. An explored test's timers may fire
    late (``LATE_WINDOW``) on the thread baton as on the loop: the reaper wakes after the worker,
    inside its window, and the double release shows; the correct twin stays silent."""
    for strategy in ("pct", "random"):
        with pytest.raises(kvstress.InvariantViolation, match="double-release"):
            explore(
                reaper_beside_a_finishing_worker(racy=True, abort_at=abort_at),
                schedules=300,
                strategy=strategy,
                seed=0,
            )
        explored = explore(
            reaper_beside_a_finishing_worker(racy=False, abort_at=abort_at),
            schedules=100,
            strategy=strategy,
            seed=0,
        )
        assert explored.schedules == 100


def test_an_explored_test_starts_its_tasks_in_the_order_it_made_them() -> None:
    """A loop runs a new task's first step in creation order (``call_soon``'s FIFO), and a blind
    user's test relied on it (clients started in order, the first one admitted first): an
    explored test keeps that order. Everything after a task's first step is still explored."""
    later_orders: set[tuple[int, ...]] = set()

    async def main() -> None:
        started: list[int] = []
        resumed: list[int] = []

        async def client(index: int) -> None:
            started.append(index)
            await asyncio.sleep(0)
            resumed.append(index)

        await asyncio.gather(*(asyncio.create_task(client(index)) for index in range(4)))
        assert started == [0, 1, 2, 3]
        later_orders.add(tuple(resumed))

    for strategy in ("pct", "random", "dfs"):
        explore(main, schedules=100, strategy=strategy, seed=0)
    assert len(later_orders) > 1


def test_datetime_now_moves_with_virtual_time() -> None:
    """``datetime.now()`` in an explored test reads the virtual wall clock, as ``time.time()``
    does: a blind user's latency, measured with it around 50 ms of sleeps, read 0.0003 s. And
    never short: a float epoch with its own fraction of a microsecond once made 50 ms read as
    0.049999 s (in one process of a CI run)."""

    async def main() -> None:
        for seconds in (0.013, 0.0375, 0.05, 0.001):  # never read short, whatever the process
            began = datetime.datetime.now()
            await asyncio.sleep(seconds)
            assert (datetime.datetime.now() - began).total_seconds() >= seconds
            assert abs(datetime.datetime.now().timestamp() - time.time()) < 1e-3  # one wall clock

    def threads() -> None:
        began = datetime.datetime.now()
        worker = threading.Thread(target=time.sleep, args=(0.05,))
        worker.start()
        worker.join()
        assert (datetime.datetime.now() - began).total_seconds() >= 0.05
        assert abs(datetime.datetime.now().timestamp() - time.time()) < 1e-3  # one wall clock

    explore(main, schedules=5, strategy="random", seed=0)
    explore(threads, schedules=5, strategy="random", seed=0)
    assert type(datetime.datetime.now()) is datetime.datetime  # outside a run: the real one


def test_a_long_schedule_is_printed_whole_once(tmp_path: Path) -> None:
    """A long run's schedule (kilobytes) is cut on the ``schedule:`` line and whole in the replay
    call, which replays it: the note does not carry it twice. ``replay="@path"`` replays the
    schedule a file holds, as ``--kvstress-replay=@path`` does."""

    async def chatty() -> None:
        async def talk(who: int) -> int:
            for _ in range(2000):
                await asyncio.sleep(0)
            return who

        first = await asyncio.wait(
            {asyncio.ensure_future(talk(0)), asyncio.ensure_future(talk(1))},
            return_when=asyncio.FIRST_COMPLETED,
        )
        assert next(iter(first[0])).result() == 0, "talker 1 finished first"

    with pytest.raises(AssertionError, match="talker 1") as caught:
        explore(chatty, schedules=200, strategy="random", seed=1)
    note = "\n".join(caught.value.__notes__)
    schedule_line = next(line for line in note.splitlines() if "schedule:" in line)
    assert "characters: whole in the replay line" in schedule_line
    whole = re.search(r"replay=('ks1:[A-Za-z0-9_-]+')", note)
    assert whole is not None and len(whole.group(1)) > 400
    assert note.count(whole.group(1)[1:-1]) == 1
    with pytest.raises(AssertionError, match="talker 1"):
        explore(chatty, replay=whole.group(1)[1:-1])
    held = tmp_path / "long.ks1"
    held.write_text(whole.group(1)[1:-1] + "\n")
    with pytest.raises(AssertionError, match="talker 1"):
        explore(chatty, replay=f"@{held}")
    with pytest.raises(
        ValueError, match=r"^replay: cannot read the schedule file '.*missing.ks1': No such file"
    ):
        explore(chatty, replay=f"@{tmp_path / 'missing.ks1'}")


def test_a_replay_that_leaves_its_schedule_is_tried_again() -> None:
    """Work in real threads comes back at other points from one try to the next: a replay whose
    try diverges is tried again (up to REPLAY_TRIES), and the failure says which try followed
    the schedule; where none does, the divergence says how many tried."""
    with pytest.raises(AssertionError) as caught:
        explore(booking(racy=True), schedules=200, seed=7)
    match = SCHEDULE.search("\n".join(caught.value.__notes__))
    assert match is not None
    strays = [0]

    async def sometimes_other() -> None:
        if strays[0]:  # a stray task the recorded run did not have: this try diverges
            strays[0] -= 1
            await asyncio.gather(asyncio.sleep(0), asyncio.sleep(0), booking(racy=True)())
        await booking(racy=True)()

    strays[0] = 2
    with pytest.raises(AssertionError, match="overbooked") as again:
        explore(sometimes_other, replay=match.group(1))
    assert "followed its schedule on try 3 (the 2 before it" in "\n".join(again.value.__notes__)
    strays[0] = 1000
    with pytest.raises(ScheduleDivergence) as lost:
        explore(sometimes_other, replay=match.group(1))
    assert "all 20 tries of the replay left the schedule" in "\n".join(lost.value.__notes__)
    assert strays[0] == 1000 - 20


@pytest.mark.parametrize("strategy", ["random", "pct"])
def test_anyio_worker_threads_end_with_each_schedule(strategy: str) -> None:
    """anyio ends a worker thread by a done callback of the root task; a schedule that ran the
    shutdown's own steps first left that callback queued, the loop dropped it at close, and the
    worker waited for work for ever: the interpreter never exited (a blind user's explored
    tests on ``anyio.to_thread``, on asyncio)."""
    import anyio.to_thread

    def workers() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if t.name == "AnyIO worker thread"}

    before = workers()

    async def offloads() -> None:
        await anyio.to_thread.run_sync(lambda: None)

    assert explore(offloads, schedules=8, strategy=strategy, seed=0).schedules == 8
    for worker in workers() - before:
        worker.join(5)
    assert not workers() - before, "anyio worker threads left waiting"


def test_a_replay_that_passes_says_the_failure_did_not_happen_again() -> None:
    """It said "explored 1 schedule (strategy 'replay', seed <a fresh draw>)" (a blind user's)."""
    broken = [True]

    async def two_tasks() -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(asyncio.sleep(0.001))
            group.create_task(asyncio.sleep(0.002))
        assert not broken[0], "the bug"

    with pytest.raises(AssertionError) as caught:
        explore(two_tasks, schedules=5, strategy="random", seed=0)
    (schedule,) = re.findall(r"replay=('ks1:[^']+')", "\n".join(caught.value.__notes__))
    broken[0] = False  # the fix
    said = str(explore(two_tasks, replay=schedule.strip("'")))
    assert "replayed the given schedule, and it passed" in said and not re.search(r"seed \d", said)


def test_dfs_on_trio_searches_as_the_other_strategies_do() -> None:
    """trio offers no per-step choice: dfs ran one schedule there and called it every one it
    had (a blind user's). It is the seeded random search every strategy is on trio."""
    import trio

    async def nursery() -> None:
        async with trio.open_nursery() as tasks:
            tasks.start_soon(trio.sleep, 0.001)
            tasks.start_soon(trio.sleep, 0.002)

    explored = explore(nursery, schedules=12, strategy="dfs", seed=0, backend="trio")
    assert explored.schedules == 12 and not explored.exhausted


def test_on_trio_the_tests_task_is_named_after_its_function() -> None:
    """A block it took was held by "kvstress.controlled._trio.seeded_trio_run.<locals>.main"."""
    import trio

    names: list[str] = []

    async def request_loop() -> None:
        names.append(trio.lowlevel.current_task().name)

    explore(request_loop, schedules=1, backend="trio")
    assert names == [f"{__name__}.{request_loop.__qualname__}"]


def test_a_dfs_path_left_once_is_run_again_and_one_left_every_time_fails() -> None:
    """A dfs execution that leaves its path (work in real threads, a loaded machine moving its
    timing: a blind user's correct test failed in 1 of 6 runs) runs that path again, up to
    three times in a row; two tries that leave it alike take their own way from there (the
    execution that recorded the path was the odd one); a program that leaves it every time
    still fails, saying what to use."""
    runs: list[int] = []

    async def steps() -> None:
        for _ in range(3):
            await asyncio.sleep(0)

    for odd, tries in ((3, 21), (2, 22)):  # the odd run leaves the path; or records it

        async def once_other(odd: int = odd) -> None:
            runs.append(1)
            await asyncio.gather(*(steps() for _ in range(3 if len(runs) == odd else 2)))

        runs.clear()
        outcome = explore(once_other, schedules=20, strategy="dfs", seed=0)
        assert outcome.schedules == 20 and len(runs) == tries

    from kvstress.explorer._run import diverged_again
    from kvstress.schedulers import DFSScheduler

    scheduler, divergence = DFSScheduler(seed=0), ScheduleDivergence("left")
    assert [diverged_again(scheduler, divergence) for _ in range(3)] == [True, True, False]
    assert "left its schedule 3 times in a row; random and pct explore" in "\n".join(divergence.__notes__)


def test_an_async_fn_is_refused_inside_a_running_loop_before_any_schedule() -> None:
    """Each schedule runs the fn on a loop of its own: from a running loop (an
    IsolatedAsyncioTestCase's method) asyncio's refusal came out as schedule 1's failure, with
    a replay line, seconds in. From a thread it runs."""
    runs: list[int] = []

    async def scenario() -> None:
        runs.append(1)
        await asyncio.sleep(0)

    async def inside() -> Explored:
        with pytest.raises(RuntimeError, match=r"inside a running asyncio event loop.*asyncio\.to_thread"):
            kvstress.explore(scenario, schedules=3, seed=0)
        assert runs == []
        return await asyncio.to_thread(kvstress.explore, scenario, schedules=3, seed=0)

    assert asyncio.run(inside()).schedules == 3 and len(runs) == 3


def test_a_partial_is_named_as_one_in_the_replay_line() -> None:
    async def scenario(limit: int) -> None:
        await asyncio.sleep(0)
        assert limit > 1, "too small"

    with pytest.raises(AssertionError) as failed:
        kvstress.explore(functools.partial(scenario, 1), schedules=2, seed=0)
    notes = "\n".join(getattr(failed.value, "__notes__", []))
    assert "kvstress.explore(functools.partial(" in notes and "scenario, ...), replay='ks1:" in notes


def test_a_failure_after_time_stood_still_long_says_why() -> None:
    """An engine loop that never sleeps between its rounds keeps virtual time still: a client's
    timeout never fires, and the loop's own step guard fails the test. The failure says time
    stood still, and for how many steps (a blind team's guard failed with no hint of it); a
    failure a few steps in says nothing of it."""

    async def engine_never_sleeps() -> None:
        served = asyncio.Event()

        async def engine() -> None:
            for _ in range(5_000):
                await asyncio.sleep(0)  # a round with nothing to do: no time passes
            raise RuntimeError("engine ran 5000 rounds")

        async def client() -> None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(served.wait(), 1.0)

        await asyncio.gather(engine(), client())

    with pytest.raises(RuntimeError, match="engine ran 5000 rounds") as caught:
        explore(engine_never_sleeps, schedules=1, strategy="random", seed=0)
    note = "\n".join(caught.value.__notes__)
    assert re.search(r"virtual time had stood at 0 s for the last [\d,]+ steps", note), note
    assert "asyncio.sleep" in note

    async def fails_at_once() -> None:
        await asyncio.sleep(0)
        raise RuntimeError("at once")

    with pytest.raises(RuntimeError, match="at once") as caught:
        explore(fails_at_once, schedules=1, strategy="random", seed=0)
    assert "virtual time had stood" not in "\n".join(caught.value.__notes__)
