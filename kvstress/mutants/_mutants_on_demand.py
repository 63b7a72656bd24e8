"""Realistic bugs planted in the pools that make their blocks on demand.

Each is a slip that object and connection pools have shipped: a new object handed over through
the shared queue, a creation count read and bumped apart, an add-worker that skips because an
idle object is in sight, a waiter that asks for one creation and never again.
"""

from __future__ import annotations

from kvstress.mutants._block import Block, seconds
from kvstress.mutants._on_demand_pools import LazyQueuePool, MakerThreadPool


class LazyQueueMakerQueuesPool(LazyQueuePool):
    """The caller that makes a block puts it in the idle queue and then takes one out, to keep
    one path for both cases: another caller takes the new block first, and the maker waits and
    gives up with blocks still left to make (fast-object-pool, issue 25)."""

    expected = ("lost-block", "lost-wakeup")

    def _keep(self, made: Block, timeout: float | None) -> Block | None:
        self._idle.put(made)  # BUG: through the shared queue, where anyone may take it
        return self._wait_idle(timeout)


class LazyQueueMadeCountRacePool(LazyQueuePool):
    """The count of blocks made is read, tested and bumped without the lock: two callers at
    once make the same block and both hold it (a create count checked apart from its change, as
    commons-pool's ``makeObject`` once exceeded ``maxTotal``)."""

    expected = ("shared-block", "queue-corruption", "lost-block")

    def _make(self) -> Block | None:
        made = self._made  # BUG: no lock from the read to the write
        if made == self.num_blocks:
            return None
        self._made = made + 1
        return self._blocks[made]


class MakerSkipsIdlePool(MakerThreadPool):
    """The maker skips an ask when it sees an idle block: that block was made for an earlier
    ask and its waiter has not taken it yet, so the later waiter waits beside blocks never made
    (HikariCP, issue 452)."""

    expected = ("lost-wakeup", "lost-block")

    def _wanted(self) -> bool:
        return bool(self._unmade) and not self._idle  # BUG: an idle block may be promised


class MakerAsksOncePool(MakerThreadPool):
    """A waiter asks the maker once: when a try-once caller takes the block made for it, it
    waits on until its deadline with blocks still left to make."""

    expected = ("lost-wakeup", "lost-block")

    def acquire(self, timeout: float | None = None) -> Block | None:
        timeout = seconds(timeout)
        with self._cond:
            if not self._idle and timeout == 0:
                return self._taken(self._unmade.popleft()) if self._unmade else None
            self._waiting += 1
            try:
                if not self._idle and self._unmade and self._asked < self._waiting:
                    self._ask()  # BUG: once, before the wait, never again on a wake-up
                if not self._cond.wait_for(lambda: bool(self._idle), timeout):
                    return None
                return self._taken(self._idle.popleft())
            finally:
                self._waiting -= 1
