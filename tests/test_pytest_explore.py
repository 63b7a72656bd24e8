"""The kvstress_explore marker and --kvstress-replay, end to end in inner pytest sessions.

The inner suite books the last seat twice: a check-then-act split by an await (or by a line
between threads) that plain pytest-asyncio, anyio and plain threads never split badly. Each
session runs in a subprocess so the installed ``pytest11`` entry point loads.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

INI = """
[pytest]
asyncio_default_fixture_loop_scope = function
"""

SUITE = """
import asyncio
import threading

import anyio
import pytest
from hypothesis import given, strategies as st


class Seats:
    def __init__(self):
        self.left = 1

    async def book(self, sleep, racy):
        if self.left > 0:
            if racy:
                await sleep(0)
            self.left -= 1
            if not racy:
                await sleep(0)


async def two_clients(sleep, racy):
    seats = Seats()

    async def late():
        await sleep(0)
        await sleep(0)
        await seats.book(sleep, racy)

    await asyncio.gather(seats.book(sleep, racy), late())
    assert seats.left >= 0, "overbooked"


async def two_clients_anyio(racy):
    seats = Seats()

    async def late():
        await anyio.sleep(0)
        await anyio.sleep(0)
        await seats.book(anyio.sleep, racy)

    async with anyio.create_task_group() as group:
        group.start_soon(seats.book, anyio.sleep, racy)
        group.start_soon(late)
    assert seats.left >= 0, "overbooked"


async def lost_update_anyio():
    shared = {"n": 0}

    async def slow():
        seen = shared["n"]
        await anyio.sleep(0)
        shared["n"] = seen + 1

    async def quick():
        shared["n"] += 1

    async with anyio.create_task_group() as group:
        group.start_soon(slow)
        group.start_soon(quick)
    assert shared["n"] == 2, "lost update"


