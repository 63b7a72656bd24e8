"""Calls out to threads on the controlled loop run at the scheduler's choice (``_gated``): an
explored test whose work runs in ``to_thread``, ``run_in_executor`` or ``anyio.to_thread`` runs
the same way under the same schedule, so a failure it finds replays."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import re
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
import pytest

import kvstress
from kvstress.controlled import run_controlled
from kvstress.schedulers import RandomScheduler

Offload = Callable[[Callable[..., Any]], Coroutine[Any, Any, Any]]


async def _to_thread(fn: Callable[..., Any]) -> Any:
    return await asyncio.to_thread(fn)


async def _executor(fn: Callable[..., Any]) -> Any:
    return await asyncio.get_running_loop().run_in_executor(None, fn)


async def _anyio(fn: Callable[..., Any]) -> Any:
    return await anyio.to_thread.run_sync(fn)


OFFLOADS = {"to_thread": _to_thread, "executor": _executor, "anyio": _anyio}


def _interleaving(offload: Offload, seed: int) -> tuple[str, ...]:
    """Three tasks that each hand three calls to threads; each call and each step logs itself."""
    log: list[str] = []

    async def client(i: int) -> None:
        for k in range(3):
            log.append(f"task {i}.{k}")
            await offload(lambda i=i, k=k: log.append(f"thread {i}.{k}"))  # type: ignore[misc]

    async def main() -> None:
        async with anyio.create_task_group() as group:
            for i in range(3):
                group.start_soon(client, i)

    run_controlled(main, RandomScheduler(seed))
    return tuple(log)


@pytest.mark.parametrize("offload", sorted(OFFLOADS))
def test_work_in_threads_runs_where_the_schedule_puts_it(offload: str) -> None:
    """The same seed, the same order of the threads' work among the tasks' steps, every run;
    other seeds, other orders (the threads' work is the scheduler's to place)."""
    orders = {seed: {_interleaving(OFFLOADS[offload], seed) for _ in range(4)} for seed in range(4)}
    assert all(len(runs) == 1 for runs in orders.values()), orders
    assert len({runs.pop() for runs in orders.values()}) > 1


def test_a_call_waiting_behind_a_full_executor_still_runs() -> None:
    """A call is handed to its executor only when its turn comes, so calls waiting for their
    turn never hold an executor's only worker."""
    log: list[int] = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as executor:

        async def main() -> None:
            loop = asyncio.get_running_loop()
            await asyncio.gather(*(loop.run_in_executor(executor, log.append, i) for i in range(4)))

        for seed in range(3):
            log.clear()
            run_controlled(main, RandomScheduler(seed))
            assert sorted(log) == [0, 1, 2, 3]


def test_a_thread_parked_on_what_a_task_does_is_let_run() -> None:
    """Work that waits in its thread for something a task does (a real threading.Event) is set
    loose, and the run goes on: no deadlock, no hang."""

    async def main() -> bool:
        ready = threading.Event()

        async def setter() -> None:
            await asyncio.sleep(0.01)
            ready.set()

        task = asyncio.create_task(setter())
        got = await asyncio.to_thread(ready.wait, 5)
        await task
        return got

    for seed in range(3):
        assert run_controlled(main, RandomScheduler(seed)) is True


def test_a_thread_that_calls_back_into_the_loop_goes_on() -> None:
    """``anyio.from_thread.run`` from the thread hands the loop a call before the work is done:
    the work goes on beside the loop, and its result still comes back."""

    async def back() -> int:
        await asyncio.sleep(0)
        return 2

    async def main() -> int:
        result: int = await anyio.to_thread.run_sync(lambda: anyio.from_thread.run(back) + 3)
        return result

    for seed in range(3):
        assert run_controlled(main, RandomScheduler(seed)) == 5


