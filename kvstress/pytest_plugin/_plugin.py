"""The plugin's hooks: options, the session seed, the xdist hand-over, the controlled loop and
the ``kvstress_explore`` marker.

The controller picks the session seed once (``pytest_configure``) and prints it in the header;
xdist workers take it from ``workerinput``. Everything a test needs is kept in
``config.stash[SETTINGS]``.
"""

from __future__ import annotations

import types
import warnings
from collections.abc import Generator
from typing import Any

import pytest

from kvstress.pytest_plugin._explore import MARKER as EXPLORE_MARKER
from kvstress.pytest_plugin._explore import ExploredTests, read_replay
from kvstress.pytest_plugin._loop import ControlledLoops
from kvstress.pytest_plugin._options import MARKER, SETTINGS, add_options, read_settings
from kvstress.pytest_plugin._xdist import SeedHandover, inherited_seed, is_worker

LOOP_HOOK = "pytest_asyncio_loop_factories"
ASYNCIO_LOOP_SCOPE = "asyncio_default_fixture_loop_scope"


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Keep pytest-asyncio's warning about an unset fixture loop scope out of the user's run.

    kvstress's test extra brings pytest-asyncio into projects that never configured it, and
    pytest-asyncio then warns at every start (once per xdist worker). The behaviour stays
    pytest-asyncio's own default; a project that sets the option sees nothing change.
    """
    if config.pluginmanager.hasplugin("asyncio") and not _ini_is_set(config, ASYNCIO_LOOP_SCOPE):
        unset = f'The configuration option "{ASYNCIO_LOOP_SCOPE}" is unset'
        warnings.filterwarnings("ignore", message=unset, category=pytest.PytestDeprecationWarning)
    _configure(config)


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add the ``kvstress`` option group and its ini values."""
    add_options(parser)


def _ini_is_set(config: pytest.Config, name: str) -> bool:
    try:
        return bool(config.getini(name))
    except ValueError:  # not registered: pytest-asyncio is too old to know it
        return True


FINDING = r"^InvariantViolation: "
"""What pytest-rerunfailures' ``rerun_except`` matches (``TypeName: message``) for a finding."""


def _no_reruns_of_findings(config: pytest.Config) -> None:
    """A kvstress finding is never rerun by pytest-rerunfailures: rerun, a race found in real
    threads may pass and the suite goes green with the bug (a blind team's ``--reruns 2``: "1
    passed, 1 rerun" over an audit's lost-block). Added to its ``--rerun-except`` patterns,
    after the ones given on the command line or in the ini file."""
    if not config.pluginmanager.hasplugin("rerunfailures"):
        return
    given = getattr(config.option, "rerun_except", ())
    if given == ():  # a release without the option: nothing to add to
        return
    if given is None:  # the plugin reads the ini's patterns only while the option is unset
        try:
            given = list(config.getini("rerun_except") or [])
        except ValueError:
            given = []
    config.option.rerun_except = [*given, FINDING]


def _configure(config: pytest.Config) -> None:
    """Register the marker, settle the session's settings and plug in xdist and the loop."""
    config.addinivalue_line("markers", MARKER)
    config.addinivalue_line("markers", EXPLORE_MARKER)
    _no_reruns_of_findings(config)
    settings = read_settings(config, inherited_seed(config))
    config.stash[SETTINGS] = settings
    explored = ExploredTests(settings.session_seed, read_replay(config))
    config.pluginmanager.register(explored, "kvstress-explore")
    if not is_worker(config):
        config.option.kvstress_seed = settings.session_seed  # what workers would re-read
        if config.pluginmanager.hasplugin("xdist"):
            config.pluginmanager.register(SeedHandover(settings.session_seed), "kvstress-xdist")
    if settings.controlled_loop:
        _check_loop_hook(config)
        config.pluginmanager.register(ControlledLoops(settings.session_seed), "kvstress-controlled-loop")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A test that failed on an audited pool's violation has shown it: an audit closed in the
    test's teardown does not raise it a second time (``note_shown``).

    A traceback entry with no line number (on 3.11, a signal's exception, pytest-timeout's
    alarm, landing between two instructions of some frames) is unlinked first: pytest's
    formatting of it raised TypeError, an INTERNALERROR that ended the session (a blind team's
    explored test under ``timeout = 60``)."""
    if call.excinfo is not None:
        _unlink_lineless(call.excinfo.tb)
    report = yield
    if call.when == "call" and call.excinfo is not None:
        from kvstress.audit._core import note_shown

        note_shown(call.excinfo.value)
    return report


def _unlink_lineless(tb: types.TracebackType | None) -> None:
    """Drop, in place, the entries after the first that have no line number."""
    while tb is not None:
        while tb.tb_next is not None and tb.tb_next.tb_lineno is None:
            tb.tb_next = tb.tb_next.tb_next
        tb = tb.tb_next


def pytest_report_header(config: pytest.Config) -> list[str]:
    """The session seed (to repeat the session) and where reports go."""
    settings = config.stash[SETTINGS]
    lines = [
        f"kvstress: seed {settings.session_seed} (repeat with --kvstress-seed {settings.session_seed}), "
        f"budget {settings.budget_s:g} s per check, reports in {settings.report_dir}"
    ]
    if settings.controlled_loop:
        lines.append("kvstress: pytest-asyncio tests run on the controlled event loop")
    return lines


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """Under ``-q`` pytest prints no header: a session where kvstress failed a test repeats its
    seed at the end (a blind user's ``-q -n 2`` runs never showed it)."""
    if exitstatus != pytest.ExitCode.TESTS_FAILED or config.getoption("verbose") >= 0:
        return
    failed = [*terminalreporter.stats.get("failed", ()), *terminalreporter.stats.get("error", ())]
    if any("kvstress" in getattr(report, "longreprtext", "") for report in failed):
        seed = config.stash[SETTINGS].session_seed
        terminalreporter.write_line(f"kvstress: seed {seed} (repeat with --kvstress-seed {seed})")


def _check_loop_hook(config: pytest.Config) -> None:
    # pytest-asyncio declares the hook when it loads; without it, our factory would be ignored
    # and the tests would silently run on the stock loop.
    if not config.pluginmanager.hasplugin("asyncio") or not hasattr(config.hook, LOOP_HOOK):
        raise pytest.UsageError(
            "--kvstress-controlled-loop (ini kvstress_controlled_loop) needs pytest-asyncio >= 1.4, "
            f"which provides the {LOOP_HOOK} hook: pip install -U pytest-asyncio"
        )
