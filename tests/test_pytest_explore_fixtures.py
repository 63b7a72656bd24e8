"""An explored asyncio test whose async fixture starts a background task (a serving loop's
engine): the fixture, the task and the test share one controlled loop per schedule.

Before, the fixture ran on pytest-asyncio's own loop, so its task never ran while the test
waited on it on the controlled loop: a correct service was reported as a deadlock. The inner
sessions run in a subprocess so the installed ``pytest11`` entry point loads.
"""

from __future__ import annotations

import re
import shlex

import pytest

pytest_plugins = ["pytester"]

INI = """
[pytest]
asyncio_default_fixture_loop_scope = function
"""

SUITE = """
import asyncio

import pytest
import pytest_asyncio

RACY = {racy}
CHECK_IN_TEARDOWN = {in_teardown}


class Booking:
    '''One seat; requests go through a queue to a worker task, one task per request.'''

    def __init__(self):
        self.left = 1
        self.requests = asyncio.Queue()

    async def serve(self):
        async with asyncio.TaskGroup() as group:
            while True:
                reply = await self.requests.get()
                group.create_task(self.book(reply))

    async def book(self, reply):
        if self.left > 0:
            if RACY:
                await asyncio.sleep(0)  # a check-then-act split by an await
            self.left -= 1
            reply.set_result(True)
        else:
            reply.set_result(False)

    async def request(self):
        reply = asyncio.get_running_loop().create_future()
        await self.requests.put(reply)
        return await reply


@pytest_asyncio.fixture
async def service():
    booking = Booking()
    worker = asyncio.create_task(booking.serve())
    yield booking
    worker.cancel()
    with pytest.raises(asyncio.CancelledError):
        await worker
    if CHECK_IN_TEARDOWN:
        assert booking.left >= 0, "overbooked"


@pytest_asyncio.fixture
async def fixture_loop():
    return asyncio.get_running_loop()


async def two_clients(service):
    async def late():
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        return await service.request()

    return await asyncio.gather(service.request(), late())


@pytest.mark.asyncio
@pytest.mark.kvstress_explore(schedules=100, strategy="random", seed=5)
async def test_explored(service):
    answers = await two_clients(service)
    if not CHECK_IN_TEARDOWN:
        assert service.left >= 0, "overbooked"
        assert sorted(answers) == [False, True]


@pytest.mark.asyncio
async def test_plain(service):
    answers = await two_clients(service)
    assert service.left == 0 and sorted(answers) == [False, True]


@pytest.mark.asyncio
@pytest.mark.kvstress_explore(schedules=3)
async def test_fixture_shares_the_loop(fixture_loop):
    loop = asyncio.get_running_loop()
    assert fixture_loop is loop and type(loop).__name__ == "ControlledEventLoop"


@pytest.mark.asyncio
async def test_unmarked_keeps_the_stock_loop(fixture_loop):
    loop = asyncio.get_running_loop()
    assert fixture_loop is loop and type(loop).__name__ != "ControlledEventLoop"
"""

REPLAY = re.compile(r"replay:\s+pytest --kvstress-replay=(ks1:\S+) (\S+)")


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "--strict-markers", *args)


def _suite(pytester: pytest.Pytester, racy: bool, in_teardown: bool = False) -> None:
    pytester.makeini(INI)
    pytester.makepyfile(test_booking=SUITE.format(racy=racy, in_teardown=in_teardown))


def test_a_correct_service_started_by_a_fixture_is_explored_clean(pytester: pytest.Pytester) -> None:
    """The fixture's worker runs beside the explored test: 100 schedules pass, where each used to
    end in a deadlock; the fixture runs on the schedule's loop and unmarked tests keep theirs."""
    _suite(pytester, racy=False)
    result = _run(pytester)
    result.assert_outcomes(passed=4)
    out = result.stdout.str()
    assert "test_booking.py::test_explored: explored 100 schedules (strategy 'random', seed 5)" in out
    assert "test_booking.py::test_fixture_shares_the_loop: explored 3 schedules" in out


