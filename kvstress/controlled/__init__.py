"""Controlled execution: event loops whose every scheduling choice comes from a ``Scheduler``.

``ControlledEventLoop`` is an asyncio loop that asks the scheduler which ready task runs next and
runs on virtual time (``controlled_loop_factory`` plugs it into ``asyncio.Runner``, anyio and
pytest-asyncio; ``run_controlled`` runs one execution; ``explore`` runs until a failure or the
end of the search). ``run_threads`` and ``explore_threads`` do the same for real threads: one
runs at a time, handing a baton at every line of the code under test and at every blocking
primitive, which are swapped for cooperative ones on virtual time. ``seeded_trio_run`` gives
seeded, replayable trio runs, with the narrower control trio allows.

This module only re-exports; everything is defined in private modules. The trio helpers load on
first use, so the asyncio side works without trio installed.
"""

from typing import TYPE_CHECKING

from kvstress.controlled._errors import ControlledLoopError as ControlledLoopError
from kvstress.controlled._errors import Deadlock as Deadlock
from kvstress.controlled._errors import SchedulerExhausted as SchedulerExhausted
from kvstress.controlled._errors import SchedulerMisbehaved as SchedulerMisbehaved
from kvstress.controlled._errors import StepLimitExceeded as StepLimitExceeded
from kvstress.controlled._errors import StuckThread as StuckThread
from kvstress.controlled._errors import ThreadDeadlock as ThreadDeadlock
from kvstress.controlled._errors import TimeLimitExceeded as TimeLimitExceeded
from kvstress.controlled._explore import Exploration as Exploration
from kvstress.controlled._explore import explore as explore
from kvstress.controlled._loop import DEFAULT_MAX_STEPS as DEFAULT_MAX_STEPS
from kvstress.controlled._loop import LATE_WINDOW as LATE_WINDOW
from kvstress.controlled._loop import ControlledEventLoop as ControlledEventLoop
from kvstress.controlled._loop import controlled_loop_factory as controlled_loop_factory
from kvstress.controlled._loop import current_loop as current_loop
from kvstress.controlled._loop import run_controlled as run_controlled
from kvstress.controlled._threads import explore_threads as explore_threads
from kvstress.controlled._threads import run_threads as run_threads
from kvstress.controlled._threads import spawn as spawn

if TYPE_CHECKING:
    from kvstress.controlled._trio import TaskStepTrace as TaskStepTrace
    from kvstress.controlled._trio import seeded_trio_run as seeded_trio_run

_NEED_TRIO = frozenset({"TaskStepTrace", "seeded_trio_run"})


def __getattr__(name: str) -> object:
    if name not in _NEED_TRIO:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        from kvstress.controlled import _trio
    except ModuleNotFoundError as missing:
        raise ImportError(f"kvstress.controlled.{name} needs trio: pip install trio") from missing
    value = getattr(_trio, name)
    globals()[name] = value  # later lookups skip this function
    return value
