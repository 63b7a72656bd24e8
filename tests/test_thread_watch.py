"""``ThreadWatch``: when an idle controlled loop takes a thread of the code's own for parked.

A thread that has run is at work until it has taken no CPU time for ``STILL_S`` while the loop's
thread waited without the interpreter lock. Looks with the loop's steps between them do not
count: a thread waiting for the interpreter lock takes no CPU time then either, and was taken for
parked with its work in hand (a correct pool's reset thread: a lost wake-up in a CI run).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from kvstress.controlled import _foreign
from kvstress.controlled._foreign import STARVED_CAP, STILL_S, ThreadWatch, watching_possible


@pytest.fixture
def watched() -> Iterator[tuple[ThreadWatch, threading.Thread]]:
    """A watch, and a thread started after it (parked on an event until the test ends)."""
    watch = ThreadWatch()
    done = threading.Event()
    thread = threading.Thread(target=done.wait, name="own", daemon=True)
    thread.start()
    watch._enabled = True  # scripted samples below: no /proc needed
    watch.look_for_new()
    try:
        yield watch, thread
    finally:
        done.set()
        thread.join()


class _Kernel:
    """What the kernel shows of the watched thread, (state, CPU ns so far), and the watch's real
    clock, both as the test sets them: no sleep, so a loaded machine cannot stretch a wait."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.state, self.ran, self.queued, self.now = b"S", 0, 0, 1000.0
        monkeypatch.setattr(_foreign, "_sample", lambda native_id: (self.state[0], self.ran, self.queued))
        monkeypatch.setattr(
            _foreign, "time", SimpleNamespace(perf_counter=lambda: self.now, sleep=lambda seconds: None)
        )

    def shows(self, state: bytes, ran: int) -> None:
        self.state, self.ran = state, ran

    def waits(self, watch: ThreadWatch, seconds: float, looks: int = 10) -> bool:
        """Looks while the loop's thread waits ``seconds`` (the interpreter lock free)."""
        busy = True
        for _ in range(looks):
            self.now += seconds / looks
            busy = watch.at_work(first=False)
        return busy


def test_a_thread_starved_of_the_interpreter_lock_is_not_taken_for_parked(
    watched: tuple[ThreadWatch, threading.Thread], monkeypatch: pytest.MonkeyPatch
) -> None:
    """It ran (woken with work), then sleeps waiting for the lock while the loop runs steps:
    the same CPU time at every look with steps between them. Before, the second such look found
    it parked (the lock went to another thread in the 50 us the loop let it go)."""
    watch, _ = watched
    kernel = _Kernel(monkeypatch)
    kernel.shows(b"S", 100)
    assert watch.at_work()  # first seen: it has run
    assert not kernel.waits(watch, 2 * STILL_S)  # parked, after a still wait
    assert not watch.at_work()  # and stays so, at no cost, while it does not run
    # Woken with work, it ran a little and now waits for the lock: steps run between the looks.
    kernel.shows(b"S", 250)
    assert watch.at_work()
    for _ in range(5):
        assert watch.at_work(), "a thread that ran since it was found parked is at work"
    assert not kernel.waits(watch, 2 * STILL_S)


def test_a_thread_that_runs_during_the_wait_starts_its_stillness_again(
    watched: tuple[ThreadWatch, threading.Thread], monkeypatch: pytest.MonkeyPatch
) -> None:
    watch, _ = watched
    kernel = _Kernel(monkeypatch)
    kernel.shows(b"S", 1)
    assert watch.at_work()
    kernel.now += STILL_S / 4
    assert watch.at_work(first=False)  # still, but not for long enough yet
    kernel.shows(b"S", 2)
    kernel.now += STILL_S / 4
    assert watch.at_work(first=False)  # ran since the last look
    kernel.shows(b"R", 2)
    kernel.now += STILL_S / 4
    assert watch.at_work(first=False)  # running
    kernel.now += STILL_S
    assert watch.at_work(first=False)  # still running: its stillness counts from a look that finds it asleep
    kernel.shows(b"S", 3)
    assert not kernel.waits(watch, 2 * STILL_S)


def test_stillness_counts_only_the_loops_waits(
    watched: tuple[ThreadWatch, threading.Thread], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real time between looks with steps between them (``first``) never adds up to parked."""
    watch, _ = watched
    kernel = _Kernel(monkeypatch)
    kernel.shows(b"S", 7)
    assert watch.at_work()
    kernel.now += 2 * STILL_S
    assert watch.at_work(), "time the loop's thread ran steps in is not stillness"
    assert not kernel.waits(watch, 2 * STILL_S)


@pytest.mark.skipif(not watching_possible(), reason="threads' states are read from /proc")
def test_a_real_thread_parks_on_its_queue_and_is_at_work_with_a_job() -> None:
    watch = ThreadWatch()
    jobs: queue.Queue[int | None] = queue.Queue()
    done: queue.Queue[int] = queue.Queue()

    def worker() -> None:
        while (job := jobs.get()) is not None:
            done.put(sum(range(job)))

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    try:
        watch.look_for_new()
        assert watch.at_work()  # started: it has run
        deadline = time.perf_counter() + 5
        while watch.at_work(first=False):
            assert time.perf_counter() < deadline, "a thread parked on its queue never read as parked"
            time.sleep(STILL_S / 5)
        jobs.put(10)
        done.get(timeout=5)
        assert watch.at_work(), "it ran the job since it was found parked"
    finally:
        jobs.put(None)
        thread.join()


def test_a_thread_at_work_at_every_look_past_the_limit_is_let_be(
    watched: tuple[ThreadWatch, threading.Thread], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``at_work_within``: a thread that spins for the pool's whole life holds an idle run up for
    the limit once, then is watched no more; one that parks in between starts the limit again."""
    watch, _ = watched
    kernel = _Kernel(monkeypatch)
    kernel.shows(b"R", 1)
    assert watch.at_work_within(1.0)
    kernel.now += 0.9
    assert watch.at_work_within(1.0, first=False)
    kernel.shows(b"S", 1)
    kernel.now += 0.05
    assert not kernel.waits(watch, 2 * STILL_S)
    assert not watch.at_work_within(1.0, first=False)  # parked: the limit counts again from here
    kernel.shows(b"R", 2)
    assert watch.at_work_within(1.0, first=False)
    kernel.now += 0.9
    assert watch.at_work_within(1.0, first=False), "0.9 s since it was last found parked"
    watch.restart()
    kernel.now += 0.9
    assert watch.at_work_within(1.0, first=False), "a new wait of the host's gets the whole limit"
    kernel.now += 1.1
    assert not watch.at_work_within(1.0, first=False)
    assert not watch and not watch.at_work(), "let be: no longer watched"


def test_time_a_thread_at_work_waits_for_a_core_does_not_count_toward_the_limit(
    watched: tuple[ThreadWatch, threading.Thread], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runnable but starved of a core (a loaded machine), a reset thread with a block in hand is
    waited for past the limit: it was let be, and its correct pool reported ``lost-block``. Up
    to ``STARVED_CAP`` times the limit of real time, so that the wait still ends."""
    watch, _ = watched
    kernel = _Kernel(monkeypatch)
    kernel.shows(b"R", 1)
    assert watch.at_work_within(1.0)
    for _ in range(int(STARVED_CAP) * 2 - 1):
        kernel.now += 0.5
        kernel.queued += int(0.45e9)  # 0.45 s of each 0.5 s on a run queue
        assert watch.at_work_within(1.0, first=False)
    kernel.now += 0.6
    kernel.queued += int(0.6e9)
    assert not watch.at_work_within(1.0, first=False), "past the cap"
    assert not watch