def _called_back_interleaving(backend: str, api: str, seed: int) -> tuple[str, ...]:
    """Three tasks that each hand three calls to threads; each call asks the loop for something
    halfway (``from_thread.run_sync``, or a progress report it does not wait for) and goes on."""
    import trio
    import trio.from_thread
    import trio.lowlevel
    import trio.to_thread

    from kvstress.controlled import seeded_trio_run

    log: list[str] = []
    posts: dict[str, Callable[[], Callable[..., object]]] = {
        "anyio": lambda: anyio.from_thread.run_sync,
        "trio": lambda: trio.from_thread.run_sync,
        "report": (  # a report the thread does not wait for: the loop's own call
            (lambda: trio.lowlevel.current_trio_token().run_sync_soon)
            if backend == "trio"
            else (lambda: asyncio.get_running_loop().call_soon_threadsafe)
        ),
    }
    post = functools.partial(posts[api](), log.append) if api != "report" else None

    def work(i: int, k: int) -> None:
        log.append(f"thread {i}.{k} begins")
        assert post is not None
        post(f"loop {i}.{k}")
        log.append(f"thread {i}.{k} ends")

    async def client(i: int) -> None:
        for k in range(3):
            log.append(f"task {i}.{k}")
            if api == "trio":
                await trio.to_thread.run_sync(work, i, k)
            else:
                await anyio.to_thread.run_sync(work, i, k)

    async def main() -> None:
        nonlocal post
        post = post or functools.partial(posts[api](), log.append)  # the run's own, made in it
        async with anyio.create_task_group() as group:
            for i in range(3):
                group.start_soon(client, i)

    if backend == "trio":
        seeded_trio_run(main, seed=seed)
    else:
        run_controlled(main, RandomScheduler(seed))
    return tuple(log)


@pytest.mark.parametrize(
    ("backend", "api"),
    [("asyncio", "anyio"), ("asyncio", "report"), ("trio", "anyio"), ("trio", "trio"), ("trio", "report")],
)
def test_a_thread_that_calls_back_into_the_loop_halfway_goes_on_at_the_schedule_s_choice(
    backend: str, api: str
) -> None:
    """A call whose thread asks the loop for something before it is done waits at its gate
    until the loop has run that, then goes on at the schedule's choice: the same seed, the same
    order every run (it went on loose, in real time: 1-4 orders in 4 runs of a seed before)."""
    orders = {seed: {_called_back_interleaving(backend, api, seed) for _ in range(4)} for seed in range(4)}
    assert all(len(runs) == 1 for runs in orders.values()), orders
    runs = [runs.pop() for runs in orders.values()]
    assert (
        all(
            run.index(f"loop {i}.{k}") < run.index(f"thread {i}.{k} ends")
            for run in runs
            for i in range(3)
            for k in range(3)
        )
        or api == "report"
    )
    assert len(set(runs)) > 1


async def _sleeps_in_a_thread() -> None:
    loop = asyncio.get_running_loop()
    start = loop.time()
    await asyncio.to_thread(lambda: time.sleep(0.25))  # this module's ``time``: the run's clock
    elapsed = loop.time() - start
    assert elapsed == pytest.approx(0.25, abs=1e-9)


def test_a_sleep_in_a_thread_is_on_the_loop_s_clock() -> None:
    """In an explored run, ``time.sleep`` in a thread's work (in a module the run controls) is a
    sleep on virtual time, as ``asyncio.sleep`` is a task's: exactly its length, every run."""
    kvstress.explore(_sleeps_in_a_thread, schedules=5, strategy="random", seed=0)


_counter = {"value": 0}


def _bump() -> None:
    seen = _counter["value"]
    time.sleep(0.001)  # a scheduling point: another call may run meanwhile
    _counter["value"] = seen + 1


async def _lost_update(module: str = "anyio") -> None:
    import trio.to_thread

    # looked up as it is called: the run wraps it (a function taken before is the library's own)
    offload = trio.to_thread.run_sync if module == "trio" else anyio.to_thread.run_sync
    _counter["value"] = 0
    async with anyio.create_task_group() as group:  # on asyncio or trio
        for _ in range(2):
            group.start_soon(offload, _bump)
    assert _counter["value"] == 2, f"lost update: {_counter['value']}"