def two_threads(racy):
    counter = {"value": 0}
    lock = threading.Lock()

    def bump():
        if racy:
            seen = counter["value"]
            counter["value"] = seen + 1
        else:
            with lock:
                seen = counter["value"]
                counter["value"] = seen + 1

    workers = [threading.Thread(target=bump) for _ in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert counter["value"] == 2, "lost update"


@pytest.mark.asyncio
async def test_asyncio_plain():
    await two_clients(asyncio.sleep, racy=True)


@pytest.mark.kvstress_explore(schedules=200, seed=3)
@pytest.mark.asyncio
async def test_asyncio_racy():
    await two_clients(asyncio.sleep, racy=True)


@pytest.mark.kvstress_explore(schedules=40, seed=3)
@pytest.mark.asyncio
async def test_asyncio_fixed():
    await two_clients(asyncio.sleep, racy=False)


@pytest.mark.anyio
async def test_anyio_plain():
    await two_clients_anyio(racy=True)


@pytest.mark.kvstress_explore(schedules=200, strategy="random", seed=3)
@pytest.mark.anyio
async def test_anyio_racy():
    await two_clients_anyio(racy=True)


@pytest.mark.kvstress_explore(schedules=50, strategy="random", seed=3)
@pytest.mark.anyio
async def test_anyio_lost_update():
    await lost_update_anyio()


def test_threads_plain():
    two_threads(racy=True)


@pytest.mark.kvstress_explore(schedules=200, seed=3)
def test_threads_racy():
    two_threads(racy=True)


@pytest.mark.kvstress_explore(schedules=30, seed=3)
def test_threads_fixed(tmp_path):
    two_threads(racy=False)
    assert tmp_path.exists()


@pytest.mark.kvstress_explore(schedules=0)
def test_bad_marker():
    pass


@pytest.mark.kvstress_explore(schedules=5)
@given(st.integers())
def test_with_given(number):
    pass
"""

REPLAY = re.compile(r"replay:   pytest --kvstress-replay=(ks1:[A-Za-z0-9_-]+) '?([^\s']+)'?")


def _suite(pytester: pytest.Pytester) -> None:
    pytester.makeini(INI)
    pytester.makepyfile(test_seats=SUITE)


def test_marked_tests_fail_with_a_replayable_schedule_and_pass_with_a_count(
    pytester: pytest.Pytester,
) -> None:
    """Racy marked tests fail with schedule, seed and replay command, and the command fails the
    same way; fixed ones report a count; their unmarked twins pass; a bad marker argument fails
    its test in one line, as does the marker on a Hypothesis test."""
    _suite(pytester)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--strict-markers", "--junitxml=junit.xml"
    )
    result.assert_outcomes(passed=7, failed=7)
    out = result.stdout.str()
    for name in ("asyncio_racy", "anyio_racy[asyncio]", "threads_racy", "bad_marker"):
        assert f"FAILED test_seats.py::test_{name}" in out
    replays = dict((nodeid, schedule) for schedule, nodeid in REPLAY.findall(out))
    racy = (
        "asyncio_racy",
        "anyio_racy[asyncio]",
        "anyio_lost_update[asyncio]",
        "anyio_lost_update[trio]",
        "threads_racy",
    )
    assert set(replays) == {f"test_seats.py::test_{name}" for name in racy}
    assert "of at most 200 failed (strategy 'pct', seed 3;" in out
    assert "of at most 200 failed (strategy 'random', seed 3;" in out
    assert "test_seats.py::test_asyncio_fixed: explored 40 schedules (strategy 'pct', seed 3)" in out
    assert "test_seats.py::test_threads_fixed: explored 30 schedules (strategy 'pct', seed 3)" in out
    # On trio the late client's check always comes a batch after the first one's update.
    assert "test_seats.py::test_anyio_racy[trio]: explored 200 schedules (strategy 'random', seed 3)" in out
    assert "kvstress_explore: schedules must be an int >= 1, got 0 (int)" in out
    assert "kvstress_explore: does not combine with Hypothesis' @given" in out
    # JUnit: a failing schedule's own properties (a CI parser found them only in the text).
    cases = {
        case.get("name"): case for case in ET.parse(pytester.path / "junit.xml").getroot().iter("testcase")
    }
    properties = {p.get("name"): p.get("value") for p in cases["test_threads_racy"].iter("property")}
    assert properties["kvstress_schedule"] == replays["test_seats.py::test_threads_racy"]
    assert properties["kvstress_replay"].startswith("pytest --kvstress-replay=ks1:")
    assert "kvstress_invariant" not in properties  # the test's own assertion, no violation
    fixed = {p.get("name"): p.get("value") for p in cases["test_threads_fixed"].iter("property")}
    assert fixed == {"kvstress_schedules": "30"}
    nodeid = "test_seats.py::test_asyncio_racy"
    again = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", f"--kvstress-replay={replays[nodeid]}", nodeid
    )
    again.assert_outcomes(failed=1)
    replayed = again.stdout.str()
    assert "kvstress: the replayed schedule failed" in replayed
    assert "AssertionError: overbooked" in replayed and replays[nodeid] in replayed
    nodeid = "test_seats.py::test_anyio_lost_update[trio]"  # a trio schedule replays too
    again = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", f"--kvstress-replay={replays[nodeid]}", nodeid
    )
    again.assert_outcomes(failed=1)
    assert "AssertionError: lost update" in again.stdout.str()


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("ks1:zz!", "--kvstress-replay: schedule is corrupt: '!' is not a urlsafe base64 character"),
        (
            "@missing.ks1",
            "--kvstress-replay: cannot read the schedule file 'missing.ks1': No such file or directory",
        ),
    ],
    ids=["corrupt-string", "unreadable-file"],
)
def test_a_bad_replay_is_a_usage_error(pytester: pytest.Pytester, given: str, said: str) -> None:
    """--kvstress-replay with a string that is no schedule, or naming a file (``@path``) that
    cannot be read, stops pytest with one line (exit 4) that says which."""
    _suite(pytester)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--kvstress-replay={given}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert said in result.stderr.str()


LONG_RUN = """
import asyncio

import pytest


@pytest.mark.kvstress_explore(schedules=200, strategy="random", seed=1)
async def test_chatty():
    async def talk(who):
        for _ in range(3000):
            await asyncio.sleep(0)
        return who

    talkers = {asyncio.ensure_future(talk(who)) for who in range(3)}
    first = await asyncio.wait(talkers, return_when=asyncio.FIRST_COMPLETED)
    assert next(iter(first[0])).result() == 0, "another talker finished first"
"""


def test_a_long_schedule_goes_into_a_file_the_replay_line_names(pytester: pytest.Pytester) -> None:
    """A long run's schedule (tens of kilobytes: one terminal line a blind team found hard to
    take) is written beside the reports, and the replay line names the file; the line replays
    it. The JUnit property keeps the schedule whole."""
    pytester.makeini(INI)
    pytester.makepyfile(test_long=LONG_RUN)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--junitxml=junit.xml")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    line = next(text for text in out.splitlines() if "replay:   pytest" in text)
    found = re.search(r"--kvstress-replay=@(\S+) test_long.py::test_chatty$", line)
    assert found is not None, line
    assert len(line) < 200 and "characters: whole in the file the replay line names" in out
    schedule = (pytester.path / found.group(1)).read_text().strip()
    assert schedule.startswith("ks1:") and len(schedule) > 2_000
    case = next(ET.parse(pytester.path / "junit.xml").getroot().iter("testcase"))
    properties = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert properties["kvstress_schedule"] == schedule
    again = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", f"--kvstress-replay=@{found.group(1)}", "test_long.py::test_chatty"
    )
    again.assert_outcomes(failed=1)
    assert "AssertionError: another talker finished first" in again.stdout.str()
    assert "kvstress: the replayed schedule failed" in again.stdout.str()


def test_a_replay_with_several_explored_tests_selected_is_a_usage_error(pytester: pytest.Pytester) -> None:
    """A schedule is one test's: with several marked tests selected, each other one ran it and
    failed with a divergence of its own; with none, nothing was replayed and the run passed.
    Refused at the start, naming them; one named test runs."""
    pytester.makepyfile(
        test_two="""