PARAM_MARKED = """
import asyncio

import pytest
import pytest_asyncio


@pytest_asyncio.fixture
async def waker():
    # A task the fixture starts, waking the test through an event.
    ready = asyncio.Event()
    task = asyncio.create_task(asyncio.sleep(0.01))
    task.add_done_callback(lambda _: ready.set())
    yield asyncio.get_running_loop(), ready
    task.cancel()


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "explored", [pytest.param(True, marks=pytest.mark.kvstress_explore(schedules=5, seed=1)), False]
)
async def test_param(waker, explored):
    fixture_loop, ready = waker
    loop = asyncio.get_running_loop()
    assert fixture_loop is loop
    assert (type(loop).__name__ == "ControlledEventLoop") == explored
    await ready.wait()
"""


def test_a_marker_given_through_pytest_param_runs_the_fixtures_on_the_schedules_loop(
    pytester: pytest.Pytester,
) -> None:
    """``pytest.param(..., marks=kvstress_explore(...))``: the fixtures ran on the stock loop and
    the call on the schedule's, and a correct test was a ``Deadlock`` at schedule 1 (a blind
    user's); its unmarked sibling keeps the stock loop."""
    pytester.makeini(INI)
    pytester.makepyfile(test_param_marked=PARAM_MARKED)
    result = _run(pytester)
    result.assert_outcomes(passed=2)
    assert "test_param[True]: explored 5 schedules" in result.stdout.str()


def test_a_race_in_a_fixtures_worker_is_found_and_replays(pytester: pytest.Pytester) -> None:
    """The racy worker passes plain pytest-asyncio; explored, it fails with a schedule whose
    replay (setup, call and all) fails the same way."""
    _suite(pytester, racy=True)
    result = _run(pytester)
    result.assert_outcomes(passed=3, failed=1)
    out = result.stdout.str()
    assert "FAILED test_booking.py::test_explored" in out and "AssertionError: overbooked" in out
    [(schedule, nodeid)] = set(REPLAY.findall(out))  # CI's short summary repeats it
    again = _run(pytester, f"--kvstress-replay={schedule}", nodeid)
    again.assert_outcomes(failed=1)  # and no teardown error: the failed schedule's teardown runs in order
    replayed = again.stdout.str()
    assert "kvstress: the replayed schedule failed" in replayed and "AssertionError: overbooked" in replayed


def test_a_race_seen_in_a_fixtures_teardown_replays_through_it(pytester: pytest.Pytester) -> None:
    """A schedule whose test passes and whose fixture's teardown fails is named with the
    teardown's own choices, so its replay fails in the teardown too."""
    _suite(pytester, racy=True, in_teardown=True)
    result = _run(pytester)
    result.assert_outcomes(passed=4, errors=1)
    out = result.stdout.str()
    assert "passed, and then its fixtures' teardown failed" in out
    [(schedule, nodeid)] = set(REPLAY.findall(out))  # CI's short summary repeats it
    again = _run(pytester, f"--kvstress-replay={schedule}", nodeid)
    again.assert_outcomes(passed=1, errors=1)
    replayed = again.stdout.str()
    assert "AssertionError: overbooked" in replayed and "ScheduleDivergence" not in replayed
    # The failure did come back, in the teardown: nothing says it did not (a blind user's).
    assert "did not happen again" not in replayed
    assert "its call passed; its fixtures' teardown, where the failure recorded may come back" in replayed


DRAINER = """
import queue
import threading

import pytest

import kvstress


@pytest.fixture
def drained_pool():
    # Starts a drainer thread that releases what the test queues, and leaves it running.
    pool = kvstress.ThreadedBlockPool(2, (2,))
    returned = queue.Queue()

    def drain():
        while (block := returned.get()) is not None:
            pool.release(block)

    worker = threading.Thread(target=drain, name="drainer")
    worker.start()
    yield pool, returned
    returned.put(None)
    worker.join()
"""

