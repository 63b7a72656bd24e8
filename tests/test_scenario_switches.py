"""Switch points: where each worker was paused at every hand-over of a failing controlled run."""

from __future__ import annotations

import linecache
import threading
import time

import pytest
from hint_log import HandOverLog

from kvstress.controlled import run_threads
from kvstress.fuzz._slices import scenario_config
from kvstress.fuzz._target import load_target
from kvstress.scenarios import ScenarioConfig, replay, search
from kvstress.scenarios._switches import Switch, record_switches, switch_fields
from kvstress.schedulers import PCTScheduler, RandomScheduler


class _InOrderPCT(PCTScheduler):
    """PCT whose timers never fire early: the failures these tests read are of that shape."""

    timer_level = 0


def _failure_of(spec: str) -> tuple[ScenarioConfig, object]:
    target = load_target(spec, num_blocks=2, block_shape=(2, 4), backend="asyncio")
    config = scenario_config(target)
    result = search(config, _InOrderPCT(depth=3, seed=1), max_executions=200, budget_s=30)
    assert result.failure is not None
    return config, result.failure


@pytest.mark.parametrize(
    ("spec", "module", "line"),
    [
        ("kvstress.mutants:ResetAfterOfferPool", "_mutants_condvar.py", "if returned:"),
        ("kvstress.mutants:AsyncResetAfterOfferPool", "_mutants_async.py", "checkpoint()"),
    ],
)
def test_the_bugs_line_is_a_switch_point(spec: str, module: str, line: str) -> None:
    """A release that hands the block back before scrubbing it is paused at the mutant's own line."""
    _, failure = _failure_of(spec)
    points = failure.switch_points  # type: ignore[attr-defined]
    assert points
    in_release = [
        s for s in points if s.operation and s.operation.startswith("release(") and s.file == module
    ]
    assert in_release and line in (in_release[-1].source or "")
    assert f"paused at `{module}:" in failure.table()  # type: ignore[attr-defined]


def test_recorded_source_is_the_line_at_that_file_and_number() -> None:
    """Each located switch's source text is the file's own line, and the worker is a scenario worker."""
    _, failure = _failure_of("kvstress.mutants:ResetAfterOfferPool")
    for switch in failure.switch_points:  # type: ignore[attr-defined]
        assert switch.worker in failure.scenario.workers  # type: ignore[attr-defined]
        if switch.file is not None:
            assert switch.source and switch.line and switch.source in _any_line(switch.file, switch.line)


def _any_line(basename: str, line: int) -> str:
    import kvstress.mutants._condvar_pool as a
    import kvstress.mutants._mutants_condvar as b

    for module in (a, b):
        if module.__file__ and module.__file__.endswith(basename):
            return linecache.getline(module.__file__, line)
    return ""


def test_recording_does_not_change_the_run() -> None:
    """Recording replays the schedule exactly: same failure, same history, and it is repeatable."""
    config, failure = _failure_of("kvstress.mutants:ResetAfterOfferPool")
    again = replay(config, failure.schedule)  # type: ignore[attr-defined]
    assert again is not None
    assert again.violation.invariant == failure.violation.invariant  # type: ignore[attr-defined]
    assert again.history == failure.history  # type: ignore[attr-defined]
    assert record_switches(config, failure.schedule) == failure.switch_points  # type: ignore[attr-defined]


def test_a_switch_reads_as_lincheck_does() -> None:
    """The line names the worker, the operation, file:line and the source line."""
    switch = Switch("b2", "b1", "release(1)", 7, "mypools.py", 57, "self._free.append(blk)")
    assert switch.describe() == (
        "b2 in `release(1)`, paused at `mypools.py:57`: `self._free.append(blk)`; b1 runs next"
    )
    assert Switch.from_dict(switch.to_dict()) == switch


