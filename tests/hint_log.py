"""A delay-bounded scheduler that records the controller's woken hint, for the baton's and the
controlled loop's tests."""

from __future__ import annotations

from collections.abc import Sequence

from kvstress.schedulers import DelayBoundedScheduler


class HintLog(DelayBoundedScheduler):
    """The plain delay-bounded run (no delay: the thread or task that ran goes on while it can),
    recording the controller's woken hint at each decision it is asked."""

    def __init__(self) -> None:
        super().__init__(0)
        self.hints: list[int | None] = []

    def next_task(self, runnable: Sequence[int], current: int | None) -> int:
        self.hints.append(self.woken)
        return super().next_task(runnable, current)


class WarmLog(DelayBoundedScheduler):
    """HintLog's twin for the warm hint: the plain run, recording whether each decision it is
    asked was marked warm (the first after a thread published)."""

    def __init__(self) -> None:
        super().__init__(0)
        self.warms: list[bool] = []

    def next_task(self, runnable: Sequence[int], current: int | None) -> int:
        self.warms.append(self.warm)
        return super().next_task(runnable, current)