@pytest.mark.parametrize(("backend", "module"), [("asyncio", "anyio"), ("trio", "trio"), ("trio", "anyio")])
def test_a_race_between_threads_work_is_found_and_replays(backend: str, module: str) -> None:
    """Two calls out to threads that read-modify-write one counter around a sleep: some
    schedule loses an update, and its replay loses it again, every time. On trio too: a
    thread's short sleep moves the clock and its next window comes after the run's next batch
    of steps (each call ran whole after the step that handed it over: no update was ever lost,
    nor a cancelled call's abandoned thread seen writing after its deadline)."""
    fn = functools.partial(_lost_update, module)
    with pytest.raises(BaseException) as found:
        kvstress.explore(fn, schedules=100, strategy="random", seed=0, backend=backend)
    text = str(found.value) + "".join(getattr(found.value, "__notes__", []))
    schedule = re.search(r"ks1:[A-Za-z0-9_-]+", text)
    assert schedule is not None, text
    for _ in range(3):
        with pytest.raises(BaseException) as again:
            kvstress.explore(fn, replay=schedule.group(0), backend=backend)
        assert "lost update: 1" in str(again.value) + "".join(getattr(again.value, "__notes__", []))
        assert "diverged" not in str(again.value)


_ran = threading.Event()


def _sleep_then_set() -> None:
    time.sleep(5)  # the run's clock: the call waits for its turn again, 5 virtual seconds on
    _ran.set()


async def _fails_while_a_thread_sleeps() -> None:
    async with anyio.create_task_group() as group:
        group.start_soon(lambda: anyio.to_thread.run_sync(_sleep_then_set, abandon_on_cancel=True))
        await asyncio.sleep(0.01)
        raise RuntimeError("the test fails first")


def test_work_waiting_for_its_turn_when_the_run_ends_is_let_run() -> None:
    """A call whose thread waits for its turn when the run ends (a failure) is let run: anyio's
    worker does not wait at its gate for ever (the interpreter would join it at exit)."""
    _ran.clear()
    with pytest.raises(BaseExceptionGroup):
        kvstress.explore(_fails_while_a_thread_sleeps, schedules=1, strategy="random", seed=0)
    assert _ran.wait(5)


def _trio_interleaving(offload: str, seed: int) -> tuple[str, ...]:
    """As ``_interleaving``, on trio: ``trio.to_thread.run_sync`` or anyio's on trio."""
    import trio
    import trio.to_thread

    from kvstress.controlled import seeded_trio_run

    log: list[str] = []
    module = trio.to_thread if offload == "trio" else anyio.to_thread

    async def client(i: int) -> None:
        for k in range(3):
            log.append(f"task {i}.{k}")
            await module.run_sync(lambda i=i, k=k: log.append(f"thread {i}.{k}"))  # type: ignore[misc]

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            for i in range(3):
                nursery.start_soon(client, i)

    seeded_trio_run(main, seed=seed)
    return tuple(log)


@pytest.mark.parametrize("offload", ["trio", "anyio"])
def test_work_in_threads_on_trio_runs_at_the_same_point_for_a_seed(offload: str) -> None:
    """On trio (no per-step choice) a call runs right after the step that hands it over: the
    same seed, the same order of the threads' work among the steps, every run."""
    orders = {seed: {_trio_interleaving(offload, seed) for _ in range(4)} for seed in range(4)}
    assert all(len(runs) == 1 for runs in orders.values()), orders
    assert len({runs.pop() for runs in orders.values()}) > 1


_never = threading.Event()


def _waits_in_a_thread(seconds: float) -> Callable[[], Coroutine[Any, Any, None]]:
    async def fn() -> None:
        start = anyio.current_time()
        assert not await anyio.to_thread.run_sync(_never.wait, seconds)
        waited = anyio.current_time() - start
        assert waited >= seconds, f"a {seconds} s wait in a thread moved the run's clock {waited:.6f} s"

    return fn


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
@pytest.mark.parametrize("seconds", [0.0005, 0.002])
def test_a_short_real_wait_in_a_thread_takes_its_time_on_the_run_s_clock(
    backend: str, seconds: float
) -> None:
    """A real timed wait in a thread, over before the thread would be set loose, moves the run's
    clock as long (a pool's 0.5 ms wait in a worker answered None after 0 s of virtual time: a
    false timeout-early, a blind user's correct pool)."""
    kvstress.explore(_waits_in_a_thread(seconds), schedules=10, strategy="random", seed=0, backend=backend)


