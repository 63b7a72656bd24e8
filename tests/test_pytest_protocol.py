"""A kvstress_explore test gets fresh fixtures for every schedule, end to end in inner sessions.

The inner suite's tests keep what a schedule does in their fixtures (a counter, an
``asyncio.Condition`` bound to the loop that first waits on it), so they pass only if each
schedule has fixtures of its own. Each session runs in a subprocess so the installed
``pytest11`` entry point loads.
"""

from __future__ import annotations

import re

import pytest

pytest_plugins = ["pytester"]

INI = """
[pytest]
asyncio_default_fixture_loop_scope = function
"""

CONFTEST = """
def pytest_generate_tests(metafunc):
    if "hooked" in metafunc.fixturenames:
        metafunc.parametrize("hooked", [5])
"""

SUITE = """
import asyncio
import threading

import pytest
import pytest_asyncio

EVENTS = []


class Desk:
    def __init__(self, seats):
        self.seats = seats
        self.served = 0
        self.cond = asyncio.Condition()

    async def serve(self):
        async with self.cond:
            await self.cond.wait_for(lambda: self.seats > 0)
            self.seats -= 1
        await asyncio.sleep(0)
        async with self.cond:
            self.seats += 1
            self.served += 1
            self.cond.notify()


@pytest.fixture
def desk():
    EVENTS.append("setup")
    yield Desk(1)
    EVENTS.append("teardown")


@pytest.fixture(scope="module")
def shared():
    EVENTS.append("module setup")
    return object()


@pytest_asyncio.fixture
async def adesk():
    await asyncio.sleep(0)
    return Desk(1)


@pytest.mark.kvstress_explore(schedules=20, strategy="random", seed=1)
@pytest.mark.asyncio
async def test_sync_fixture(desk, shared):
    await asyncio.gather(*(desk.serve() for _ in range(3)))
    assert desk.served == 3


@pytest.mark.kvstress_explore(schedules=20, strategy="random", seed=1)
@pytest.mark.asyncio
async def test_async_fixture(adesk):
    await asyncio.gather(*(adesk.serve() for _ in range(3)))
    assert adesk.served == 3


def test_each_schedule_had_its_own_fixture():
    assert EVENTS.count("setup") == EVENTS.count("teardown") == 20
    assert EVENTS.count("module setup") == 1


@pytest.fixture
def doubled(request):
    return request.param * 2


@pytest.mark.kvstress_explore(schedules=5, seed=1)
@pytest.mark.parametrize("doubled", [3], indirect=True)
@pytest.mark.parametrize("plain", [7])
@pytest.mark.asyncio
async def test_parametrized(plain, doubled, hooked):
    assert (plain, doubled, hooked) == (7, 6, 5)


class TestMethods:
    def setup_method(self):
        self.runs = getattr(self, "runs", 0) + 1

    @pytest.mark.kvstress_explore(schedules=5, seed=1)
    @pytest.mark.parametrize("plain", [7])
    @pytest.mark.asyncio
    async def test_fresh_instance(self, plain, desk):
        assert self.runs == 1 and plain == 7

    @pytest.mark.kvstress_explore(schedules=5, seed=1)
    @pytest.mark.asyncio
    async def test_fresh_instance_unparametrized(self):
        assert self.runs == 1


@pytest.mark.kvstress_explore(schedules=10, seed=1)
@pytest.mark.anyio
async def test_anyio_backend_kept(anyio_backend):
    assert anyio_backend in ("asyncio", "trio")


class Counter:
    def __init__(self):
        self.lock = threading.Lock()
        self.value = 0

    def bump(self, racy):
        if racy:
            seen = self.value
            self.value = seen + 1
        else:
            with self.lock:
                seen = self.value
                self.value = seen + 1


@pytest.fixture
def counter():
    return Counter()


def two(counter, racy):
    workers = [threading.Thread(target=counter.bump, args=(racy,)) for _ in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert counter.value == 2, "lost update"


@pytest.mark.kvstress_explore(schedules=30, seed=1)
def test_threads_fixture_fixed(counter):
    two(counter, racy=False)


@pytest.mark.kvstress_explore(schedules=30, seed=1)
def test_threads_fixture_racy(counter):
    two(counter, racy=True)


@pytest.fixture
def checked_desk():
    desk = Desk(1)
    yield desk
    assert desk.seats == 1, "a seat was not given back"


@pytest.mark.kvstress_explore(schedules=50, strategy="random", seed=1)
@pytest.mark.asyncio
async def test_teardown_catches(checked_desk):
    async def leaky():
        async with checked_desk.cond:
            if checked_desk.seats > 0:
                await asyncio.sleep(0)
                checked_desk.seats -= 1

    await asyncio.gather(leaky(), leaky())
"""