import pytest

@pytest.mark.kvstress_explore(schedules=3)
def test_a():
    pass

@pytest.mark.kvstress_explore(schedules=3)
def test_b():
    pass
"""
    )
    schedule = "ks1:CANwY3TAr66hyNn7tdABAAitheM"
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--kvstress-replay={schedule}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "replays the schedule of one kvstress_explore test, but 2 are selected" in err
    assert "test_two.py::test_a, test_two.py::test_b" in err
    assert "no kvstress_explore test ran" not in result.stdout.str()
    one = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", f"--kvstress-replay={schedule}", "test_two.py::test_a"
    )
    one.assert_outcomes(passed=1)
    # A replay that passed says the failure did not happen again (it said "explored 1
    # schedule (strategy 'replay', seed <a fresh draw>)").
    assert "replayed the given schedule, and it passed" in one.stdout.str()
    none = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", f"--kvstress-replay={schedule}", "test_two.py::test_a", "-k", "not test_a"
    )
    assert none.ret == pytest.ExitCode.USAGE_ERROR
    assert "but none is selected: name it" in none.stderr.str()


NEVER_ENDS = """
import asyncio

import pytest


@pytest.mark.kvstress_explore(schedules=3, strategy="random", seed=0)
@pytest.mark.asyncio
async def test_never_ends():
    async def watchdog():
        while True:
            await asyncio.sleep(1.0)

    ticking = asyncio.create_task(watchdog())
    await asyncio.Event().wait()  # nobody sets it
    ticking.cancel()
"""


def test_a_pytest_asyncio_test_that_never_ends_fails_at_an_hour(pytester: pytest.Pytester) -> None:
    """The pytest-asyncio marker's loop is bounded as explore's own is: it ran on for ever."""
    pytester.makeini(INI)
    pytester.makepyfile(test_never=NEVER_ENDS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=120)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*TimeLimitExceeded*virtual time would pass 3600 s*"])


def test_a_replay_command_quotes_a_node_id_a_shell_would_split() -> None:
    """Parametrize ids with a space, a ``;`` or a quote are quoted (pasted as printed, ``[two
    words]`` ran ``words]`` as a second path, and ``[a;b]`` a second command), and so are ids with
    brackets (zsh takes them as a glob: "no matches found"); plain ids stay as pytest prints
    them; braces survive the schedule's formatting."""
    from types import SimpleNamespace

    from kvstress.pytest_plugin._explore import _replay_hint

    def command(nodeid: str) -> str:
        return _replay_hint(SimpleNamespace(nodeid=nodeid)).format("ks1:AB")  # type: ignore[arg-type]

    assert command("t.py::test") == "pytest --kvstress-replay=ks1:AB t.py::test"
    assert command("t.py::test[0-asyncio]") == "pytest --kvstress-replay=ks1:AB 't.py::test[0-asyncio]'"
    assert command("t.py::test[two words]") == "pytest --kvstress-replay=ks1:AB 't.py::test[two words]'"
    assert command("t.py::test[a;b]") == "pytest --kvstress-replay=ks1:AB 't.py::test[a;b]'"
    assert command("t.py::test[x'y]") == """pytest --kvstress-replay=ks1:AB 't.py::test[x'"'"'y]'"""
    assert command("t.py::test[{k}]") == "pytest --kvstress-replay=ks1:AB 't.py::test[{k}]'"


