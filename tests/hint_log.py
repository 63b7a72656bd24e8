"""A delay-bounded scheduler that records the controller's woken hint, for the baton's and the
controlled loop's tests; a switch recorder that keeps the hand-overs no scheduler chose."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kvstress.scenarios._switches import Switch, SwitchRecorder
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


class HandOverLog(SwitchRecorder):
    """A switch recorder that also keeps the switches the baton told it of unasked
    (``handed_over``: the running thread blocked and one other could run). Defined here, not in
    a test module the run traces, so that its own lines are no scheduling points."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.unasked: list[Switch] = []

    def handed_over(self, paused: int, to: int) -> None:
        before = len(self.switches)
        super().handed_over(paused, to)
        self.unasked += self.switches[before:]
