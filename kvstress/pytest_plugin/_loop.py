"""``--kvstress-controlled-loop``: pytest-asyncio tests run on kvstress' controlled event loop.

pytest-asyncio (>= 1.4) asks the ``pytest_asyncio_loop_factories(config, item)`` hook for the
loop factories a test runs under; its ``asyncio.Runner`` then calls the factory for each new
loop (once per test at the default function loop scope). ``ControlledLoops`` answers with one
factory that builds a ``ControlledEventLoop`` on a fresh ``RandomScheduler``, seeded from the
session seed and the node id of the test being set up, so rerunning with the same
``--kvstress-seed`` replays each test's interleaving. When such a test fails, its report gets a
section with that seed.

The plugin registers ``ControlledLoops`` only when the option is on: pytest-asyncio treats any
implementation of the hook as a request for loop factories, so an object that answered "none"
would be a usage error, and without the option the stock loop must stay untouched. A
project's own ``pytest_asyncio_loop_factories`` (in a conftest) is asked first and wins.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable, Generator, Mapping

import pytest

from kvstress.pytest_plugin._seeds import seed_for

FACTORY_NAME = "kvstress"
SECTION = "kvstress controlled loop"


class ControlledLoops:
    """The pytest plugin object behind ``--kvstress-controlled-loop``; one per session."""

    def __init__(self, session_seed: int) -> None:
        self._session_seed = session_seed
        self._nodeid = ""  # the test being run: loops made now take their seed from it
        # Every loop made: its seed and the test it was made for; dropped once collected.
        self._made: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[int, str]] = (
            weakref.WeakKeyDictionary()
        )

    @pytest.hookimpl(optionalhook=True)
    def pytest_asyncio_loop_factories(
        self, config: pytest.Config, item: pytest.Item
    ) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
        """pytest-asyncio's hook: every asyncio test runs on one factory, the controlled loop's."""
        return {FACTORY_NAME: self.new_loop}

    def pytest_runtest_logstart(self, nodeid: str, location: object) -> None:
        """Remember which test runs: its setup is where pytest-asyncio makes the loop."""
        self._nodeid = nodeid

    def new_loop(self) -> asyncio.AbstractEventLoop:
        """A controlled loop on a new scheduler seeded for the current test."""
        from kvstress.controlled import controlled_loop_factory
        from kvstress.explorer._strategies import SleepersOnlyRandom  # a test's own assertions

        seed = seed_for(self._session_seed, self._nodeid)
        loop = controlled_loop_factory(SleepersOnlyRandom(seed))()
        self._made[loop] = (seed, self._nodeid)
        return loop

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        """Add the loop's seed to the report of a failed test that ran on a controlled loop."""
        report = yield
        made = self._loop_of(item) if report.failed else None
        if made is not None:
            report.sections.append((SECTION, self.describe(*made)))
        return report

    def describe(self, seed: int, nodeid: str) -> str:
        """The line a failed test's report shows; ``nodeid`` is the test the loop was made for."""
        # With a wider loop scope, the loop (and its seed) belongs to the scope's first test.
        return (
            f"kvstress controlled loop seed: {seed} (from session seed {self._session_seed} and "
            f"{nodeid or 'no test'}, where the loop was made; rerun with --kvstress-seed "
            f"{self._session_seed} to replay it)"
        )

    def _loop_of(self, item: pytest.Item) -> tuple[int, str] | None:
        # pytest-asyncio hands each test an asyncio.Runner fixture; the loop is the runner's.
        # Looking it up, rather than trusting the last loop made, stays right for wider loop
        # scopes, where one loop (made for an earlier test) runs many tests.
        funcargs: dict[str, object] = getattr(item, "funcargs", {})
        for value in funcargs.values():
            if not isinstance(value, asyncio.Runner):
                continue
            try:
                loop = value.get_loop()
            except RuntimeError:  # the runner is already closed
                continue
            if loop in self._made:
                return self._made[loop]
        return None