def test_a_replay_command_names_the_test_from_where_pytest_was_started(tmp_path: Path) -> None:
    """``pytest proj`` from the parent directory: the node id is the rootdir's (``tests/...``),
    and the line pasted there found no such file (a blind team's CI)."""
    from types import SimpleNamespace

    from kvstress.pytest_plugin._explore import _replay_hint

    def command(rootdir: Path, started: Path) -> str:
        config = SimpleNamespace(rootpath=rootdir, invocation_params=SimpleNamespace(dir=started))
        item = SimpleNamespace(nodeid="tests/test_x.py::test[a]", config=config)
        return _replay_hint(item).format("ks1:AB")  # type: ignore[arg-type]

    root = tmp_path / "proj"
    assert command(root, tmp_path) == "pytest --kvstress-replay=ks1:AB 'proj/tests/test_x.py::test[a]'"
    assert command(root, root) == "pytest --kvstress-replay=ks1:AB 'tests/test_x.py::test[a]'"
    assert command(root, root / "tests") == "pytest --kvstress-replay=ks1:AB 'test_x.py::test[a]'"


def test_the_summary_lists_explored_tests_run_by_xdist_workers(pytester: pytest.Pytester) -> None:
    """Under ``-n 2`` the tests run in workers, and only their reports reach the controller that
    prints the summary: each passing test's line comes from its report (none was printed)."""
    pytester.makepyfile(
        test_two="""
import pytest

@pytest.mark.kvstress_explore(schedules=5, seed=1)
def test_a():
    pass

@pytest.mark.kvstress_explore(schedules=7, seed=1)
def test_b():
    pass
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2")
    result.assert_outcomes(passed=2)
    out = result.stdout.str()
    assert "test_two.py::test_a: explored 5 schedules" in out
    assert "test_two.py::test_b: explored 7 schedules" in out


UNITTEST_SUITE = """
import asyncio
import threading
import unittest

import pytest


class TestIso(unittest.IsolatedAsyncioTestCase):
    @pytest.mark.kvstress_explore(schedules=5)
    async def test_iso(self):
        await asyncio.sleep(0.001)

    async def test_unmarked(self):
        await asyncio.sleep(0.001)


class TestSync(unittest.TestCase):
    @pytest.mark.kvstress_explore(schedules=3)
    def test_sync(self):
        thread = threading.Thread(target=lambda: None)
        thread.start()
        thread.join()
"""


def test_a_marked_unittest_method_fails_at_setup_saying_why(pytester: pytest.Pytester) -> None:
    """A marked IsolatedAsyncioTestCase method hung pytest (schedule after schedule of nothing:
    unittest runs the method, where no schedule reaches), and a marked TestCase method that
    started a thread was refused as if a fixture had started it. Both now fail at setup, in one
    line that says what to write instead; their unmarked neighbour runs as ever."""
    pytester.makeini(INI)
    pytester.makepyfile(test_units=UNITTEST_SUITE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--strict-markers", timeout=120)
    result.assert_outcomes(passed=1, errors=2)
    out = result.stdout.str()
    assert out.count("does not run a unittest.TestCase method") >= 2
    assert "Traceback" not in out


ANYIO_TRIO_FIXTURE = """
import anyio
import pytest
import kvstress


@pytest.fixture
def anyio_backend():
    return "trio"


@pytest.fixture
async def pool():
    return kvstress.AsyncBlockPool(2, (2, 4))


@pytest.mark.kvstress_explore(schedules=5, seed=1)
@pytest.mark.anyio
async def test_explored(pool):
    block = await pool.acquire()
    await pool.release(block)


@pytest.mark.kvstress_explore(schedules=30, strategy="dfs", seed=1)
@pytest.mark.anyio
async def test_dfs(pool):
    async def use():
        block = await pool.acquire()
        await pool.release(block)

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(use)
        tasks.start_soon(use)
"""


def test_an_async_fixture_under_anyios_trio_runner(pytester: pytest.Pytester) -> None:
    """anyio's plugin keeps a trio run open in the test's thread for its async fixtures, and
    trio refuses a run inside a run: every explored trio test with an async fixture failed
    "schedule 1", RuntimeError: Attempted to call run() from inside a run() (a blind user's).
    The schedules run in a thread of their own there."""
    pytester.makeini(INI)
    pytester.makepyfile(test_trio_fixture=ANYIO_TRIO_FIXTURE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=120)
    result.assert_outcomes(passed=2)
    assert "test_explored: explored 5 schedules" in result.stdout.str()
    # The backend comes from a fixture, known only once it is set up: dfs, made for asyncio
    # before then, ran one schedule on trio and called that all of them (a blind user's).
    assert "test_dfs: explored 30 schedules (strategy 'dfs', seed 1)" in result.stdout.str()


READERS = """
import threading


class SharedPrefix:
    def __init__(self, pool, block, readers):
        self.pool, self.block, self.readers = pool, block, readers

    def done(self):
        left = self.readers - 1  # a read-modify-write without a lock (the bug)
        self.readers = left
        if left == 0:
            self.pool.release(self.block)


def run(pool):
    block = pool.acquire()
    shared = SharedPrefix(pool, block, 2)
    threads = [threading.Thread(target=shared.done) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
"""

READERS_TEST = """
import pytest
import kvstress
import readers


@pytest.mark.kvstress_explore(schedules=200, seed=0)
def test_readers():
    with kvstress.audit(kvstress.ThreadedBlockPool(2, (2, 4))) as pool:
        readers.run(pool)
"""


COUNTER = """
class Sharers:
    def __init__(self):
        self.count = 0

    def join(self):
        count = self.count  # a read-modify-write without a lock (the bug)
        self.count = count + 1
"""

COUNTER_TEST = """
import threading

import pytest

from counter import Sharers


@pytest.mark.kvstress_explore(schedules=300, seed=1, strategy="random")
def test_sharers():
    sharers = Sharers()
    threads = [threading.Thread(target=sharers.join) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sharers.count == 2
"""


def test_a_race_in_the_users_own_module_is_found_without_naming_it(pytester: pytest.Pytester) -> None:
    """The code under test is seldom in the test's file: a lost update between two threads in
    the user's ``readers.py`` passed 200 schedules (its lines were no scheduling points), and was
    found at the second once named in ``modules``. The user's own modules that a plain test
    reaches are traced now, whatever they import: a counter class whose module imports nothing
    of threading, run by threads the test starts, passed 300 schedules while only the modules
    that use threads were."""
    pytester.makeini(INI)
    pytester.makepyfile(readers=READERS, test_readers=READERS_TEST)
    pytester.makepyfile(counter=COUNTER, test_counter=COUNTER_TEST)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=120)
    result.assert_outcomes(failed=2)
    assert "[lost-block]" in result.stdout.str()
    assert "assert 1 == 2" in result.stdout.str()


def test_a_failing_schedule_of_a_violation_names_its_invariant_in_junit() -> None:
    """``kvstress_invariant`` beside the schedule and the replay command, for a violation (in an
    exception group too: a task group's)."""
    from types import SimpleNamespace

    from kvstress import InvariantViolation
    from kvstress.explorer._run import Outcome
    from kvstress.pytest_plugin._explore import _failure_properties

    item = SimpleNamespace(user_properties=[])
    found = BaseExceptionGroup("tasks", [InvariantViolation("lost-block", "block 1 leaked")])
    _failure_properties(item, Outcome(3, exhausted=False, failure=found, schedule=None), "pytest --r={} x")  # type: ignore[arg-type]
    assert item.user_properties == [
        ("kvstress_schedule", "None"),
        ("kvstress_replay", "pytest --r=None x"),
        ("kvstress_invariant", "lost-block"),
    ]


def test_an_explored_tests_durations_count_every_schedule(pytester: pytest.Pytester) -> None:
    """``--durations`` and JUnit's time showed the last schedule's phases: 0.01 s for a test
    that explored for two minutes (a blind user's). Each schedule's body spends CPU time (read
    with a clock no run replaces); the call's duration is at least all of it."""
    pytester.makepyfile(
        test_spent="""
import time

import pytest

SPENT = []

@pytest.mark.kvstress_explore(schedules=6, strategy="random")
def test_work():
    began = time.process_time()
    while time.process_time() - began < 0.02:
        pass
    SPENT.append(time.process_time() - began)

def test_total():
    print(f"SPENT={sum(SPENT)!r}")
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-s", "--junitxml=junit.xml")
    result.assert_outcomes(passed=2)
    spent = float(re.search(r"SPENT=([0-9.e-]+)", result.stdout.str()).group(1))  # type: ignore[union-attr]
    assert spent >= 6 * 0.02
    cases = {case.get("name"): case for case in ET.parse(pytester.path / "junit.xml").iter("testcase")}
    assert float(cases["test_work"].get("time", "0")) >= spent


STRAYS = """
import asyncio
import os
import threading

import anyio
import pytest

from test_seats import lost_update_anyio, two_clients, two_threads

STRAYS = [int(os.environ.get("STRAYS", "0"))]


def stray():
    # A try that the recorded run did not make: as work in real threads that comes back early
    if STRAYS[0]:
        STRAYS[0] -= 1
        return True
    return False


@pytest.fixture
def seats_fixture():
    return []


@pytest.mark.kvstress_explore(schedules=200, seed=3)
@pytest.mark.asyncio
async def test_asyncio_racy(seats_fixture):
    if stray():
        await asyncio.gather(asyncio.sleep(0), asyncio.sleep(0))
    await two_clients(asyncio.sleep, racy=True)


@pytest.mark.kvstress_explore(schedules=50, strategy="random", seed=3)
@pytest.mark.anyio
async def test_anyio_lost_update():
    if stray():
        async with anyio.create_task_group() as group:
            group.start_soon(anyio.sleep, 0)
            group.start_soon(anyio.sleep, 0)
    await lost_update_anyio()


@pytest.mark.kvstress_explore(schedules=200, seed=3)
def test_threads_racy(seats_fixture):
    if stray():
        helper = threading.Thread(target=lambda: None)
        helper.start()
        helper.join()
    two_threads(racy=True)
"""


@pytest.mark.parametrize(
    "test", ["test_asyncio_racy", "test_anyio_lost_update[asyncio]", "test_threads_racy"]
)
def test_a_replay_that_leaves_its_schedule_is_tried_again(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, test: str
) -> None:
    """A replayed try that diverges (work in real threads back at another point) is tried again
    on fresh fixtures; the failure says which try followed the schedule."""
    _suite(pytester)
    pytester.makepyfile(test_strays=STRAYS)
    nodeid = f"test_strays.py::{test}"
    found = pytester.runpytest_subprocess("-p", "no:cacheprovider", nodeid)
    found.assert_outcomes(failed=1)
    schedule = REPLAY.findall(found.stdout.str())[0][0]
    monkeypatch.setenv("STRAYS", "2")
    again = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--kvstress-replay={schedule}", nodeid)
    again.assert_outcomes(failed=1)
    out = again.stdout.str()
    assert "kvstress: the replayed schedule failed" in out
    assert "followed its schedule on try 3 (the 2 before it left the schedule" in out
    if test != "test_asyncio_racy":
        return
    monkeypatch.setenv("STRAYS", "100")
    lost = pytester.runpytest_subprocess("-p", "no:cacheprovider", f"--kvstress-replay={schedule}", nodeid)
    lost.assert_outcomes(failed=1)
    assert "all 20 tries of the replay left the schedule" in lost.stdout.str()


ALARM_CONFTEST = """
import signal

import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item):
    # What pytest-timeout's signal method does: an alarm over the whole protocol whose handler
    # fails the test wherever the main thread is when it fires.
    marker = item.get_closest_marker("alarm")
    if marker is not None:
        def fire(signum, frame):
            pytest.fail("Timeout (>%ss) from pytest-timeout." % marker.args[0])

        signal.signal(signal.SIGALRM, fire)
        signal.setitimer(signal.ITIMER_REAL, marker.args[0])
    yield
    signal.setitimer(signal.ITIMER_REAL, 0)
"""

ALARMED = """
import threading

import pytest


def two_threads():
    lock = threading.Lock()
    seen = []

    def work():
        for _ in range(3):
            with lock:
                seen.append(1)

    workers = [threading.Thread(target=work) for _ in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()


@pytest.mark.alarm(ALARM_S)
@pytest.mark.kvstress_explore(schedules=1000000, strategy="random", seed=0)
def test_explores_past_its_timeout():
    two_threads()


def test_after_it():
    pass
"""


@pytest.mark.parametrize("alarm_s", [0.05, 0.3, 1.0])
def test_a_timeout_alarm_fails_the_explored_test_not_the_session(
    pytester: pytest.Pytester, alarm_s: float
) -> None:
    """pytest-timeout's alarm (the signal method) fails the test wherever it lands: in the first
    marked test's protocol (where the explorer and torch were imported: an INTERNALERROR that
    ended the session), between two phases, or in a schedule, whose failure then says the
    timeout stopped it and offers no replay that cannot work."""
    pytester.makeini(INI + "markers = alarm\n")
    pytester.makeconftest(ALARM_CONFTEST)
    pytester.makepyfile(test_alarmed=ALARMED.replace("ALARM_S", str(alarm_s)))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly", "-rA")
    out = result.stdout.str() + result.stderr.str()
    assert "INTERNALERROR" not in out, out
    assert result.ret == pytest.ExitCode.TESTS_FAILED, out
    assert "PASSED test_alarmed.py::test_after_it" in out, out
    assert "Timeout (>" in out and "--kvstress-replay=" not in out, out


CUT_IN_TEARDOWN = """
import pytest

torn_down = []


@pytest.fixture
def resource():
    yield
    torn_down.append(1)
    if len(torn_down) == 3:  # pytest-timeout's alarm, landing in the third schedule's teardown
        pytest.fail("Timeout (>1.0s) from pytest-timeout.")


@pytest.mark.kvstress_explore(schedules=10, seed=0)
def test_cut(resource):
    pass
"""


def test_a_timeout_alarm_in_a_schedules_teardown_says_it_cut_the_exploration(
    pytester: pytest.Pytester,
) -> None:
    """The call passed and the teardown failed with the alarm: the test read as passed, an error
    beside it, and nothing said that seven schedules never ran (a blind team's CI)."""
    pytester.makeini(INI)
    pytester.makepyfile(test_cut=CUT_IN_TEARDOWN)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly")
    result.assert_outcomes(passed=1, errors=1)
    out = result.stdout.str()
    assert "stopped the exploration in the teardown of schedule 3" in out, out
    assert "--kvstress-replay=" not in out


def test_under_pytest_repeat_the_replay_line_carries_its_count(pytester: pytest.Pytester) -> None:
    """pytest-repeat's copy ``test[1-2]`` exists only under its ``--count``: the replay line
    names it (it said "not found" run as printed, a blind team's)."""
    pytest.importorskip("pytest_repeat")
    _suite(pytester)
    nodeid = "test_seats.py::test_threads_racy"
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--count", "2", nodeid)
    result.assert_outcomes(failed=2)
    line = next(line for line in result.stdout.lines if "replay:   pytest --kvstress-replay=" in line)
    assert line.endswith("'test_seats.py::test_threads_racy[1-2]' --count 2"), line
    schedule = REPLAY.search(line)
    assert schedule is not None
    again = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", f"--kvstress-replay={schedule.group(1)}", f"{nodeid}[1-2]", "--count", "2"
    )
    again.assert_outcomes(failed=1)


SETUP_FIRST_CONFTEST = """
import pytest


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    # As pytest-rerunfailures does: per-test state begun at the setup report, used after it.
    report = yield
    if report.when == "setup":
        item.state_from_setup = []
    else:
        item.state_from_setup.append(report.when)
    return report
"""


def test_an_alarm_before_the_first_schedule_reports_setup_first(pytester: pytest.Pytester) -> None:
    """The alarm landed as the explored test's modules were imported, before any phase: its
    failure was reported from the call on, and pytest-rerunfailures, whose state begins at the
    setup report, raised an INTERNALERROR."""
    pytester.makeini(INI)
    pytester.makeconftest(SETUP_FIRST_CONFTEST)
    pytester.makepyfile(alarm_now='import pytest\npytest.fail("Timeout (>1s) from pytest-timeout.")\n')
    pytester.makepyfile(
        test_early="""
import pytest

@pytest.mark.kvstress_explore(schedules=3, modules=["alarm_now"])
def test_explored():
    pass

def test_after_it():
    pass
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly", "-rA")
    out = result.stdout.str() + result.stderr.str()
    assert "INTERNALERROR" not in out, out
    result.assert_outcomes(failed=1, passed=1)
    assert "Timeout (>1s)" in out, out


PYTEST_TRIO_SUITE = """
import pytest
import trio

import kvstress


@pytest.fixture
async def pool():
    pool = kvstress.audit(kvstress.AsyncBlockPool(2, (2, 4)))
    yield pool
    pool.close()


@pytest.fixture
async def server(nursery, pool):
    send, receive = trio.open_memory_channel(10)

    async def serve():
        async for done in receive:
            block = await pool.acquire()
            await trio.sleep(0.001)
            await pool.release(block)
            done.set()

    nursery.start_soon(serve)
    yield send
    await send.aclose()


@pytest.mark.kvstress_explore(schedules=30, seed=3)
async def test_serves(server, autojump_clock):
    start = autojump_clock.current_time()
    requests = [trio.Event() for _ in range(3)]
    for done in requests:
        await server.send(done)
    for done in requests:
        await done.wait()
    assert trio.current_time() - start >= 0.003  # the run's clock is the test's


@pytest.mark.kvstress_explore(schedules=5, seed=3)
@pytest.mark.parametrize("count", [1, 2])
async def test_parametrised(server, count):
    requests = [trio.Event() for _ in range(count)]
    for done in requests:
        await server.send(done)
    for done in requests:
        await done.wait()


@pytest.mark.kvstress_explore(schedules=10, seed=3)
async def test_jumps_its_mock_clock(mock_clock):
    async def jump():
        await trio.sleep(0)
        mock_clock.jump(5)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(jump)
        await trio.sleep(5)


@pytest.mark.kvstress_explore(schedules=200, strategy="random", seed=3)
async def test_shared_without_retain(pool):
    block = await pool.acquire()

    async def reader():
        await trio.sleep(0)
        await pool.release(block)  # the bug: a second holder, no retain

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader)
        nursery.start_soon(reader)
"""


def test_pytest_trio_tests_are_explored_on_trio(pytester: pytest.Pytester) -> None:
    """pytest-trio's tests (``trio_mode``, async fixtures set up in the test's trio run, the
    ``nursery`` fixture, its clocks, parametrised ones) are explored on trio, each schedule a
    trio run of its own with its fixtures: they ran on the asyncio loop, and every one failed
    "schedule 1" (AttributeError: 'RunContext' object has no attribute 'runner')."""
    pytest.importorskip("pytest_trio")
    pytester.makeini(INI + "trio_mode = true\n")
    pytester.makepyfile(test_trio_mode=PYTEST_TRIO_SUITE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly", timeout=120)
    result.assert_outcomes(passed=4, failed=1)
    out = result.stdout.str()
    assert "test_serves: explored 30 schedules (strategy 'pct', seed 3)" in out
    # a parametrised test's function (its parameters bound) named as the test: pytest-trio
    # names its task after it, and every such test failed "schedule 1" (a blind user's)
    assert "test_parametrised[2]: explored 5 schedules" in out
    assert "test_jumps_its_mock_clock: explored 10 schedules" in out
    assert "[double-release]" in out
    replay = re.search(r"pytest (--kvstress-replay=ks1:\S+) (\S+)", out)
    assert replay is not None, out
    again = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", replay.group(1), replay.group(2), timeout=120
    )
    again.assert_outcomes(failed=1)
    assert "[double-release]" in again.stdout.str()
    assert "the replayed schedule failed" in again.stdout.str()


def test_a_marked_test_whose_loop_never_sleeps_says_time_stood_still(pytester: pytest.Pytester) -> None:
    """The note that virtual time stood still (``ControlledEventLoop.stood_still``) comes on a
    marked pytest-asyncio test's failure too."""
    pytester.makeini(INI)
    pytester.makepyfile(
        test_busy="""
import asyncio

import pytest


@pytest.mark.kvstress_explore(schedules=3, strategy="random", seed=0)
async def test_busy():
    for _ in range(3_000):
        await asyncio.sleep(0)
    raise RuntimeError("guard: 3000 rounds")
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "RuntimeError: guard: 3000 rounds" in out
    assert re.search(r"virtual time had stood at 0 s for the last [\d,]+ steps", out), out