DRAINED_TEST = """
import pytest


@pytest.mark.kvstress_explore(schedules=20, seed=0)
def test_explored(drained_pool):
    pool, returned = drained_pool
    for _ in range(4):
        block = pool.acquire(timeout=5)
        assert block is not None
        returned.put(block)
"""


def test_a_thread_a_fixture_leaves_running_is_refused_not_a_finding(pytester: pytest.Pytester) -> None:
    """A plain explored test whose fixture (in conftest) starts a drainer thread its waits depend
    on (daemon or not): the thread ran on real time beside the schedule, virtual time jumped past
    the test's 5 s wait, and the correct test failed its own assertion as a failing schedule (a blind sweep).
    Refused now, naming the thread and what to do, before any schedule runs. In the test's own
    module the fixture's thread is a cooperative one, and its start says the same."""
    for conftest in (DRAINER, DRAINER.replace('name="drainer"', 'name="drainer", daemon=True')):
        pytester.makeconftest(conftest)
        pytester.makepyfile(test_drain=DRAINED_TEST)
        result = _run(pytester)
        result.assert_outcomes(failed=1)
        out = result.stdout.str()
        assert "a fixture started thread(s) 'drainer', still running as the schedule begins" in out
        assert "assert None is not None" not in out and "--kvstress-replay" not in out
    pytester.makeconftest("")
    pytester.makepyfile(test_drain=DRAINER + DRAINED_TEST.replace("import pytest", ""))
    result = _run(pytester)
    result.assert_outcomes(errors=1)
    assert "a thread a fixture starts cannot be scheduled; start it in the test itself" in result.stdout.str()


RESET_THREAD_SUITE = """
import asyncio
import queue
import threading
from collections import deque

import pytest
import pytest_asyncio


class ResetThreadPool:
    '''Released blocks are zeroed by a worker thread, started in the constructor, and handed back
    on the loop with call_soon_threadsafe.'''

    def __init__(self, size, notify=True):
        self.free = deque(range(size))
        self.notify = notify
        self.work = queue.Queue()
        self.changed = None
        self.thread = threading.Thread(target=self._zero_and_offer, daemon=True)
        self.thread.start()

    def _zero_and_offer(self):
        while (item := self.work.get()) is not None:
            loop, block = item
            loop.call_soon_threadsafe(self._offer, block)

    def _offer(self, block):
        self.free.append(block)
        if self.notify:
            asyncio.ensure_future(self._wake())

    async def _wake(self):
        async with self.changed:
            self.changed.notify()

    async def acquire(self, timeout):
        self.changed = self.changed or asyncio.Condition()
        async with self.changed:
            async with asyncio.timeout(timeout):
                await self.changed.wait_for(lambda: self.free)
            return self.free.popleft()

    async def release(self, block):
        self.work.put((asyncio.get_running_loop(), block))

    def close(self):
        self.work.put(None)
        self.thread.join()


MODULE_POOL = ResetThreadPool(1)


@pytest.fixture
def pool():
    made = ResetThreadPool(1)
    yield made
    made.close()


@pytest.fixture(scope="session")
def shared_pool():
    made = ResetThreadPool(1)
    yield made
    made.close()


@pytest.fixture
def silent_pool():
    made = ResetThreadPool(1, notify=False)
    yield made
    made.close()


async def hand_over(pool):
    pool.changed = None  # a Condition of this schedule's loop
    block = await pool.acquire(1.0)
    waiter = asyncio.ensure_future(pool.acquire(0.5))
    await asyncio.sleep(0)
    await pool.release(block)
    assert await waiter == block
    await pool.release(block)
    await pool.acquire(0.5)  # back before this schedule's loop closes: the pool outlives it
    pool.free.append(block)


@pytest.mark.kvstress_explore(schedules=30, seed=0)
async def test_function_fixture(pool):
    await hand_over(pool)


@pytest.mark.kvstress_explore(schedules=30, seed=0)
async def test_session_fixture(shared_pool):
    await hand_over(shared_pool)


@pytest.mark.kvstress_explore(schedules=30, seed=0)
async def test_module_level():
    await hand_over(MODULE_POOL)


@pytest.mark.kvstress_explore(schedules=30, seed=0)
async def test_never_woken(silent_pool):
    await hand_over(silent_pool)
"""


