"""The kvstress pytest plugin (entry point ``pytest11: kvstress``).

- The ``kvstress`` fixture: ``kvstress.check(MyPool)`` fuzzes a pool as ``kvstress fuzz``
  does and fails the test with ``InvariantViolation`` (report path and replay command included);
  ``kvstress_fuzz`` is the same fixture under a name that does not hide ``import kvstress``.
- Options (and ini values): ``--kvstress-budget``, ``--kvstress-seed``,
  ``--kvstress-report-dir``, ``--kvstress-controlled-loop``; the ``kvstress`` marker.
- The ``kvstress_explore`` marker: the test runs under up to N controlled schedules
  (``kvstress.explore``) and fails with its schedule and the ``--kvstress-replay`` command that
  reruns exactly that schedule.
- Hypothesis profiles ``kvstress-dev``, ``kvstress-ci`` and ``kvstress-nightly``.

This module only re-exports; pytest finds the hooks and the fixture by these names.
"""

from kvstress.pytest_plugin._fixture import PoolChecker as PoolChecker
from kvstress.pytest_plugin._fixture import factory_spec as factory_spec
from kvstress.pytest_plugin._fixture import kvstress as kvstress
from kvstress.pytest_plugin._fixture import kvstress_fuzz as kvstress_fuzz
from kvstress.pytest_plugin._loop import ControlledLoops as ControlledLoops
from kvstress.pytest_plugin._plugin import pytest_addoption as pytest_addoption
from kvstress.pytest_plugin._plugin import pytest_configure as pytest_configure
from kvstress.pytest_plugin._plugin import pytest_report_header as pytest_report_header
from kvstress.pytest_plugin._plugin import pytest_runtest_makereport as pytest_runtest_makereport
from kvstress.pytest_plugin._plugin import pytest_terminal_summary as pytest_terminal_summary
from kvstress.pytest_plugin._profiles import NIGHTLY_DATABASE as NIGHTLY_DATABASE
from kvstress.pytest_plugin._profiles import PROFILES as PROFILES
from kvstress.pytest_plugin._seeds import seed_for as seed_for
