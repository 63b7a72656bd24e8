"""Seeded trio runs: same seed, same interleaving, same failure; virtual time; state restored."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import trio
import trio.lowlevel

from kvstress.controlled import TaskStepTrace, seeded_trio_run
from kvstress.controlled import _trio as controlled_trio
from kvstress.controlled._loop import CREEP_AFTER

assert controlled_trio._runs_repeat(), (
    f"trio {trio.__version__} runs do not repeat under Hypothesis: trio's scheduling RNG is no "
    "longer registered with it (kvstress.controlled._trio's docstring says how it is used)"
)


async def racers(log: list[str]) -> None:
    """Six tasks that sleep to the same deadlines and checkpoint; ``log`` gets each step."""

    async def racer(name: str) -> None:
        for step in range(3):
            await trio.sleep(1)
            log.append(f"{name}{step}")
            await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        for index in range(6):
            nursery.start_soon(racer, f"r{index}", name=f"r{index}")


class MissedHandoff(AssertionError):
    """The consumer looked for the item before the producer had put it there."""


async def handoff() -> str:
    """A producer and a consumer wake at the same deadline; the consumer assumes it runs second."""
    shelf: list[str] = []

    async def producer() -> None:
        await trio.sleep(1)
        shelf.append("item")

    async def consumer() -> None:
        await trio.sleep(1)
        if not shelf:
            raise MissedHandoff("the consumer ran first and found the shelf empty")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(producer, name="producer")
        nursery.start_soon(consumer, name="consumer")
    return shelf[0]


def outcome(seed: int) -> str:
    """'passed', or the MissedHandoff message, of one seeded run of ``handoff``."""
    try:
        seeded_trio_run(handoff, seed=seed)
    except ExceptionGroup as group:
        matched, _ = group.split(MissedHandoff)
        assert matched is not None, group
        return str(matched.exceptions[0])
    return "passed"


def traced(seed: int) -> tuple[list[str], list[str]]:
    """One seeded run of ``racers``: the tasks' logged steps and trio's own step trace."""
    log: list[str] = []
    trace = TaskStepTrace()
    seeded_trio_run(racers, log, seed=seed, instruments=[trace])
    return log, [name for name in trace.steps if name.startswith("r")]


def test_same_seed_same_interleaving() -> None:
    """Ten runs with one seed log the same steps in the same order, down to trio's task steps."""
    runs = {repr(traced(seed=12)) for _ in range(10)}
    assert len(runs) == 1


def test_inside_a_hypothesis_test_the_run_is_seeded_by_it() -> None:
    """Within a running Hypothesis test (no nested @given), a seed gives the order it gives outside."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    outside = traced(seed=12)
    inside: list[object] = []

    @settings(max_examples=3, database=None, deadline=None)
    @given(st.integers())
    def test(_: int) -> None:
        inside.append(traced(seed=12))

    test()
    assert inside == [outside] * 3


def test_a_run_on_another_thread_is_seeded_too() -> None:
    """The harness runs trio on a daemon thread of its own: the seed holds there as well."""
    import threading

    runs: list[object] = []
    threads = [threading.Thread(target=lambda: runs.append(traced(seed=7))) for _ in range(2)]
    for thread in threads:
        thread.start()
        thread.join()
    assert runs == [traced(seed=7)] * 2


def test_the_pool_s_exception_comes_out_as_raised() -> None:
    """A failure inside the run is the pool's exception, with no note from the Hypothesis test around it."""

    async def fails() -> None:
        raise KeyError("the pool's own")

    with pytest.raises(KeyError, match="the pool's own") as caught:
        seeded_trio_run(fails, seed=3)
    assert not getattr(caught.value, "__notes__", None)


def test_different_seeds_give_different_interleavings() -> None:
    """Across ten seeds trio's batch shuffle produces more than one order."""
    assert len({repr(traced(seed)) for seed in range(10)}) > 5


def test_seeds_reach_more_orders_than_the_prelude_s_states() -> None:
    """Every seed steers its own run: four tasks checkpointing in step take more distinct orders
    over 200 seeds than the prelude's ``PRELUDE_ORDERS`` starting states (which capped them at
    64: every explored schedule of a trio test past the 64th was one seen before)."""

    async def in_step(log: list[str]) -> None:
        async def racer(name: str) -> None:
            for _ in range(6):
                log.append(name)
                await trio.lowlevel.checkpoint()

        async with trio.open_nursery() as nursery:
            for index in range(4):
                nursery.start_soon(racer, f"r{index}")

    def order(seed: int) -> str:
        log: list[str] = []
        seeded_trio_run(in_step, log, seed=seed)
        return "".join(log)

    orders = {order(seed) for seed in range(200)}
    assert len(orders) > 2 * controlled_trio.PRELUDE_ORDERS
    assert order(77) == order(77)


def test_the_step_trace_shows_the_code_s_tasks_not_the_steering() -> None:
    """The task that steers a run's batch orders does nothing: the interleaving a trace
    records is the code's own."""
    trace = TaskStepTrace()
    seeded_trio_run(racers, [], seed=5, instruments=[trace])
    assert controlled_trio.STEER_NAME not in trace.steps
    assert {name for name in trace.steps if name.startswith("r")} == {f"r{index}" for index in range(6)}


def test_same_seed_same_failure() -> None:
    """A seed that misses the handoff misses it on every rerun; a passing seed keeps passing."""
    outcomes = {seed: outcome(seed) for seed in range(20)}
    assert set(outcomes.values()) == {"passed", "the consumer ran first and found the shelf empty"}
    for seed, first in outcomes.items():
        assert [outcome(seed) for _ in range(3)] == [first] * 3, seed