async def _one_worker_three_sleepers() -> None:
    loop = asyncio.get_running_loop()
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as executor:
        start = loop.time()
        await asyncio.gather(*(loop.run_in_executor(executor, time.sleep, 0.01) for _ in range(3)))
        took = loop.time() - start
    assert took == pytest.approx(0.03, abs=1e-9), took


def test_calls_waiting_for_a_worker_held_by_a_sleeping_call_still_run_in_turn() -> None:
    """An executor's only worker is held by a call asleep in its window: the next call cannot
    begin, and waits (not ready) until the first is done, its thread at its gate; every sleep
    stays on the run's clock (each such call was set loose after a second of real time, its
    sleep then real)."""
    kvstress.explore(_one_worker_three_sleepers, schedules=5, strategy="random", seed=0)


async def _executor_closed_while_calls_wait() -> None:
    loop = asyncio.get_running_loop()
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as executor:
        calls = [loop.run_in_executor(executor, time.sleep, 0.01) for _ in range(2)]
        await asyncio.sleep(0)  # the calls may have begun, and be asleep in their windows
        # The ``with`` block ends on the loop's thread: shutdown(wait=True) joins the workers.
    await asyncio.gather(*calls)


def test_a_loop_blocked_joining_the_workers_of_waiting_calls_does_not_hang() -> None:
    """The loop's thread blocks in the code's own call (an executor's shutdown as its ``with``
    block ends) while calls of that executor wait for their turn: they let themselves loose
    after a second, and the run ends (it hung: the loop could not give them their turn)."""
    kvstress.explore(_executor_closed_while_calls_wait, schedules=3, strategy="random", seed=0)


@pytest.mark.skipif(not hasattr(__import__("resource"), "RUSAGE_THREAD"), reason="Linux's per-thread counts")
def test_real_time_a_thread_never_blocked_in_is_not_a_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    """Real time that runs ahead of a thread's CPU time while it never blocks (a virtual
    machine's CPU taken by its host) is no real timed wait: it moved a correct program's
    virtual time in 1% of a busy machine's windows. A wait that blocks still counts."""
    from kvstress.controlled import _gated

    segment = _gated._Segment()
    real = time.perf_counter
    monkeypatch.setattr(_gated.time, "perf_counter", lambda: real() + 0.005)  # 5 ms gone
    wall, slept = segment.end()
    monkeypatch.undo()
    assert wall >= 0.005
    assert slept == 0.0
    segment = _gated._Segment()
    threading.Event().wait(0.002)
    wall, slept = segment.end()
    assert slept >= 0.001, (wall, slept)


def test_a_call_whose_thread_is_late_on_trio_keeps_the_run_s_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """On trio a call whose thread has not begun when its window opens (a loaded machine: 50 ms)
    runs loose, the clock following real time from then on: it jumped by the machine's uptime
    (the window's start, never set, taken as 0), and a correct pool's run hung at its deadline."""
    import trio
    import trio.to_thread

    from kvstress.controlled import _gated, seeded_trio_run

    monkeypatch.setattr(_gated, "ARRIVAL_S", 0.0)  # no thread is in time

    async def calls() -> float:
        for _ in range(3):
            await trio.to_thread.run_sync(lambda: None)
        return trio.current_time()

    assert seeded_trio_run(calls, seed=0) < 1.0


def test_the_loop_s_own_looks_are_not_a_thread_s_real_wait() -> None:
    """A window's sleep that the loop's thread may have caused (it held the interpreter lock
    while looking at the thread, its CPU taken by a loaded machine: 7.7 ms seen, and a correct
    program's dfs diverged) moves no virtual time, unless the thread waited with a timeout."""
    from kvstress.controlled._gated import GatedWork

    work = GatedWork(None, "call")
    work.ran_for, work.slept, work.held = 0.008, 0.0077, 0.0076
    assert work.credit() == 0.0
    work.waited = True  # a Condition, Event, Semaphore, Queue or Future wait with a timeout
    assert work.credit() == 0.008
    work.waited, work.held = False, 0.0
    assert work.credit() == 0.008  # an unseen real wait (a C-level one), the loop quiet meanwhile


