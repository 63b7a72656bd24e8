"""The pytest plugin, end to end: inner pytest sessions (pytester, in a subprocess so the
installed ``pytest11`` entry point loads) run user-style suites with the ``kvstress`` fixture.

Inner sessions import torch, so there are three, each checking several things.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from kvstress.pytest_plugin import factory_spec, seed_for
from kvstress.reports import load_report

pytest_plugins = ["pytester"]

INI = """
[pytest]
asyncio_default_fixture_loop_scope = function
"""

# A user's own pools, written in the inner test module so the class-object path is exercised:
# a correct one, and the reset-after-offer race (offered before it is zeroed).
POOLS = """
import threading
from collections import deque

import torch

from kvstress import BlockState


class Block:
    def __init__(self, block_id, data):
        self.id, self.data, self.state, self.refcount = block_id, data, BlockState.FREE, 0


class GoodPool:
    backoff_bound = 0.0

    def __init__(self, num_blocks, block_shape, *, dtype, device=None):
        memory = torch.zeros((num_blocks, *block_shape), dtype=dtype)
        self.num_blocks = num_blocks
        self._free = deque(Block(i, memory[i]) for i in range(num_blocks))
        self._lock = threading.Lock()
        self._not_empty = threading.Condition(self._lock)

    def acquire(self, timeout=None):
        with self._lock:
            if not self._free and not self._not_empty.wait_for(lambda: self._free, timeout):
                return None
            block = self._free.popleft()
            block.state, block.refcount = BlockState.ACQUIRED, 1
            return block

    def mark_in_use(self, block):
        with self._lock:
            if block.state != BlockState.ACQUIRED:
                raise ValueError("not acquired")
            block.state = BlockState.IN_USE

    def retain(self, block):
        with self._lock:
            if block.refcount < 1:
                raise ValueError("not held")
            block.refcount += 1

    def release(self, block):
        with self._lock:
            if block.refcount < 1:
                return False
            block.refcount -= 1
            if block.refcount:
                return False
            block.data.zero_()
            block.state = BlockState.FREE
            self._free.append(block)
            self._not_empty.notify()
            return True

    def free_count(self):
        return len(self._free)

    def free_ids(self):
        return [b.id for b in self._free]


class DoubleReleasePool(GoodPool):
    # The sequential contract catches this one in its fixed program, right after the first short
    # slice: found within any budget, whatever the machine's load (a race may need longer).
    def release(self, block):
        with self._lock:
            if block.refcount < 1:
                return True  # BUG: a double release claims to have returned the block
        return super().release(block)
"""

FUZZ_TESTS = """
import pytest


@pytest.mark.kvstress
def test_library_pool(kvstress):
    kvstress.check("kvstress:ThreadedBlockPool")


def test_own_pool(kvstress):
    kvstress.check(GoodPool)


def test_broken_pool(kvstress):
    kvstress.check(DoubleReleasePool)


def test_local_factory_is_refused(kvstress):
    class LocalPool(GoodPool):
        pass

    with pytest.raises(ValueError, match="LocalPool .* define it at module level"):
        kvstress.check(LocalPool)
"""

# Every test notes its process and the session seed it saw, to compare xdist workers.
SEED_LOG = """
import os

import pytest


@pytest.fixture(autouse=True)
def _log_seed(kvstress, request):
    seeds = request.config.rootpath / "seeds"
    seeds.mkdir(exist_ok=True)
    (seeds / f"{os.getpid()}-{request.node.name}").write_text(str(kvstress.session_seed))
"""

LOOP_TESTS = """
import asyncio

import pytest


@pytest.mark.asyncio
async def test_loop():
    assert (type(asyncio.get_running_loop()).__name__ == "ControlledEventLoop") is CONTROLLED
"""

INI_TESTS = """
import asyncio

import pytest
from hypothesis import settings


@pytest.mark.kvstress
def test_ini_values(kvstress, request):
    assert (kvstress.budget_s, kvstress.session_seed) == (0.5, 1234)
    assert kvstress.report_dir == request.config.rootpath / "ini-reports"


