"""A controlled thread's trace hook beside the one a tool set there first (coverage's).

Under ``pytest --cov`` on Python 3.11 coverage sets its tracer in every new thread; the baton's
hook put it out, and the lines an explored test ran in its controlled threads read as never run.
Both run now, and the search still finds what it found without the tool.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import pytest

import kvstress
from kvstress.controlled._chain import beside


class Counter:
    def __init__(self) -> None:
        self.count = 0

    def bump(self) -> None:
        count = self.count  # a read-modify-write without a lock (the bug)
        self.count = count + 1


class LockedCounter(Counter):
    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()

    def bump(self) -> None:
        with self.lock:
            super().bump()


def bump_twice(counter: Counter) -> None:
    threads = [threading.Thread(target=counter.bump) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert counter.count == 2


class LineTool:
    """A tool's tracer, set in every new thread, as coverage's is: it records the lines run and,
    called at a call, makes itself the thread's hook again, as coverage's C tracer does."""

    def __init__(self) -> None:
        self.lines: set[tuple[str, int]] = set()

    def __call__(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event == "call":
            sys.settrace(self)
        elif event == "line":
            self.lines.add((frame.f_code.co_name, frame.f_lineno))
        return self


@contextmanager
def tool_in_new_threads() -> Iterator[LineTool]:
    tool = LineTool()
    threading.settrace(tool)
    try:
        yield tool
    finally:
        threading.settrace(None)  # type: ignore[arg-type]


def _bump_lines() -> set[tuple[str, int]]:
    first = Counter.bump.__code__.co_firstlineno
    return {("bump", first + 1), ("bump", first + 2)}


def test_the_tool_sees_the_lines_run_in_controlled_threads_and_the_race_is_still_found() -> None:
    with tool_in_new_threads() as tool, pytest.raises(AssertionError, match="schedule"):
        kvstress.explore(lambda: bump_twice(Counter()), schedules=300, strategy="random", seed=1)
    assert _bump_lines() <= tool.lines


def test_a_correct_counter_beside_the_tool_passes_and_is_measured() -> None:
    with tool_in_new_threads() as tool:
        explored = kvstress.explore(
            lambda: bump_twice(LockedCounter()), schedules=50, strategy="random", seed=1
        )
    assert explored.schedules == 50
    assert _bump_lines() <= tool.lines


def test_beside_nothing_is_the_hook_itself() -> None:
    def hook(frame: FrameType, event: str, arg: Any) -> None:
        return None

    assert beside(hook, None) is hook


def test_coverage_measures_the_lines_an_explored_test_ran_in_its_threads() -> None:
    coverage = pytest.importorskip("coverage")
    measured = coverage.Coverage(data_file=None, branch=False)
    measured.start()
    try:
        explored = kvstress.explore(
            lambda: bump_twice(LockedCounter()), schedules=5, strategy="random", seed=1
        )
    finally:
        measured.stop()
    assert explored.schedules == 5
    ran = set(measured.get_data().lines(__file__) or ())
    assert {line for _, line in _bump_lines()} <= ran