def test_reports_without_switch_points_say_why() -> None:
    """trio, stress and machine reports carry a note instead of an empty list."""
    assert "trio" in switch_fields("scenario", "trio", None)["switches_note"]
    assert "free-running" in switch_fields("stress", None, None)["switches_note"]
    assert "state machine" in switch_fields("machine", None, None)["switches_note"]
    found = switch_fields("scenario", None, (Switch("b0", "b1", None, None, "p.py", 3, "x = 1"),))
    assert found["switches_note"] is None and found["switches"][0]["line"] == 3


def test_the_harness_thread_is_named_as_such() -> None:
    """Hand-overs to thread 0 (which starts the workers) name it the harness, not a bare 'main'."""
    _, failure = _failure_of("kvstress.mutants:ResetAfterOfferPool")
    names = {s.to for s in failure.switch_points} | {s.worker for s in failure.switch_points}  # type: ignore[attr-defined]
    assert "main" not in names and "the harness" in names


def _holder_and_waiter() -> None:
    lock = threading.Lock()

    def holder() -> None:
        with lock:
            time.sleep(0)  # a scheduling point with the lock held

    def waiter() -> None:
        with lock:
            pass

    threads = [threading.Thread(target=holder, name="holder"), threading.Thread(target=waiter, name="waiter")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def test_a_thread_that_blocks_is_a_switch_point_too() -> None:
    """A hand-over no scheduler chose (the running thread blocked on a lock another holds, and
    that one alone could run) is listed, as ``blocked at`` its line: a blind user read a report
    whose race window, a thread blocked inside its scan, was missing from the switch points."""
    files = frozenset({__file__})
    blocked: list[Switch] = []
    unasked: list[Switch] = []
    for seed in range(20):
        scheduler = RandomScheduler(seed=seed)
        run_threads(_holder_and_waiter, scheduler, modules=[__name__])
        # in_flight: a C function, not a lambda of this module, whose lines the run traces
        recorder = HandOverLog(scheduler.schedule(), files, {}.get)
        run_threads(_holder_and_waiter, recorder, modules=[__name__])
        unasked += recorder.unasked
        blocked += [switch for switch in recorder.switches if switch.blocked]
    on_lock = [switch for switch in blocked if switch.worker == "waiter"]
    assert on_lock, "no run had the waiter block on the holder's lock"
    for switch in on_lock:
        assert switch.source == "with lock:" and switch.to in ("holder", "the harness")
        assert "blocked at" in switch.describe() and Switch.from_dict(switch.to_dict()) == switch
    assert {switch.source for switch in blocked} <= {"with lock:", "thread.join()"}
    # and where one other thread alone could run, no scheduler was asked: the baton told the
    # recorder (handed_over), the harness blocked in a join say
    assert unasked and all(switch.blocked and switch in blocked for switch in unasked)


async def _awaiting_task() -> None:
    import asyncio

    gate = asyncio.Event()

    async def waiter() -> None:
        await gate.wait()

    async def opener() -> None:
        gate.set()

    task = asyncio.get_running_loop().create_task(waiter(), name="waiter")
    await asyncio.sleep(0)
    await opener()
    await task


def test_a_task_that_awaits_is_a_switch_point_too() -> None:
    """On the controlled loop, a task that awaits while one other lane alone can run is a
    hand-over no scheduler chose: it is told to the recorder (``handed_over``) and listed as
    ``blocked at`` its line. A blind tester's asyncio reports said "switch points: none" while
    the table showed a waiter suspended at ``await fut`` inside acquire."""
    from kvstress.controlled import run_controlled

    files = frozenset({__file__})
    scheduler = RandomScheduler(seed=0)
    run_controlled(_awaiting_task, scheduler)
    recorder = HandOverLog(scheduler.schedule(), files, {}.get)
    run_controlled(_awaiting_task, recorder)
    assert recorder.unasked, "no hand-over was told"
    waiting = [switch for switch in recorder.unasked if switch.worker == "waiter"]
    assert waiting and all(switch.blocked and switch.source == "await gate.wait()" for switch in waiting)