def test_virtual_time_by_default() -> None:
    """A seeded run sleeps 30 virtual seconds in a fraction of a real one."""

    async def main() -> float:
        start = trio.current_time()
        await trio.sleep(30)
        return trio.current_time() - start

    began = time.perf_counter()
    assert seeded_trio_run(main, seed=1) == 30.0
    assert time.perf_counter() - began < 0.1


def test_a_wait_recomputed_from_its_start_ends_on_virtual_time() -> None:
    """``timeout - (now - start)`` can leave a wait of 1.4e-17 s (0.05 - (0.3 - 0.25)): its
    deadline rounds to now and fires at once. On a clock that stands still the loop computes
    the same wait for ever (a correct pool reported as a spin, as commons-pool's POOL-422 fix
    was); time that moves a float a step once it stood for ``CREEP_AFTER`` steps ends it, as a
    real clock does."""

    cap = 5 * CREEP_AFTER

    async def recomputing() -> int:
        await trio.sleep(0.25)
        start, rounds = trio.current_time(), 0
        while rounds < cap:
            remaining = 0.05 - (trio.current_time() - start)
            if remaining <= 0:
                break
            rounds += 1
            with trio.move_on_after(remaining):
                await trio.sleep_forever()
        return rounds

    assert seeded_trio_run(recomputing, seed=0) <= CREEP_AFTER + 3
    standing = trio.testing.MockClock(autojump_threshold=0)
    assert seeded_trio_run(recomputing, seed=0, clock=standing) == cap


def test_random_state_is_restored() -> None:
    """Python's global RNG (which Hypothesis seeds around a run too) is as before, even after a failure."""
    import random

    before = random.getstate()
    outcomes = {outcome(seed) for seed in range(10)}
    assert len(outcomes) == 2  # some runs failed
    assert random.getstate() == before


def test_seed_is_validated() -> None:
    """A seed outside [0, 2**64) raises ValueError naming it."""

    async def main() -> None:
        pass

    with pytest.raises(ValueError, match=r"seed must be an int in \[0, 2\*\*64\)"):
        seeded_trio_run(main, seed=-1)


def test_missing_trio_gets_an_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without trio, the asyncio side still imports and the trio helpers say how to get trio."""
    import kvstress.controlled

    monkeypatch.setitem(sys.modules, "trio", None)  # what an uninstalled package looks like
    monkeypatch.delitem(sys.modules, "kvstress.controlled._trio")
    monkeypatch.delattr(kvstress.controlled, "_trio")
    monkeypatch.delattr(kvstress.controlled, "seeded_trio_run", raising=False)
    assert kvstress.controlled.run_controlled is not None
    with pytest.raises(ImportError, match=r"seeded_trio_run needs trio: pip install trio"):
        kvstress.controlled.seeded_trio_run  # noqa: B018
    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        kvstress.controlled.nothing  # type: ignore[attr-defined]  # noqa: B018


def test_runs_that_do_not_repeat_go_on_unseeded_with_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Where the probe finds that runs differ (trio's RNG not registered with Hypothesis), a seeded
    run still runs, and says once, in one line, that it is unseeded."""
    import itertools

    counter = itertools.count()
    monkeypatch.setattr(controlled_trio, "_probe", lambda: [str(next(counter))])
    monkeypatch.setattr(controlled_trio, "_repeatable", None)
    assert outcome(3) in {"passed", "the consumer ran first and found the shelf empty"}
    outcome(4)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "unseeded" in lines[0]


def test_work_in_worker_threads_takes_its_real_time() -> None:
    """While trio.to_thread calls are out (two overlapping), the MockClock does not jump to a
    deadline and runs with real time, as a real clock does: a timeout longer than the work does
    not fire, the calls take their real time (they took none, and a thread that kept a caller's
    0.2 s timeout answered after 0 s: timeout-early, a blind user's), and the clock jumps again,
    and stands still between jumps, once the last is back."""
    import trio.testing
    import trio.to_thread

    async def main() -> tuple[float, float, float, float]:
        clock = trio.lowlevel.current_clock()
        assert isinstance(clock, trio.testing.MockClock)
        start = trio.current_time()
        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(trio.to_thread.run_sync, time.sleep, 0.05)
                nursery.start_soon(trio.to_thread.run_sync, time.sleep, 0.2)
        took = trio.current_time() - start
        await trio.sleep(30)  # the clock jumps again
        return took, trio.current_time() - start - took, clock.autojump_threshold, clock.rate

    for seed in range(3):
        took, then, threshold, rate = seeded_trio_run(main, seed=seed)
        assert 0.2 <= took < 5 and abs(then - 30.0) < 1e-9 and threshold == 0.0 and rate == 0.0, (took, then)


def test_seeded_runs_cost_the_same_where_ci_is_set() -> None:
    """Hypothesis loads its "ci" profile wherever CI is set, and a derandomized test hashes its
    own source at every call: each seeded trio run (every trio execution of the harness) paid
    0.17 s for it, 25 times its own cost. The one-example test that seeds trio's RNG sets its
    own settings whatever profile is loaded, so no run reads any source."""
    script = (
        "import inspect, trio\n"
        "from hypothesis import settings\n"
        # as Hypothesis' own "ci" profile does, on releases that load it where CI is set
        "settings.register_profile('like-ci', derandomize=True)\n"
        "settings.load_profile('like-ci')\n"
        "from kvstress.controlled._trio import seeded_trio_run\n"
        "calls = []\n"
        "real = inspect.getsource\n"
        "inspect.getsource = lambda *a, **k: calls.append(a) or real(*a, **k)\n"
        "for seed in range(3):\n"
        "    seeded_trio_run(trio.lowlevel.checkpoint, seed=seed)\n"
        "print(len(calls))\n"
    )
    env = {**os.environ, "CI": "true"}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0", done.stdout
