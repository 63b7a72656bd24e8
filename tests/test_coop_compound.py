"""Barrier and Timer on the baton: the standard library's semantics, on virtual time."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from kvstress.controlled import run_threads
from kvstress.schedulers import RandomScheduler


def run(main: Callable[[], Any], seed: int = 0) -> Any:
    """``main()`` as one controlled execution with this module traced and patched."""
    return run_threads(main, RandomScheduler(seed=seed), modules=[__name__])


def start_all(*targets: Callable[[], object]) -> list[threading.Thread]:
    """Start a thread per target; join them all; the threads."""
    threads = [threading.Thread(target=target) for target in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return threads


@pytest.mark.parametrize("seed", range(10))
def test_a_barrier_lets_a_full_round_through_with_distinct_indexes(seed: int) -> None:
    """Three threads meet twice; each round hands out 0, 1 and 2, and the action runs once a round."""

    def main() -> tuple[list[int], list[str], list[str]]:
        indexes: list[int] = []
        events: list[str] = []
        actions: list[str] = []
        barrier = threading.Barrier(3, action=lambda: actions.append(f"after {len(events)}"))

        def party(name: str) -> None:
            for round_ in (1, 2):
                events.append(f"{name}{round_}")
                indexes.append(barrier.wait())

        start_all(*(lambda name=name: party(name) for name in "abc"))
        return indexes, events, actions

    indexes, events, actions = run(main, seed)
    assert sorted(indexes) == [0, 0, 1, 1, 2, 2]
    assert sorted(events[:3]) == ["a1", "b1", "c1"]  # nobody starts round 2 before round 1 fills
    assert actions[0] == "after 3" and len(actions) == 2


def test_a_barrier_wait_that_times_out_breaks_it_for_everyone() -> None:
    """One party short: the wait times out on virtual time, and the barrier is broken."""

    def main() -> tuple[list[str], float, bool]:
        barrier = threading.Barrier(3)
        outcomes: list[str] = []
        start = time.monotonic()

        def party() -> None:
            try:
                barrier.wait(timeout=5)
                outcomes.append("through")
            except threading.BrokenBarrierError:
                outcomes.append("broken")

        start_all(party, party)
        return outcomes, time.monotonic() - start, barrier.broken

    outcomes, waited, broken = run(main)
    assert outcomes == ["broken", "broken"] and waited == pytest.approx(5) and broken


def test_abort_and_reset() -> None:
    """abort breaks the waiters; reset makes the barrier whole again."""

    def main() -> tuple[list[str], int, bool]:
        barrier = threading.Barrier(2)
        outcomes: list[str] = []

        def waiter() -> None:
            try:
                barrier.wait()
            except threading.BrokenBarrierError:
                outcomes.append("broken")

        def aborter() -> None:
            time.sleep(1)
            barrier.abort()

        start_all(waiter, aborter)
        barrier.reset()
        start_all(waiter, waiter)  # a full round after the reset goes through
        return outcomes, barrier.n_waiting, barrier.broken

    assert run(main) == (["broken"], 0, False)


def test_a_timer_fires_after_its_interval_unless_cancelled() -> None:
    """A Timer calls its function after the interval, on virtual time; a cancelled one never does."""

    def main() -> list[tuple[str, float]]:
        fired: list[tuple[str, float]] = []
        start = time.monotonic()
        kept = threading.Timer(30, lambda: fired.append(("kept", time.monotonic() - start)))
        dropped = threading.Timer(10, lambda: fired.append(("dropped", time.monotonic() - start)))
        kept.start()
        dropped.start()
        time.sleep(1)
        dropped.cancel()
        kept.join()
        dropped.join()
        return fired

    assert run(main) == [("kept", pytest.approx(30))]