async def _published_before_finished(module: str) -> None:
    import trio.from_thread
    import trio.to_thread

    published: list[list[int]] = []
    seen: list[int] = []

    def work() -> None:  # the bug: hands its result to the loop, then finishes it
        data = [1]
        if module == "trio":
            trio.from_thread.run_sync(published.append, data)
        else:
            anyio.from_thread.run_sync(published.append, data)
        data[0] = 0

    async def reader() -> None:
        for _ in range(20):
            if published:
                seen.append(published[0][0])
                return
            await anyio.sleep(0)

    offload = trio.to_thread.run_sync if module == "trio" else anyio.to_thread.run_sync
    async with anyio.create_task_group() as group:
        group.start_soon(offload, work)
        group.start_soon(reader)
    assert seen == [0], "read what the thread published before it was finished"


@pytest.mark.parametrize("module", ["trio", "anyio"])
def test_a_thread_going_on_after_its_callback_on_trio_is_caught_and_replays(module: str) -> None:
    """On trio a thread that publishes something with ``from_thread.run_sync`` and then finishes
    it goes on in some runs only after the steps runnable meanwhile (a batch or two, drawn from
    the seed): a reader sees it unfinished, and the replay sees it again (the thread went on
    right after the step with its answer, every run: a blind user's offer-before-zero pool was
    never caught on trio)."""
    fn = functools.partial(_published_before_finished, module)
    with pytest.raises(BaseException) as found:
        kvstress.explore(fn, schedules=50, strategy="random", seed=0, backend="trio")
    text = str(found.value) + "".join(getattr(found.value, "__notes__", []))
    schedule = re.search(r"ks1:[A-Za-z0-9_-]+", text)
    assert schedule is not None, text
    for _ in range(3):
        with pytest.raises(BaseException) as again:
            kvstress.explore(fn, replay=schedule.group(0), backend="trio")
        assert "before it was finished" in str(again.value) + "".join(getattr(again.value, "__notes__", []))


_held = threading.Lock()


def _wake(log: list[str]) -> None:
    with _held:  # the loop's callback takes the lock its thread held as it posted
        log.append("woke")


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_thread_posting_while_holding_what_the_callback_needs_goes_loose(backend: str) -> None:
    """A fire-and-forget post made holding a lock the posted callback takes (a correct pool's
    wake-up under its own lock) blocks the loop in that callback while the thread waits for its
    next turn: the thread lets itself loose and the run goes on (on trio it waited for ever;
    counted out late, the idle run then jumped its clock an hour)."""
    import trio
    import trio.lowlevel
    import trio.to_thread

    log: list[str] = []

    async def run() -> None:
        if backend == "trio":
            post: Callable[..., object] = trio.lowlevel.current_trio_token().run_sync_soon
            offload: Callable[..., Any] = trio.to_thread.run_sync
        else:
            post, offload = asyncio.get_running_loop().call_soon_threadsafe, anyio.to_thread.run_sync

        def work() -> None:
            with _held:
                post(_wake, log)
                log.append("posted")

        await offload(work)
        await anyio.sleep(0.001)

    kvstress.explore(run, schedules=5, strategy="random", seed=0, backend=backend)
    assert log.count("woke") == log.count("posted") == 5


def _sleep_holding(count: dict[str, int]) -> None:
    with _held:
        time.sleep(0.001)  # this module's: a scheduling point, the lock held
        count["n"] += 1


def test_a_trio_thread_asleep_holding_a_lock_a_task_takes_goes_loose() -> None:
    """On trio a thread's short sleep lets the run take its next steps first; one made holding
    a lock that a task then takes on the run's thread blocks the run in that step, and the
    thread's next window never came (a hang): the thread lets itself loose after a second."""
    import trio
    import trio.to_thread

    count = {"n": 0}

    async def taker() -> None:
        await trio.sleep(0)
        with _held:
            count["n"] += 1

    async def run() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: trio.to_thread.run_sync(_sleep_holding, count))
            nursery.start_soon(taker)

    kvstress.explore(run, schedules=4, strategy="random", seed=0, backend="trio")
    assert count["n"] == 8