def test_a_reset_thread_started_before_the_loop_is_waited_for(pytester: pytest.Pytester) -> None:
    """A pool built by a fixture (function or session scope) or at import starts its reset worker
    before the schedule's loop exists: the loop watches it as one started meanwhile. Before, the
    idle loop moved virtual time past the waiter's 0.5 s while the worker was handing the block
    back, and each correct test failed with TimeoutError; the pool that never wakes its waiter
    still fails."""
    pytester.makeini(INI)
    pytester.makepyfile(test_reset_thread=RESET_THREAD_SUITE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=120)
    result.assert_outcomes(passed=3, failed=1)
    out = result.stdout.str()
    assert "FAILED test_reset_thread.py::test_never_woken - TimeoutError" in out
    for name in ("function_fixture", "session_fixture", "module_level"):
        assert f"test_reset_thread.py::test_{name}: explored 30 schedules" in out


DIES_THEN_DEADLOCKS = """
import asyncio

import pytest

import kvstress


@pytest.mark.kvstress_explore(schedules=5, seed=0)
async def test_worker_dies_then_the_test_waits():
    pool = kvstress.audit(kvstress.AsyncBlockPool(2, (4,)))
    done = asyncio.Event()

    async def worker():
        block = await pool.acquire(0)
        await pool.release(block)
        await pool.release(block)  # a double release: the audit raises, the worker dies
        done.set()

    task = asyncio.create_task(worker())
    await done.wait()  # never set: the loop deadlocks
    await task
"""


def test_a_task_that_died_with_a_violation_leaves_a_report_not_an_internal_error(
    pytester: pytest.Pytester,
) -> None:
    """The worker's violation is the failure, the deadlock it led to a note on it. Before, the
    dead task was collected inside pytest's parse of the failure, its log parsed again inside
    that, and CPython 3.11.7's parser failed: an INTERNALERROR instead of the report."""
    pytester.makeini(INI)
    pytester.makepyfile(test_dies=DIES_THEN_DEADLOCKS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=120)
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "INTERNALERROR" not in out
    assert "[double-release]" in out
    assert "kvstress: the run went on and then failed with Deadlock" in out


CLASS_SUITE = """
import asyncio
import threading

import pytest


@pytest.fixture
def checked():
    yield
    raise AssertionError("teardown found a leak")


class TestEngine:
    @pytest.mark.parametrize("clients", [2])
    @pytest.mark.kvstress_explore(schedules=5, strategy="random", seed=0)
    def test_threads(self, clients):
        done = []
        workers = [threading.Thread(target=done.append, args=(i,)) for i in range(clients)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        assert done == [0, 1]

    @pytest.mark.parametrize("clients", [2])
    @pytest.mark.asyncio
    @pytest.mark.kvstress_explore(schedules=5, strategy="random", seed=0)
    async def test_tasks(self, clients):
        done = []

        async def client(i):
            await asyncio.sleep(0)
            done.append(i)

        await asyncio.gather(*(client(i) for i in range(clients)))
        assert done == [0, 1]

    @pytest.mark.parametrize("clients", [2])
    @pytest.mark.kvstress_explore(schedules=3, strategy="random", seed=0)
    def test_teardown(self, checked, clients):
        pass
"""


