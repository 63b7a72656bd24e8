"""kvstress fuzz / replay / report end to end, as a user runs them: subprocesses, exit codes, files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kvstress.cli import main
from kvstress.reports import REQUIRED, SCHEMA

TESTS = Path(__file__).resolve().parent


def kvstress(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``python -m kvstress`` with the test pools importable, as a user's shell would."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-m", "kvstress", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _without_pythonpath(command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``command`` as a shell with no PYTHONPATH would: only what the report names finds the pool."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def found(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    """One fuzz run that finds the tiny pool's reset-after-offer race, shared by the tests below."""
    cwd = tmp_path_factory.mktemp("fuzz")
    done = kvstress(
        "fuzz", "--pool", "pools.tiny:TinyResetAfterOfferPool", "--budget", "30", "--seed", "1", cwd=cwd
    )
    return done, cwd


def test_a_correct_pool_exits_0(tmp_path: Path) -> None:
    """No violation within the budget: exit 0 and a one-line summary. ``--backend asyncio``, the
    default, is accepted on a threaded pool (a script passes it to every pool of a mixed set)."""
    done = kvstress(
        "fuzz", "--pool", "kvstress:ThreadedBlockPool", "--budget", "3", "--backend", "asyncio", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("no violation found:")
    assert not list((tmp_path / "reports").glob("*.json"))


def test_a_violation_exits_1_and_writes_json_and_html(
    found: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    """Exit 1, the invariant on stdout, and a complete report with its HTML page beside it."""
    done, cwd = found
    assert done.returncode == 1, done.stderr
    assert done.stdout.startswith("violation: [dirty-read]")
    reports = list((cwd / "reports").glob("*.json"))
    assert len(reports) == 1
    report = json.loads(reports[0].read_text())
    assert report["schema"] == SCHEMA and set(REQUIRED) <= set(report)
    assert report["pool"] == "pools.tiny:TinyResetAfterOfferPool" and report["mode"] == "threads"
    assert report["schedule"].startswith("ks1:") and report["history"] and report["blocks"]
    assert report["replay"] == f"kvstress replay {reports[0]}" or str(reports[0].name) in report["replay"]
    assert reports[0].with_suffix(".html").read_text().startswith("<!DOCTYPE html>")
    events = (cwd / "reports" / "events.jsonl").read_text().splitlines()  # the children's too
    assert any(json.loads(line)["event"] == "fuzz.start" for line in events), events


def test_replay_reproduces_exactly(found: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    """kvstress replay on the report: exit 1 and ``reproduced: dirty-read``."""
    _, cwd = found
    report = next((cwd / "reports").glob("*.json"))
    done = kvstress("replay", str(report), cwd=cwd)
    assert done.returncode == 1, done.stderr
    assert done.stdout.splitlines()[0] == "reproduced: dirty-read"
    assert "violation: [dirty-read]" in done.stdout and "interleaving:" in done.stdout
    assert done.stdout.splitlines()[-1] == "verdict: reproduced: dirty-read"  # for ``| tail``
    quiet = kvstress("replay", "--quiet", str(report), cwd=cwd)
    assert quiet.returncode == 1 and quiet.stdout.splitlines() == ["reproduced: dirty-read"]


def test_a_report_whose_schedule_is_corrupt_is_named_in_one_line(
    found: tuple[subprocess.CompletedProcess[str], Path], tmp_path: Path
) -> None:
    """Exit 2 and one line naming the file (it said only "schedule is corrupt", a blind
    tester's)."""
    _, cwd = found
    report = json.loads(next((cwd / "reports").glob("*.json")).read_text())
    report["schedule"] = "ks1:zz!"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(report))
    done = kvstress("replay", str(bad), cwd=cwd)
    assert done.returncode == 2, done.stdout + done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert f"{bad}: schedule is corrupt" in done.stderr


def test_report_prints_and_rerenders(found: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    """kvstress report prints the interleaving and replay command; --html writes the page again."""
    _, cwd = found
    report = next((cwd / "reports").glob("*.json"))
    page = report.with_suffix(".html")
    page.unlink()
    shown = kvstress("report", str(report), cwd=cwd)
    assert (
        shown.returncode == 0
        and "<- failed here" in shown.stdout
        and "replay: kvstress replay" in shown.stdout
    )
    rendered = kvstress("report", str(report), "--html", cwd=cwd)
    assert rendered.returncode == 0 and page.exists()
    # The blocks as the check saw them, beside the ledger (the page had them, the console not:
    # a blind reader's best clue); and a copy elsewhere replays itself, not where it was written.
    assert "blocks " in shown.stdout and "expected state" in shown.stdout
    moved = cwd / "moved.json"
    moved.write_text(report.read_text())
    again = kvstress("report", str(moved), cwd=cwd)
    assert f"replay: kvstress replay {moved.resolve()}" in again.stdout


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["fuzz", "--pool", "no colon"], "MODULE:ATTR"),
        (["fuzz", "--pool", "no_such_module:Pool"], "cannot import"),
        (["fuzz", "--pool", "kvstress:NoSuchPool"], "has no attribute"),
        (["fuzz", "--pool", "kvstress:BlockState"], "raised"),
        (["fuzz", "--pool", "pools.tiny:Block"], "raised TypeError"),
        (["fuzz", "--pool", "kvstress:ThreadedBlockPool", "--budget", "0"], "--budget"),
        (["fuzz", "--pool", "kvstress:ThreadedBlockPool", "--budget", "inf"], "finite"),  # ran for ever
        (["fuzz", "--pool", "kvstress:ThreadedBlockPool", "--seed", "-1"], "--seed"),
        (["fuzz", "--pool", "kvstress:ThreadedBlockPool", "--memory-limit", "100M"], "at least 512M"),
        (["fuzz", "--pool", "kvstress:ThreadedBlockPool", "--backend", "trio"], "threaded pool"),
        (["fuzz", "--pool", "kvstress:ThreadedBlockPool", "--report-dir", "/dev/null/r"], "--report-dir"),
        (["fuzz", "--pool", "kvstress:ThreadedBlockPool", "--report-dir", "/proc/x"], "--report-dir"),
        (["fuzz", "--pool", "kvstress:ThreadedBlockPool", "--blocks", "0"], "--blocks must be an int >= 1"),
        # argparse takes "-2,4" for an option: the line says how to pass it
        (["fuzz", "--pool", "kvstress:ThreadedBlockPool", "--block-shape", "-2,4"], "--block-shape=-2,4"),
        (
            ["fuzz", "--pool", "kvstress:ThreadedBlockPool", "--report-dir", "a-file"],
            "a file, not a directory",
        ),
        (["fuzz", "--pool", "kvstress:ThreadedBlockPool", "--shard", "2/2"], "--shard"),
        (["fuzz", "--pool", "kvstress:ThreadedBlockPool", "--strategy", "magic"], "--strategy"),
        (["replay", "missing.json"], "cannot read"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path,
    args: list[str],
    says: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Usage, import and configuration errors: exit 2, one stderr line naming the problem (in this
    process, as the script runs it after its imports: see the next test for the script)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a-file").write_text("")
    status = main(args)
    out, err = capsys.readouterr()
    assert status == 2, out + err
    assert len(err.strip().splitlines()) == 1 and says in err
    assert "Traceback" not in err


def test_a_mistyped_module_is_refused_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A top-level module that does not exist is said before a fuzzing child starts (which took
    seconds) and before the report dir is made; nothing of the pool's runs in the supervisor."""
    monkeypatch.chdir(tmp_path)
    starts: list[object] = []
    monkeypatch.setattr("multiprocessing.context.SpawnProcess.start", lambda self: starts.append(self))
    assert main(["fuzz", "--pool", "no_such_module.pools:Pool", "--report-dir", "out"]) == 2
    assert not starts and not (tmp_path / "out").exists()


def test_the_script_exits_2_on_bad_input(tmp_path: Path) -> None:
    """`python -m kvstress` itself: exit 2 and one stderr line, for a bad pool and a bad report."""
    (tmp_path / "report.json").write_text("[1, 2]")
    for args, says in (
        (["fuzz", "--pool", "no_such_module:Pool"], "cannot import"),
        (["replay", "report.json"], "not an object"),
    ):
        done = kvstress(*args, cwd=tmp_path)
        assert done.returncode == 2, done.stdout + done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and says in done.stderr
        assert "Traceback" not in done.stderr


def test_a_factory_missing_the_protocol_is_a_usage_error(tmp_path: Path) -> None:
    """An object without the protocol's methods is exit 2 naming what is missing, not a finding."""
    (tmp_path / "halfpool.py").write_text(
        "class Half:\n    def __init__(self, n, shape, *, dtype, device):\n        self.num_blocks = n\n"
        "    def acquire(self, timeout=None):\n        return None\n"
    )
    done = kvstress("fuzz", "--pool", "halfpool:Half", cwd=tmp_path)
    assert done.returncode == 2
    assert "lacks the protocol's mark_in_use, retain, release, free_count, free_ids" in done.stderr
    assert "built a Half," in done.stderr


def test_a_protocol_member_that_is_not_a_method_is_a_usage_error(tmp_path: Path) -> None:
    """``free_count`` written as a property: exit 2 saying the harness calls it, not a crash
    reported as the pool's finding at the first check."""
    (tmp_path / "proppool.py").write_text(
        "from kvstress import ThreadedBlockPool\n\n"
        "class Prop(ThreadedBlockPool):\n"
        "    @property\n    def free_count(self):\n        return super().free_count()\n"
    )
    done = kvstress("fuzz", "--pool", "proppool:Prop", "--budget", "1", cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert "whose free_count is 2 (int), not a method: the harness calls free_count()" in done.stderr


def test_a_type_name_takes_the_article_it_is_read_with() -> None:
    """A blind user's ``OneSpaceBuggy`` was "built an OneSpaceBuggy"."""
    from kvstress.fuzz._target import _a

    assert [_a(name) for name in ("OneSpacePool", "UniformPool", "int", "AsyncPool", "list")] == [
        "a OneSpacePool",
        "a UniformPool",
        "an int",
        "an AsyncPool",
        "a list",
    ]


def test_a_coroutine_where_the_protocol_makes_a_plain_call_is_a_usage_error(tmp_path: Path) -> None:
    """An async pool whose free_count is ``async def`` (read without await at quiet points), or a
    threaded pool whose release is: exit 2, one line naming the calls, not a finding."""
    (tmp_path / "flavours.py").write_text(
        "from kvstress.mutants import AsyncConditionPool, CondvarPool\n"
        "class AsyncCount(AsyncConditionPool):\n"
        "    async def free_count(self):\n        return super().free_count()\n"
        "class ThreadedAsyncRelease(CondvarPool):\n"
        "    async def release(self, block):\n        return super().release(block)\n"
    )
    for spec, says in (
        (
            "flavours:AsyncCount",
            "built an async pool (acquire is a coroutine) whose free_count must be plain",
        ),
        (
            "flavours:ThreadedAsyncRelease",
            "built a threaded pool (acquire is a plain def: make it async def for an async pool) "
            "whose release must be plain",
        ),
    ):
        done = kvstress("fuzz", "--pool", spec, "--budget", "1", cwd=tmp_path)
        assert done.returncode == 2, done.stdout + done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and says in done.stderr, done.stderr
        assert "Traceback" not in done.stderr


def test_an_async_pools_retain_and_mark_in_use_may_be_coroutines(tmp_path: Path) -> None:
    """They were refused as calls the harness never awaits, though it awaits them: a correct
    pool with ``async def`` retain and mark_in_use runs clean, and a twin whose retain loses the
    reference it takes is found."""
    (tmp_path / "asyncmarks.py").write_text(
        "from kvstress.mutants import AsyncConditionPool\n"
        "class AsyncMarks(AsyncConditionPool):\n"
        "    async def retain(self, block):\n        super().retain(block)\n"
        "    async def mark_in_use(self, block):\n        super().mark_in_use(block)\n"
        "class AsyncRetainForgets(AsyncMarks):\n"
        "    async def retain(self, block):\n        pass\n"
    )
    clean = kvstress("fuzz", "--pool", "asyncmarks:AsyncMarks", "--budget", "2", "--seed", "0", cwd=tmp_path)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    found = kvstress(
        "fuzz", "--pool", "asyncmarks:AsyncRetainForgets", "--budget", "5", "--seed", "0", cwd=tmp_path
    )
    assert found.returncode == 1, found.stdout + found.stderr


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ('{"schema": "kvstress.failure/1", "invariant": "dirty-re', "not JSON"),
        ("[1, 2]", "not an object"),
        ('{"schema": "junit/1"}', "schema"),
        ('{"schema": "kvstress.failure/1", "invariant": "dirty-read"}', "missing"),
        ('{"schema": "kvstress\x01"}', "Invalid control character at line 1"),
        ("[" * 5000 + "]" * 5000, "nested too deep"),  # RecursionError: a traceback, exit 1
    ],
    ids=["truncated", "not-an-object", "foreign", "incomplete", "control-character", "deep"],
)
def test_replay_of_a_bad_report_is_exit_2(
    tmp_path: Path, content: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A truncated, corrupt or foreign file: exit 2 and one line; nothing is unpickled."""
    path = tmp_path / "report.json"
    path.write_text(content)
    for command in ("replay", "report"):
        status = main([command, str(path)])
        err = capsys.readouterr().err
        assert status == 2 and says in err and "Traceback" not in err
        assert len(err.strip().splitlines()) == 1, err


def test_workers_stop_at_the_first_failure(tmp_path: Path) -> None:
    """--workers 2: distinct seed streams, one report, exit 1."""
    done = kvstress(
        "fuzz", "--pool", "pools.tiny:TinyCheckThenPollPool", "--budget", "30", "--workers", "2", cwd=tmp_path
    )
    assert done.returncode == 1, done.stderr
    assert "violation: [crash]" in done.stdout
    assert len(list((tmp_path / "reports").glob("*.json"))) >= 1


def test_a_machine_finding_replays_from_its_seed(tmp_path: Path) -> None:
    """--strategy machine finds a double release; replay re-runs its seed and reports a rate."""
    done = kvstress(
        "fuzz",
        "--pool",
        "pools.broken:DoubleReleaseTruePool",
        "--strategy",
        "machine",
        # This test is about reporting and replaying a machine finding, not about finding it:
        # seed 4 finds it within a second, with today's Hypothesis and the lowest CI installs
        # (6.100), in a program that replays 3 times in 3. Each rule the machine gains moves
        # Hypothesis's draws: seed 3 found nothing in 15 s on 6.100 once the machine could
        # release in batches (seed 2 before, when it learnt cancelled scopes). The rest of the
        # budget goes to shrinking.
        "--seed",
        "4",
        "--budget",
        "15",
        cwd=tmp_path,
    )
    assert done.returncode == 1, done.stderr
    report = next((tmp_path / "reports").glob("*.json"))
    assert json.loads(report.read_text())["program"].startswith("state = ")
    again = kvstress("replay", str(report), "--tries", "3", cwd=tmp_path)
    assert again.returncode == 1 and again.stdout.startswith("reproduced: double-release (")


@pytest.mark.parametrize(
    ("sent", "status", "times"),
    [(signal.SIGINT, 130, 1), (signal.SIGTERM, 143, 1), (signal.SIGTERM, 143, 2)],
    ids=["int", "term", "term-twice"],
)
def test_ctrl_c_exits_130_without_a_traceback(
    tmp_path: Path, sent: signal.Signals, status: int, times: int
) -> None:
    """SIGINT mid-run: the run stops, says so, and exits 130 (what was found is already written).
    SIGTERM (a CI job's time limit) the same, with its summary, and 143: before, the process died
    at once and its children lived on for seconds (a blind sweep). GNU timeout sends it twice
    (to the command, then its process group): the second lost the summary and the status."""
    env = {**os.environ, "PYTHONPATH": str(TESTS)}
    process = subprocess.Popen(
        [sys.executable, "-m", "kvstress", "fuzz", "--pool", "kvstress:ThreadedBlockPool", "--budget", "60"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # Into the search: the run has logged its start (a fixed sleep was too short for the
    # torch import on a loaded machine, and the run had nothing to say it was interrupted from).
    events = tmp_path / "reports" / "events.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (events.exists() and "fuzz.start" in events.read_text()):
        time.sleep(0.1)
    time.sleep(2)
    for _ in range(times):
        process.send_signal(sent)
        time.sleep(0.2)  # the second as the first is unwinding: the children being stopped
    out, err = process.communicate(timeout=60)
    assert process.returncode == status, out + err
    assert "Traceback" not in err and "interrupted:" in out + err


def _loading_torch(pid: int) -> bool:
    """Whether the process has begun to load torch (Linux: a torch library in its memory map):
    the command line's own code is running, past the interpreter's start."""
    try:
        return "torch" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads the memory map from /proc")
@pytest.mark.parametrize("after", [0.0, 0.3])
def test_ctrl_c_while_the_command_line_loads_exits_130_without_a_traceback(after: float) -> None:
    """SIGINT while torch and the rest load (seconds on a cold start): one line, status 130."""
    process = subprocess.Popen(
        [sys.executable, "-m", "kvstress", "fuzz", "--pool", "kvstress:ThreadedBlockPool", "--budget", "60"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not _loading_torch(process.pid) and time.monotonic() < deadline:
        time.sleep(0.002)
    time.sleep(after)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 130, out + err
    assert "Traceback" not in err, err
    # In the import: our one line; past it, on a fast machine, the search's own summary.
    said = err.strip().splitlines()[-1:] == ["kvstress: interrupted"] or out.startswith("interrupted:")
    assert said, out + err


def _fresh_python(*statements: str) -> None:
    """Run the statements in a new interpreter (a fresh import of kvstress); each asserts."""
    code = "; ".join((*statements, "print('ok')"))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "ok", done.stderr


def test_import_kvstress_loads_nothing_heavy() -> None:
    """``import kvstress`` is instant (torch loads on first use of a name that needs it), and
    every name it exports still resolves."""
    _fresh_python(
        "import sys, kvstress",
        "assert 'torch' not in sys.modules, 'torch imported'",
        "names = [n for n in kvstress.__all__ if getattr(kvstress, n) is None]",
        "assert not names, names",
        "assert set(kvstress.__all__) <= set(dir(kvstress))",
    )


def test_a_folder_named_kvstress_in_the_current_directory_does_not_shadow_the_package(tmp_path: Path) -> None:
    """A clone of kvstress beside the user's pool (its reports/ looks like kvstress.reports)
    is not imported in place of the installed package, by the command or by its workers, and
    the user's own pool module there still imports."""
    (tmp_path / "kvstress" / "reports").mkdir(parents=True)
    (tmp_path / "mypools.py").write_text("from kvstress import ThreadedBlockPool as MyPool\n")
    script = Path(sys.executable).with_name("kvstress")
    for workers in ("1", "2"):
        done = subprocess.run(
            [str(script), "fuzz", "--pool", "mypools:MyPool", "--budget", "2", "--workers", workers],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert "ImportError" not in done.stderr
        executions = int(done.stdout.split("no violation found: ")[1].split()[0])
        assert executions > 0, done.stdout


def test_an_asyncio_only_pool_on_trio_is_a_setup_error_not_a_crash(tmp_path: Path) -> None:
    """It cannot wait on trio at all, though it runs on asyncio: exit 2, one line naming both."""
    done = kvstress(
        "fuzz",
        "--pool",
        "kvstress.mutants:AsyncioSemaphorePool",
        "--backend",
        "trio",
        "--budget",
        "2",
        cwd=tmp_path,
    )
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1
    assert "cannot run on trio" in done.stderr and "--backend asyncio" in done.stderr
    assert not (tmp_path / "reports").exists() or not list((tmp_path / "reports").glob("*.json"))


def test_a_bad_pool_name_is_said_without_cli_flags() -> None:
    """load_target serves kvstress.check too, where there is no --pool to speak of."""
    from kvstress.fuzz import TargetError, load_target

    for spec in ("kvstress.mutants:Nope", "no.such.module:Pool", "not a spec"):
        with pytest.raises(TargetError) as info:
            load_target(spec)
        assert "--pool" not in str(info.value)


def test_a_subpackage_import_does_not_hide_the_function_of_its_name() -> None:
    """``kvstress.audit`` and ``kvstress.shadow`` stay the functions after their subpackages load."""
    _fresh_python(
        "import types, kvstress.audit._core, kvstress.shadow, kvstress",
        "assert not isinstance(kvstress.audit, types.ModuleType), kvstress.audit",
        "assert not isinstance(kvstress.shadow, types.ModuleType), kvstress.shadow",
    )


def test_a_report_without_its_config_says_the_field_is_missing() -> None:
    """Not "config.kind is None": the field replay needs is named as missing (a blind sweep)."""
    from kvstress.fuzz._replay import replay_report

    with pytest.raises(ValueError, match="no 'config' field"):
        replay_report({"schema": "kvstress.failure/1"})
    with pytest.raises(ValueError, match="'config' field is 3, not an object"):
        replay_report({"config": 3})


def test_replay_finds_the_pool_from_another_directory(
    found: tuple[subprocess.CompletedProcess[str], Path], tmp_path: Path
) -> None:
    """The report records where the pool was imported from (``pool_path``): a replay run from
    another directory, without the path the fuzz run had, still imports it (it said "cannot
    import" before: a blind user's reports)."""
    _, cwd = found
    report = next((cwd / "reports").glob("*.json"))
    assert json.loads(report.read_text())["pool_path"] == str(TESTS.resolve())
    done = _without_pythonpath([sys.executable, "-m", "kvstress", "replay", "--quiet", str(report)], tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.splitlines() == ["reproduced: dirty-read"]


def test_a_replay_beside_a_fixed_module_imports_the_fix(
    found: tuple[subprocess.CompletedProcess[str], Path], tmp_path: Path
) -> None:
    """The current directory comes before the report's ``pool_path``: a replay run beside the
    fixed module (another worktree, a repro folder) imported the report's old one and said
    "reproduced" (two blind users)."""
    _, cwd = found
    report = next((cwd / "reports").glob("*.json"))
    (tmp_path / "pools").mkdir()
    (tmp_path / "pools" / "__init__.py").write_text("")
    (tmp_path / "pools" / "tiny.py").write_text(
        "from kvstress import ThreadedBlockPool\n\n\nclass TinyResetAfterOfferPool(ThreadedBlockPool):\n"
        '    """The fix."""\n'
    )
    script = Path(sys.executable).with_name("kvstress")  # not ``-m``: that puts the cwd first itself
    if not script.exists():
        pytest.skip("the kvstress console script is not beside this interpreter")
    done = _without_pythonpath([str(script), "replay", "--quiet", str(report)], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("not reproduced: dirty-read"), done.stdout
    assert len(done.stdout.splitlines()) > 1, done.stdout  # --quiet says why it did not recur too


CHANGED_BUT_BUGGY = """
import threading

from pools.tiny import TinyPool, TinyResetAfterOfferPool as Buggy


class TinyResetAfterOfferPool(Buggy):
    def acquire(self, timeout=None):
        with self._lock:  # one more lock section: the recorded schedule no longer applies
            pass
        return super().acquire(timeout)
"""

FIXED_OTHERWISE = """
from pools.tiny import TinyStrictPool


class TinyResetAfterOfferPool(TinyStrictPool):
    def release(self, block):
        with self._lock:  # one more lock section: the recorded schedule no longer applies
            pass
        return super().release(block)
"""


@pytest.mark.parametrize(
    ("module", "status", "says"),
    [(CHANGED_BUT_BUGGY, 1, "failed the same way"), (FIXED_OTHERWISE, 0, "ran without it")],
)
def test_a_replay_whose_schedule_no_longer_applies_searches_the_reports_programs(
    found: tuple[subprocess.CompletedProcess[str], Path], tmp_path: Path, module: str, status: int, says: str
) -> None:
    """Code changed since the report (a fix, or an edit that kept the bug) no longer follows the
    recorded schedule: the replay searches other schedules of the report's programs. The bug
    kept is reproduced (exit 1), a fix runs clean (exit 0) and says how much was searched; it
    said only that real threads or the real clock took another course (a blind user's fixes)."""
    _, cwd = found
    report = next((cwd / "reports").glob("*.json"))
    (tmp_path / "pools").mkdir()
    (tmp_path / "pools" / "__init__.py").write_text("")
    (tmp_path / "pools" / "tiny.py").write_text((TESTS / "pools" / "tiny.py").read_text())
    (tmp_path / "changed.py").write_text(module)
    copy = json.loads(report.read_text())
    copy["pool"] = "changed:TinyResetAfterOfferPool"
    (tmp_path / "report.json").write_text(json.dumps(copy))
    done = _without_pythonpath([sys.executable, "-m", "kvstress", "replay", "report.json"], tmp_path)
    assert done.returncode == status, done.stdout + done.stderr
    assert says in done.stdout and "the recorded schedule no longer applies" in done.stdout, done.stdout
    assert "the report recorded:" in done.stdout


def test_a_reports_replay_command_works_from_any_directory(
    found: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    """Written under a relative --report-dir (the default, ``reports``), a report's replay
    command named a relative path, which did not work from another directory (a blind user's
    `kvstress report` run elsewhere)."""
    _, cwd = found
    (report,) = (cwd / "reports").glob("*.json")
    assert json.loads(report.read_text())["replay"] == f"kvstress replay {report.resolve()}"
