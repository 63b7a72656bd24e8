"""OS stalls: a process the OS freezes mid-acquire is not a pool that answers late.

A loaded CI machine can keep a process off the CPU for a third of a second in a burst the load
average never shows; the real-time timing checks once called a correct acquire(timeout=0)
"late" for it. The freeze here is real (SIGSTOP, then SIGCONT from a child process), longer
than the load-aware slack, and lands inside the pool's acquire.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Any

import pytest

from kvstress import AsyncBlockPool, InvariantViolation, PoolDriver, ThreadedBlockPool
from kvstress.checkers import TimingPolicy
from kvstress.harness import _cpu
from kvstress.harness._cpu import excused_wall_seconds

pytestmark = pytest.mark.skipif(
    sys.platform == "win32" or not hasattr(signal, "SIGSTOP"), reason="needs SIGSTOP"
)

FREEZE_S = 1.0  # past the slack (0.25 s x load per core) on any machine these tests run on
SLACK = TimingPolicy(slack=0.25)


# The thawing process: told (one byte on its stdin) that the process is about to stop itself,
# it waits until the OS shows it stopped, then for the freeze, then resumes it.
_THAW = """
import os, signal, subprocess, sys, time
pid, seconds = int(sys.argv[1]), float(sys.argv[2])
sys.stdin.read(1)
def stopped():
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "T"
    except OSError:
        out = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True)
        return out.stdout.strip().startswith("T")
deadline = time.monotonic() + 30
while not stopped() and time.monotonic() < deadline:
    time.sleep(0.001)
time.sleep(seconds)
os.kill(pid, signal.SIGCONT)
"""


class Freezer:
    """Freezes this process for ``seconds`` on demand, at once, as the OS would.

    The thawing child starts here, ahead of the freeze: the freeze itself is one pipe write and a
    SIGSTOP this process sends itself, so the interval that holds it has no wait for a process to
    start (under load that wait, real idle time of the caller's, once made the test flaky)."""

    def __init__(self, seconds: float) -> None:
        self._child = subprocess.Popen(
            [sys.executable, "-c", _THAW, str(os.getpid()), str(seconds)], stdin=subprocess.PIPE
        )

    def freeze(self) -> None:
        """Stops this process; returns once the child resumes it. Once per ``Freezer``."""
        assert self._child.stdin is not None
        self._child.stdin.write(b"!")
        self._child.stdin.flush()
        os.kill(os.getpid(), signal.SIGSTOP)

    def close(self) -> None:
        """Reaps the child (after the interval measured: its exit takes CPU time under load)."""
        assert self._child.stdin is not None
        self._child.stdin.close()
        self._child.wait(30)


class FreezingThreadedPool(ThreadedBlockPool):
    """Correct; its try-once acquire is where the OS happens to freeze the process."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._freezer = Freezer(FREEZE_S)

    def acquire(self, timeout: float | None = None) -> Any:
        if timeout == 0:
            self._freezer.freeze()
        return super().acquire(timeout)


class FreezingAsyncPool(AsyncBlockPool):
    """Correct; the OS freezes the process (and so its event loop) inside a try-once acquire."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._freezer = Freezer(FREEZE_S)

    async def acquire(self, timeout: float | None = None) -> Any:
        if timeout == 0:
            self._freezer.freeze()
        return await super().acquire(timeout)


class OversleepingPool(ThreadedBlockPool):
    """Planted: on an exhausted pool, sleeps 1.5 s past its timeout before giving up."""

    def acquire(self, timeout: float | None = None) -> Any:
        got = super().acquire(0)
        if got is None and timeout is not None:
            time.sleep(timeout + 1.5)
        return got


def test_a_frozen_process_is_counted_as_excused_time() -> None:
    """The heartbeat sees the freeze, and an idle stretch is not excused as one."""
    before = excused_wall_seconds()
    time.sleep(0.05)  # the heartbeat is running
    freezer = Freezer(0.5)
    start = time.perf_counter()
    freezer.freeze()
    frozen = time.perf_counter() - start
    freezer.close()
    excused = excused_wall_seconds() - before
    assert frozen >= 0.5 and excused >= 0.8 * 0.5, (frozen, excused)


@pytest.mark.parametrize("factory", [FreezingThreadedPool, FreezingAsyncPool], ids=["threads", "asyncio"])
def test_a_correct_pool_frozen_by_the_os_inside_acquire_is_not_late(factory: Any) -> None:
    driver = PoolDriver(factory, num_blocks=2, timing=SLACK)
    try:
        got = driver.acquire("w1", 0)
        assert got is not None
        driver.release("w1", got)
    finally:
        driver.close()
        driver.pool._freezer.close()


def test_a_pool_that_ignores_its_timeout_is_still_late() -> None:
    """Excusing stalls does not excuse a pool that really answers late."""
    driver = PoolDriver(OversleepingPool, num_blocks=1, timing=SLACK)
    try:
        got = driver.acquire("w1", None)
        assert got is not None
        with pytest.raises(InvariantViolation) as caught:
            driver.acquire("w2", 0.05)
        assert caught.value.invariant == "timeout-late"
    finally:
        driver.close()


def free_running_ops() -> Any:
    """The operations of one free-running stress execution (real threads, real time)."""
    from kvstress.scenarios import ScenarioConfig
    from kvstress.scenarios._execution import ScenarioOps, build_pool

    config = ScenarioConfig(ThreadedBlockPool, False)
    return ScenarioOps(config, build_pool(config), time.monotonic, virtual=False, timing=TimingPolicy())


@pytest.mark.parametrize(
    "make", [lambda: PoolDriver(ThreadedBlockPool, num_blocks=2), free_running_ops], ids=["driver", "stress"]
)
def test_a_real_time_run_starts_counting_stalls_before_its_first_operation(
    make: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A freeze before the heartbeat's first tick is seen by no one, and starting the heartbeat
    inside an operation could itself wait out a freeze (a CI run once called a correct acquire
    late that way): so the heartbeat is ticking before the run's first operation."""
    meter = _cpu._StallMeter()  # as the process has it between runs: no heartbeat running
    monkeypatch.setattr(_cpu, "_stalls", meter)
    run = make()
    assert meter._thread is not None and meter._ticking.is_set()
    getattr(run, "close", lambda: None)()