def test_a_failing_parametrised_method_of_a_test_class_is_a_failure_that_replays(
    pytester: pytest.Pytester,
) -> None:
    """Every failure of a parametrised method (its call or its fixtures' teardown, threads or
    tasks) was a pytest INTERNALERROR, "could not get code object", exit 3, the session's other
    results lost (a blind user's suite): each is a failure with its replay command now."""
    pytester.makepyfile(test_engine=CLASS_SUITE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=120)
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    result.assert_outcomes(failed=2, passed=1, errors=1)  # the teardown: its call passed
    replays = [line for line in result.stdout.lines if "replay:   pytest --kvstress-replay=" in line]
    for name in ("test_threads", "test_tasks"):
        line = next(line for line in replays if name in line)
        command = shlex.split(line.split("replay:", 1)[1])
        again = pytester.runpytest_subprocess("-p", "no:cacheprovider", *command[1:], timeout=120)
        assert "INTERNALERROR" not in again.stdout.str()
        again.assert_outcomes(failed=1)


STUCK_POOL = """
import threading


class CondPool:
    '''A free list under one Condition; only the calls the test below makes.'''

    def __init__(self):
        self._free = [0, 1]
        self._cond = threading.Condition()

    def acquire(self):
        with self._cond:
            self._cond.wait_for(lambda: self._free)
            return self._free.pop()

    def release(self, block):
        with self._cond:
            self._free.append(block)
            self._cond.notify()
"""

STUCK_TEST = """
import threading

import pytest

from stuckpool import CondPool


def work(pool):
    def worker():
        for _ in range(2):
            pool.release(pool.acquire())

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


@pytest.fixture(scope="module")
def shared_pool():
    return CondPool()


def test_plain_first(shared_pool):
    work(shared_pool)


@pytest.mark.kvstress_explore(schedules=200, strategy="pct", seed=0)
def test_explored(shared_pool):
    work(shared_pool)
"""


def test_a_thread_stuck_on_a_wider_fixtures_real_lock_says_so(pytester: pytest.Pytester) -> None:
    """A module-scoped pool that an earlier, unexplored test built holds a real Condition: a
    controlled thread waiting on it while a parked one holds it is stuck, which read as a bare
    StuckThread, and its replay (run alone, building the pool cooperatively) diverged (a blind
    user's correct pool). The failure now names the fixture's real primitive and what to do."""
    pytester.makepyfile(stuckpool=STUCK_POOL, test_stuck=STUCK_TEST)
    result = _run(pytester)
    result.assert_outcomes(passed=1, failed=1)
    assert "the test's fixtures hold shared_pool._cond (a real threading.Condition)" in result.stdout.str()


SHELF = """
import threading


class Shelf:
    '''Items under a lock; take() calls back while it holds it.'''

    def __init__(self):
        self._lock = threading.Lock()
        self.taken = []

    def take(self, item, on_take):
        with self._lock:
            on_take(item)
            self.taken.append(item)
"""

SHELF_CONFTEST = """
import pytest

from shelf import Shelf


@pytest.fixture
def shelf_cls():
    return Shelf
"""

SHELF_TEST = """
import threading

import pytest


def note(item):
    seen = item
    return seen


@pytest.mark.kvstress_explore(schedules=20, strategy="random", seed=0)
def test_two_takers(shelf_cls):
    shelf = shelf_cls()
    workers = [threading.Thread(target=shelf.take, args=(i, note)) for i in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert sorted(shelf.taken) == [0, 1]
"""


def test_a_class_a_fixture_hands_the_test_is_followed_as_the_tests_own_modules_are(
    pytester: pytest.Pytester,
) -> None:
    """A class that reaches the test only through a fixture (a conftest's) had its module left
    alone: the lock its objects make was a real one, and a controlled thread waiting on it while
    a parked thread held it was stuck for 5 s, then a teardown leak blamed on the test (a blind
    user's engine, until it named the module in ``modules=``)."""
    pytester.makepyfile(shelf=SHELF, conftest=SHELF_CONFTEST, test_shelf=SHELF_TEST)
    result = _run(pytester)
    result.assert_outcomes(passed=1)
    assert "explored 20 schedules" in result.stdout.str()
