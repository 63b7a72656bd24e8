"""Schedulers: strategies that decide which task runs next and supply a run's randomness.

One interface (``Scheduler``: ``new_execution``, ``next_task``, ``next_u64``, ``schedule``), one
strategy per module: uniform random, PCT, bounded exhaustive search (DFS with a preemption
bound; delay-bounded, hints first), replay, Hypothesis-drawn, and guided (the shrinker's: follow
edited choices where they fit); ``MetricsScheduler`` wraps any of them. Every execution yields
a ``Schedule`` whose ``ks1:`` text replays it exactly through ``ReplayScheduler``.

This module only re-exports; everything is defined in private modules.
"""

from kvstress.schedulers._base import Scheduler as Scheduler
from kvstress.schedulers._base import SchedulerBase as SchedulerBase
from kvstress.schedulers._delay import DelayBoundedScheduler as DelayBoundedScheduler
from kvstress.schedulers._dfs import DFSScheduler as DFSScheduler
from kvstress.schedulers._errors import ScheduleDivergence as ScheduleDivergence
from kvstress.schedulers._guided import GuidedScheduler as GuidedScheduler
from kvstress.schedulers._hypothesis import HypothesisScheduler as HypothesisScheduler
from kvstress.schedulers._hypothesis import hypothesis_schedulers as hypothesis_schedulers
from kvstress.schedulers._metrics import MetricsScheduler as MetricsScheduler
from kvstress.schedulers._metrics import SchedulerMetrics as SchedulerMetrics
from kvstress.schedulers._pct import PCTScheduler as PCTScheduler
from kvstress.schedulers._random import RandomScheduler as RandomScheduler
from kvstress.schedulers._replay import ReplayScheduler as ReplayScheduler
from kvstress.schedulers._schedule import ALL_TIMERS as ALL_TIMERS
from kvstress.schedulers._schedule import RANDOM_DRAW as RANDOM_DRAW
from kvstress.schedulers._schedule import SLEEPERS as SLEEPERS
from kvstress.schedulers._schedule import Schedule as Schedule