LATER = """
def test_a_later_module_runs():
    pass
"""

REPLAY = re.compile(r"replay:   pytest --kvstress-replay=(ks1:[A-Za-z0-9_-]+) '?([^\s']+)'?")


def _suite(pytester: pytest.Pytester) -> None:
    pytester.makeini(INI)
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_fixtures=SUITE, test_later=LATER)


def test_every_schedule_runs_on_fresh_fixtures(pytester: pytest.Pytester) -> None:
    """Fixture-built state (a counter, a loop-bound Condition, a test instance) is fresh for each
    schedule, wider fixtures are set up once, parameters of every kind reach the test, threads
    see cooperative locks built by a fixture, and a bug is still found."""
    _suite(pytester)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-v")
    result.assert_outcomes(passed=11, failed=1, errors=1)
    out = result.stdout.str()
    assert "FAILED test_fixtures.py::test_threads_fixture_racy" in out
    assert "test_fixtures.py::test_sync_fixture: explored 20 schedules (strategy 'random', seed 1)" in out
    assert "test_fixtures.py::test_anyio_backend_kept[trio]: explored 10 schedules" in out
    assert "test_later.py::test_a_later_module_runs PASSED" in out
    assert out.count("test_fixtures.py::test_sync_fixture PASSED") == 1  # reported once


def test_a_failing_teardown_names_its_schedule_and_replays(pytester: pytest.Pytester) -> None:
    """A fixture's teardown that fails after a schedule is reported as the test's error with
    that schedule's replay command, the session goes on, and the command fails the same way."""
    _suite(pytester)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "test_fixtures.py::test_teardown_catches"
    )
    result.assert_outcomes(passed=1, errors=1)  # the call passed; the teardown failed
    out = result.stdout.str()
    assert "passed, and then its fixtures' teardown failed (strategy 'random', seed 1;" in out
    (schedule, nodeid), *_ = REPLAY.findall(out)
    again = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", f"--kvstress-replay={schedule}", nodeid, "test_later.py"
    )
    again.assert_outcomes(passed=2, errors=1)
    assert "AssertionError: a seat was not given back" in again.stdout.str()


def test_fresh_fixtures_hold_under_xdist(pytester: pytest.Pytester) -> None:
    """Under xdist each marked test still reports once, with the same outcomes."""
    _suite(pytester)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2", "--dist", "loadfile")
    result.assert_outcomes(passed=11, failed=1, errors=1)


FALLBACK_CONFTEST = """
import pytest
from _pytest.runner import runtestprotocol  # as a rerun plugin does: the protocol is not ours


class Rerunner:
    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item, nextitem):
        item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        runtestprotocol(item, nextitem=nextitem, log=True)
        item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
        return True


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    config.pluginmanager.register(Rerunner(), "rerunner")  # registered after kvstress: asked first
"""

FALLBACK_SUITE = """
import threading

import pytest

SETUPS = []


@pytest.fixture
def lock():
    SETUPS.append(1)
    return threading.Lock()


@pytest.mark.kvstress_explore(schedules=7, seed=1)
def test_explored_with_fixtures_once(lock):
    with lock:
        pass


def test_fixture_was_set_up_once():
    assert len(SETUPS) == 1
"""


def test_a_protocol_run_by_another_plugin_still_explores(pytester: pytest.Pytester) -> None:
    """When another plugin runs the test protocol, the marked test explores all its schedules in
    one call, on fixtures set up once."""
    pytester.makeini(INI)
    pytester.makeconftest(FALLBACK_CONFTEST)
    pytester.makepyfile(test_fallback=FALLBACK_SUITE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    assert "test_fallback.py::test_explored_with_fixtures_once: explored 7 schedules" in result.stdout.str()