def test_profiles_are_registered_not_loaded():
    assert settings.get_profile("kvstress-dev").max_examples == 50
    ci = settings.get_profile("kvstress-ci")
    assert (ci.derandomize, ci.database, ci.max_examples, ci.deadline) == (True, None, 200, None)
    nightly = settings.get_profile("kvstress-nightly")
    assert (nightly.derandomize, nightly.max_examples) == (False, 2000)
    assert type(nightly.database).__name__ == "DirectoryBasedExampleDatabase"
    assert settings.default.max_examples == 100


@pytest.mark.asyncio
async def test_on_controlled_loop():
    assert type(asyncio.get_running_loop()).__name__ == "ControlledEventLoop"


@pytest.mark.asyncio
async def test_fails_on_controlled_loop():
    await asyncio.sleep(1)
    assert False, "planted failure"
"""


def _fuzz_suite(pytester: pytest.Pytester, *, controlled: bool) -> None:
    pytester.makeini(INI)
    pytester.makepyfile(
        test_pools=POOLS + FUZZ_TESTS,
        test_loop=LOOP_TESTS.replace("CONTROLLED", str(controlled)),
    )


def _only_report(report_dir: Path) -> tuple[Path, dict[str, object]]:
    reports = sorted(report_dir.glob("*.json"))
    assert len(reports) == 1, reports
    return reports[0], json.loads(reports[0].read_text())


def _assert_failure_shown(result: pytest.RunResult, report_dir: Path) -> tuple[Path, dict[str, object]]:
    path, report = _only_report(report_dir)
    result.stdout.fnmatch_lines(
        [
            f"E *InvariantViolation: [[]{report['invariant']}[]] *",
            f"E * report: {path}",
            f"E * replay: kvstress replay {path}",
        ]
    )
    return path, report


def test_check_passes_a_correct_pool_and_fails_a_broken_one(pytester: pytest.Pytester) -> None:
    """Correct pools pass; a broken one fails naming invariant, report and replay, and JUnit gets both."""
    _fuzz_suite(pytester, controlled=False)
    result = pytester.runpytest_subprocess(
        "--strict-markers",
        "--kvstress-budget=1",
        "--kvstress-seed=1",
        "--kvstress-report-dir=out/reports",
        "--junitxml=junit.xml",
    )
    result.assert_outcomes(passed=4, failed=1)
    path, report = _assert_failure_shown(result, pytester.path / "out" / "reports")
    cases = ET.parse(pytester.path / "junit.xml").getroot().iter("testcase")
    broken = next(case for case in cases if case.get("name") == "test_broken_pool")
    properties = {p.get("name"): p.get("value") for p in broken.iter("property")}
    assert properties == {"kvstress_invariant": report["invariant"], "kvstress_report": str(path)}


def test_a_quiet_failing_session_repeats_its_seed_at_the_end(pytester: pytest.Pytester) -> None:
    """``-q`` hides the header, where the seed is: a failing session says it after its summary."""
    _fuzz_suite(pytester, controlled=False)
    result = pytester.runpytest_subprocess(
        "-q", "--kvstress-budget=0.5", "--kvstress-seed=7", "--kvstress-report-dir=out", "-k", "broken"
    )
    result.assert_outcomes(failed=1)
    assert "kvstress: seed 7 (repeat with --kvstress-seed 7)" in result.stdout.str().splitlines()


def test_xdist_workers_share_the_session_seed(pytester: pytest.Pytester) -> None:
    """Under -n 2 the header shows one random seed, every worker uses it, and outcomes are right."""
    _fuzz_suite(pytester, controlled=True)
    pytester.makeconftest(SEED_LOG)
    result = pytester.runpytest_subprocess(
        "-n", "2", "--kvstress-budget=1", "--kvstress-report-dir=out", "--kvstress-controlled-loop"
    )
    result.assert_outcomes(passed=4, failed=1)
    _assert_failure_shown(result, pytester.path / "out")
    header_seeds = re.findall(r"^kvstress: seed (\d+) ", result.stdout.str(), re.MULTILINE)
    logs = list((pytester.path / "seeds").iterdir())
    assert len(header_seeds) == 1
    assert {log.read_text() for log in logs} == set(header_seeds)
    assert len({log.name.split("-")[0] for log in logs}) == 2  # two worker processes agreed


def test_ini_options_marker_profiles_and_controlled_loop_seed(pytester: pytest.Pytester) -> None:
    """ini values and the marker work, profiles exist, and a controlled-loop failure shows its seed."""
    pytester.makeini(
        INI
        + "kvstress_budget = 0.5\nkvstress_seed = 1234\nkvstress_report_dir = ini-reports\n"
        + "kvstress_controlled_loop = true\n"
    )
    pytester.makepyfile(test_ini=INI_TESTS)
    result = pytester.runpytest_subprocess("--strict-markers")
    result.assert_outcomes(passed=3, failed=1)
    nodeid = "test_ini.py::test_fails_on_controlled_loop"
    result.stdout.fnmatch_lines(
        [
            "kvstress: seed 1234 *",
            "kvstress: pytest-asyncio tests run on the controlled event loop",
            f"kvstress controlled loop seed: {seed_for(1234, nodeid)} (from session seed 1234 and {nodeid},*",
        ]
    )


def test_factory_spec_names_module_level_factories() -> None:
    """A module-level class becomes MODULE:QUALNAME; a string passes through unchanged."""
    assert factory_spec(ET.Element) == "xml.etree.ElementTree:Element"
    assert factory_spec("kvstress:ThreadedBlockPool") == "kvstress:ThreadedBlockPool"


def test_factory_spec_refuses_a_local_factory() -> None:
    """A factory defined in a function cannot be imported by name: ValueError says what to do."""

    class LocalPool:
        pass

    with pytest.raises(ValueError, match=r"LocalPool \(in [\w.]*test_pytest_plugin\) .* at module level"):
        factory_spec(LocalPool)


def test_factory_spec_refuses_a_non_callable() -> None:
    """Something that is neither a string nor a named callable is a TypeError naming its type."""
    with pytest.raises(TypeError, match=r"got 3 \(int\)"):
        factory_spec(3)  # type: ignore[arg-type]


def test_seed_for_is_stable_and_per_test() -> None:
    """The per-test seed is a fixed function of session seed and node id, below 2**63."""
    assert seed_for(1, "t.py::a") == seed_for(1, "t.py::a")
    assert len({seed_for(1, "t.py::a"), seed_for(1, "t.py::b"), seed_for(2, "t.py::a")}) == 3
    assert 0 <= seed_for(1, "t.py::a") < 2**63


def test_a_user_s_run_shows_no_warning_kvstress_brings(pytester: pytest.Pytester) -> None:
    """A project that never configured pytest-asyncio (kvstress's test extra brought it) sees no
    warning about its unset loop scope, with or without xdist."""
    pytester.makepyfile(
        """
        def test_nothing():
            pass
        """
    )
    for args in ((), ("-n", "2")):
        result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)
        result.assert_outcomes(passed=1)
        output = result.stdout.str() + result.stderr.str()
        assert "Warning" not in output, output


CRASHING = """
import ctypes

from kvstress.mutants import CondvarPool


class SegfaultPool(CondvarPool):
    releases = 0

    def release(self, block):
        type(self).releases += 1
        if type(self).releases >= 30:  # two releases may count before either compares
            ctypes.string_at(0)
        return super().release(block)


class SegfaultsWhenBuilt(CondvarPool):
    def __init__(self, *args, **kwargs):
        ctypes.string_at(0)


def test_crashing_pool(kvstress):
    kvstress.check(SegfaultPool)


def test_crashing_constructor(kvstress):
    kvstress.check(SegfaultsWhenBuilt)


def test_after_it(kvstress):
    kvstress.check("kvstress.mutants:CondvarPool")
"""


def test_a_pool_that_kills_its_process_fails_its_test_not_the_session(pytester: pytest.Pytester) -> None:
    """check() isolates by default: a segfaulting pool fails its test with a crash report, and
    the session goes on to the next test."""
    pytester.makeini(INI)
    pytester.makepyfile(test_crashing=CRASHING)
    result = pytester.runpytest_subprocess("--kvstress-budget=5", "--kvstress-report-dir=out")
    result.assert_outcomes(passed=1, failed=2)
    reports = [load_report(path) for path in sorted((pytester.path / "out").glob("*.json"))]
    assert sorted(r["config"]["death"] for r in reports) == ["SIGSEGV", "SIGSEGV"]  # type: ignore[index]
    # A constructor's segfault too: the pool is built in the child only.
    assert any("while kvstress loaded the pool" in str(r["message"]) for r in reports)
    result.stdout.fnmatch_lines(["E *InvariantViolation: [[]crash[]] *SIGSEGV*"])


def test_the_fixture_has_a_name_that_does_not_hide_the_package(pytester: pytest.Pytester) -> None:
    """``import kvstress`` and the fixture in one module: ``kvstress_fuzz`` is the same fixture."""
    pytester.makeini(INI)
    pytester.makepyfile(
        test_both="""
import kvstress


def test_both(kvstress_fuzz):
    assert kvstress.ThreadedBlockPool is not None
    kvstress_fuzz.check("kvstress.mutants:CondvarPool", budget=1)
"""
    )
    result = pytester.runpytest_subprocess("--kvstress-report-dir=out")
    result.assert_outcomes(passed=1)


def test_a_run_that_uses_nothing_of_kvstress_imports_neither_torch_nor_the_search(
    pytester: pytest.Pytester,
) -> None:
    """pytest loads the plugin in every run of an environment with kvstress installed (and in
    each xdist worker): loading it must not cost the seconds torch and the search take to import."""
    pytester.makepyfile(
        """
        import sys

        def test_nothing_of_kvstress():
            loaded = {"torch", "kvstress.fuzz", "kvstress.controlled", "kvstress.explorer"} & set(sys.modules)
            assert not loaded, loaded
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


POOL_FIXTURE = """
import pytest
import kvstress
from kvstress import ThreadedBlockPool

@pytest.fixture
def pool():
    audited = kvstress.audit(ThreadedBlockPool(4, (2, 2)))
    yield audited
    audited.close()
"""

AUDITED_FIXTURE = (
    POOL_FIXTURE
    + """

def test_double_release(pool):
    block = pool.acquire(0)
    pool.mark_in_use(block)
    pool.release(block)
    pool.release(block)

@pytest.mark.kvstress_explore(schedules=5)
def test_double_release_explored(pool):
    block = pool.acquire(0)
    pool.release(block)
    pool.release(block)

def test_swallowed(pool):
    block = pool.acquire(0)
    pool.release(block)
    try:
        pool.release(block)
    except kvstress.InvariantViolation:
        pass

def test_swallowed_then_raised(pool):
    block = pool.acquire(0)
    pool.release(block)
    try:
        pool.release(block)
    except kvstress.InvariantViolation:
        pass
    pool.release(block)

@pytest.fixture
def engine(pool):
    block = pool.acquire(0)
    yield block
    pool.release(block)
    pool.release(block)  # the engine's teardown releases twice: the violation goes to pytest

def test_teardown_of_another_fixture(engine):
    assert engine is not None
"""
)


def test_an_audited_violation_that_failed_the_test_is_not_raised_again_at_teardown(
    pytester: pytest.Pytester,
) -> None:
    """A violation at the faulty call fails the test; the fixture's close() raised it again, an
    error beside every failure. A violation the test swallowed still fails at close(), unless a
    later one of the same audit failed the test (the same finding read as a failure and an
    error: a blind user's, two clients hitting one leak)."""
    pytester.makepyfile(test_audited=AUDITED_FIXTURE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=3, errors=2)
    # The traceback ends at the test's own call: the audit's frames are hidden (a blind user read
    # forty lines of the audit's source above the finding).
    assert "audit/_core.py" not in result.stdout.str() and "audit/_threaded.py" not in result.stdout.str()
    out = result.stdout.str()
    assert "ERROR test_audited.py::test_swallowed" in out
    assert "found earlier, at the faulty call" in out
    # A violation another fixture's teardown raised is shown once, not again by the pool
    # fixture's close() beside it (an exception group of the two, a blind user's).
    assert "ERROR test_audited.py::test_teardown_of_another_fixture" in out
    assert "errors while tearing down" not in out


IN_A_TASK_GROUP = (
    POOL_FIXTURE
    + """
import anyio

def test_in_a_task_group(pool):
    async def client():
        block = pool.acquire(0)
        pool.release(block)
        pool.release(block)

    async def main():
        async with anyio.create_task_group() as group:
            group.start_soon(client)

    anyio.run(main)
"""
)


def test_a_violation_inside_a_task_groups_exception_group_is_not_raised_again_at_teardown(
    pytester: pytest.Pytester,
) -> None:
    """The test failed with the task group's exception group, the violation inside it; the
    fixture's close() raised it again, an error beside the failure."""
    pytester.makepyfile(test_grouped=IN_A_TASK_GROUP)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    assert "double-release" in result.stdout.str()


def test_a_finding_is_never_rerun_by_rerunfailures() -> None:
    """pytest-rerunfailures reran an audit's finding until the race lost, and the suite passed
    (a blind team's ``--reruns 2``): a finding is added to its ``--rerun-except`` patterns,
    after those of the command line, or of the ini file where the command line gives none."""
    from types import SimpleNamespace

    from kvstress.pytest_plugin._plugin import FINDING, _no_reruns_of_findings

    def config(option: object, ini: list[str], plugin: bool = True) -> SimpleNamespace:
        return SimpleNamespace(
            pluginmanager=SimpleNamespace(hasplugin=lambda name: plugin and name == "rerunfailures"),
            option=SimpleNamespace(rerun_except=option),
            getini=lambda name: ini,
        )

    given = config(["Timeout"], ["ConnectionError"])
    _no_reruns_of_findings(given)  # type: ignore[arg-type]
    assert given.option.rerun_except == ["Timeout", FINDING]
    from_ini = config(None, ["ConnectionError"])
    _no_reruns_of_findings(from_ini)  # type: ignore[arg-type]
    assert from_ini.option.rerun_except == ["ConnectionError", FINDING]
    absent = config(None, [], plugin=False)
    _no_reruns_of_findings(absent)  # type: ignore[arg-type]
    assert absent.option.rerun_except is None
    import re

    assert re.search(FINDING, "InvariantViolation: [double-release] ...")


def test_rerunfailures_does_not_rerun_a_finding(pytester: pytest.Pytester) -> None:
    """With the plugin installed: the audit's double release fails the test, not rerun away."""
    pytest.importorskip("pytest_rerunfailures")
    pytester.makeini(INI)
    pytester.makepyfile(
        test_rerun="""
import itertools

import kvstress

attempts = itertools.count()


def test_a_race_lost_once():
    with kvstress.audit(kvstress.ThreadedBlockPool(2, (2, 4))) as pool:
        block = pool.acquire(timeout=0)
        pool.release(block)
        if next(attempts) == 0:  # a race that lost this time
            pool.release(block)


def test_flaky():
    assert next(attempts) > 1
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly", "--reruns", "2")
    result.assert_outcomes(failed=1, passed=1)
    assert "1 rerun" in result.stdout.str()  # the flaky test, not the finding


def test_a_report_directory_that_cannot_hold_reports_is_a_usage_error(pytester: pytest.Pytester) -> None:
    """Refused at the start, in one line (exit 4), as ``kvstress fuzz --report-dir`` refuses it:
    the first finding's report failed to be written, and the finding was lost (a blind tester's)."""
    pytester.makepyfile("def test_nothing():\n    pass\n")
    pytester.makefile(".txt", afile="")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--kvstress-report-dir=afile.txt")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--kvstress-report-dir" in result.stderr.str() and "is a file" in result.stderr.str()
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--kvstress-report-dir=out/reports")
    result.assert_outcomes(passed=1)
    assert (pytester.path / "out" / "reports").is_dir()
