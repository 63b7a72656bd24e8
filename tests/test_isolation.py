"""A pool that kills its process is a finding: isolation, crash reports, replay (issue: crashes).

Each pool here is a correct lock-and-condition pool whose 50th release, counted per process,
dies one way (``tests/pools/crashing.py``). ``kvstress fuzz`` runs its search in a child under a
supervisor, so every way ends with exit 1, a report, and a replay that reproduces it.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kvstress import _flight
from kvstress._interrupts import passes_through, watching
from kvstress.cli import main
from kvstress.fuzz._isolate import parse_size
from kvstress.fuzz._replay import replay_report
from kvstress.reports import load_report

TESTS = Path(__file__).parent


def _fuzz(tmp_path: Path, pool: str, *extra: str) -> tuple[int, dict[str, object]]:
    status = main(
        ["fuzz", "--pool", f"pools.crashing:{pool}", "--budget", "20", "--report-dir", str(tmp_path), *extra]
    )
    reports = sorted(tmp_path.glob("*.json"))
    assert len(reports) == 1, reports
    return status, load_report(reports[0])


def test_a_pool_that_kills_its_process_as_it_is_built_is_a_crash_report(tmp_path: Path) -> None:
    """The pool is loaded in the fuzzing process only: a constructor that segfaults killed
    ``kvstress fuzz`` itself (exit 139, no report), and a ``kvstress_fuzz.check`` its pytest
    worker (a blind user's)."""
    status, report = _fuzz(tmp_path, "SegfaultsWhenBuiltPool", "--budget", "5")
    assert status == 1 and report["invariant"] == "crash" and report["mode"] == "unknown"
    assert "killed by SIGSEGV while kvstress loaded the pool" in str(report["message"])


@pytest.mark.parametrize(
    ("pool", "death"),
    [
        ("SignalsItselfPool", "exit 143"),
        ("InterruptsItselfPool", "exit 130"),
        ("InterruptsItselfAtEveryReleasePool", "exit 130"),
    ],
)
def test_a_pool_that_signals_its_own_process_is_a_crash_not_a_stop(
    pool: str, death: str, tmp_path: Path
) -> None:
    """A SIGTERM the pool sends itself stopped the run as the supervisor's own would ("no
    violation found", exit 0), and a SIGINT read as a Ctrl-C (exit 130): neither reached the
    supervisor, so both are the pool's (a blind tester's)."""
    status, report = _fuzz(tmp_path, pool, "--budget", "10")
    assert status == 1 and report["invariant"] == "crash"
    assert report["config"]["death"] == death  # type: ignore[index]
    assert "the pool signalled its own process" in str(report["message"])


def test_an_exit_hook_a_pool_registers_does_not_change_the_run_s_status(tmp_path: Path) -> None:
    """A constructor's ``atexit`` hook ran in ``kvstress fuzz``'s own process at its exit: a
    clean run exited 5."""
    tests = Path(__file__).parent
    done = subprocess.run(
        [sys.executable, "-c", "from kvstress.cli import entry; entry()", "fuzz", "--pool",
         "pools.crashing:ExitHookPool", "--budget", "2", "--report-dir", str(tmp_path)],
        cwd=tests, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert not list(tmp_path.glob("*.json"))


@pytest.mark.parametrize(
    ("pool", "death"), [("SegfaultPool", "SIGSEGV"), ("ExitPool", "exit 3")], ids=["segfault", "os._exit"]
)
def test_a_pool_that_kills_its_process_is_a_crash_report_that_replays(
    pool: str, death: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The supervisor writes the report: how the child died, the execution in flight, its last
    stderr lines; replay runs the stream again from its start in a child and it dies again."""
    status, report = _fuzz(tmp_path, pool)
    assert status == 1
    assert report["invariant"] == "crash" and report["config"]["kind"] == "crash"  # type: ignore[index]
    assert report["config"]["death"] == death  # type: ignore[index]
    assert report["strategy"] in _flight.STRATEGY_CODES and report["config"]["execution"] >= 1  # type: ignore[index]
    assert "the pool ended the process it runs in" in str(report["message"])
    if death == "SIGSEGV":
        assert any("Fatal Python error" in line for line in report["stderr"])  # type: ignore[attr-defined]
        assert any("crashing.py" in line for line in report["stderr"])  # type: ignore[attr-defined]
    assert "violation: [crash]" in capsys.readouterr().out
    replayed = replay_report(report)
    assert replayed.reproduced and replayed.invariant == f"crash ({death})"


def test_a_crash_replay_beside_the_fixed_module_runs_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The replay's child imports what the replay would: a module of the pool's name in the
    current directory before the report's ``pool_path``. The child got the parent's path less
    the current directory, ``pool_path`` on it, and put the current directory after: it ran the
    report's old module and said "reproduced: crash" beside the fix (a blind user's)."""
    status, report = _fuzz(tmp_path / "reports", "SysExitPool", "--budget", "5")
    assert status == 1 and report["invariant"] == "crash" and "stream" in report["config"]  # type: ignore[operator]
    assert report["pool_path"] == str(TESTS.resolve())
    fix = tmp_path / "fix"
    (fix / "pools").mkdir(parents=True)
    (fix / "pools" / "__init__.py").write_text("")
    (fix / "pools" / "crashing.py").write_text(
        "from kvstress import ThreadedBlockPool\n\n\nclass SysExitPool(ThreadedBlockPool):\n"
        '    """The fix: it never raises SystemExit."""\n'
    )
    # As in a replay's own process: the report's folder not on the path, nothing of it imported.
    monkeypatch.setattr(
        sys, "path", [entry for entry in sys.path if Path(entry or ".").resolve() != TESTS.resolve()]
    )
    ours = {name: module for name, module in sys.modules.items() if name.partition(".")[0] == "pools"}
    for name in ours:
        del sys.modules[name]
    monkeypatch.chdir(fix)
    try:
        replayed = replay_report(report)
    finally:  # the fix's modules go, the suite's come back
        for name in [name for name in sys.modules if name.partition(".")[0] == "pools"]:
            del sys.modules[name]
        sys.modules.update(ours)
    assert not replayed.reproduced, replayed
    assert replayed.note.endswith("found nothing"), replayed


@pytest.mark.parametrize("pool", ["SysExitPool", "InterruptPool"])
def test_a_base_exception_from_the_pool_is_a_finding_not_the_end(pool: str, tmp_path: Path) -> None:
    """SystemExit, or a KeyboardInterrupt no Ctrl-C caused, raised in a pool call: a crash
    finding with the call's history, replayed exactly like any other."""
    status, report = _fuzz(tmp_path, pool)
    assert status == 1 and report["invariant"] == "crash"
    assert "a pool must not end the process" in str(report["message"])
    assert replay_report(report).reproduced


@pytest.mark.parametrize("strategy", ["delay", "machine"])
def test_a_pool_s_own_keyboard_interrupt_replays_as_its_crash(strategy: str, tmp_path: Path) -> None:
    """The replay runs in the caller's process: unwatched, the pool's KeyboardInterrupt read as
    a Ctrl-C there (kvstress replay: "interrupted", exit 130, a blind tester's)."""
    status, report = _fuzz(tmp_path, "InterruptPool", "--strategy", strategy)
    assert status == 1 and report["invariant"] == "crash"
    assert replay_report(report, tries=2).reproduced


def test_with_workers_a_segfault_is_still_a_finding(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The case that used to end "no violation found: 0 executions", exit 0."""
    status, report = _fuzz(tmp_path, "SegfaultPool", "--workers", "2")
    assert status == 1 and report["config"]["death"] == "SIGSEGV"  # type: ignore[index]
    assert "no violation found" not in capsys.readouterr().out


def test_a_runaway_pool_ends_as_a_report_under_the_memory_limit(tmp_path: Path) -> None:
    """64 GiB asked at once, under a 3 GiB memory limit (RLIMIT_DATA): an allocation fails in the pool
    call, a crash finding, and the machine is left alone."""
    status, report = _fuzz(tmp_path, "GreedyPool", "--memory-limit", "3G")
    assert status == 1 and report["invariant"] == "crash" and "MemoryError" in str(report["message"])


def test_a_run_that_completes_no_execution_is_never_clean(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A budget too short for one execution: exit 2 and one line, not "no violation found"."""
    status = main(
        [
            "fuzz",
            "--pool",
            "kvstress.mutants:CondvarPool",
            "--budget",
            "0.000001",
            "--report-dir",
            str(tmp_path),
        ]
    )
    captured = capsys.readouterr()
    assert status == 2 and "no execution completed" in captured.err and len(captured.err.splitlines()) == 1
    assert "no violation found" not in captured.out


def test_a_clean_run_says_what_each_worker_did(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status = main(
        [
            "fuzz",
            "--pool",
            "kvstress.mutants:CondvarPool",
            "--budget",
            "2",
            "--workers",
            "2",
            "--report-dir",
            str(tmp_path),
        ]
    )
    out = capsys.readouterr().out
    assert status == 0 and "no violation found" in out and "(per worker: " in out


def test_ctrl_c_still_exits_130(tmp_path: Path) -> None:
    """A real Ctrl-C reaches the supervisor and its child: exit 130, no report, no traceback."""
    command = [sys.executable, "-m", "kvstress", "fuzz", "--pool", "kvstress.mutants:CondvarPool"]
    command += ["--budget", "60", "--report-dir", str(tmp_path)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(8)  # the supervisor and its child both started
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 130, (out, err)
    assert "Traceback" not in err and not list(tmp_path.glob("*.json"))


def test_sizes_are_parsed_and_bad_ones_named() -> None:
    assert parse_size("4G") == 4 << 30 and parse_size("512m") == 512 << 20 and parse_size("none") is None
    for bad in ("", "-1G", "lots", "0.0"):
        with pytest.raises(ValueError, match="--memory-limit"):
            parse_size(bad)


def test_which_base_exceptions_pass_through_a_pool_call() -> None:
    """Cancellation and the baton's unwinding go on; SystemExit and GeneratorExit are the pool's;
    a KeyboardInterrupt is the pool's only while SIGINT is watched and no Ctrl-C came."""
    import asyncio
    import threading

    from kvstress.controlled._baton import ThreadAborted

    assert passes_through(asyncio.CancelledError()) and passes_through(ThreadAborted())
    assert not passes_through(SystemExit(4)) and not passes_through(GeneratorExit())
    assert passes_through(KeyboardInterrupt())  # unwatched: taken as a real Ctrl-C
    flag = threading.Event()
    with watching(flag):
        assert not passes_through(KeyboardInterrupt())
        flag.set()
        assert passes_through(KeyboardInterrupt())


def test_the_flight_record_follows_slices_and_executions() -> None:
    record = [0] * _flight.FIELDS
    _flight.attach(record)
    try:
        _flight.slice_started(3, "delay", 77)
        _flight.execution_started()
        _flight.execution_started()
    finally:
        _flight.attach(None)
    assert record[: _flight.STARTED_US] == [3, _flight.STRATEGY_CODES.index("delay") + 1, 77, 2]
    assert _flight.strategy_of(record[_flight.STRATEGY]) == "delay"
    json.dumps(record)


def test_kvstress_failing_in_its_own_code_is_no_finding_against_the_pool(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """kvstress's own check raises in the child (the pool module breaks it there): exit 3, no
    report against the pool, the traceback kept in a text file, one line saying whose it is."""
    status = main(
        [
            "fuzz",
            "--pool",
            "pools.breaks_kvstress:CorrectPool",
            "--budget",
            "20",
            "--report-dir",
            str(tmp_path),
        ]
    )
    assert status == 3
    assert not list(tmp_path.glob("*.json"))
    (log,) = tmp_path.glob("*-kvstress-internal-error-*.txt")
    text = log.read_text()
    assert "TypeError" in text and "check_run" in text and "not the pool" in text
    err = capsys.readouterr().err
    assert (
        "internal error, no verdict on the pool (the run stopped there): TypeError" in err and str(log) in err
    )


def test_a_process_that_does_not_stop_is_killed_with_its_stacks_in_the_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A child past its budget by OVERSTAY_S is killed; its report says kvstress killed it (it
    said "the pool ended the process it runs in") and holds every thread's stack, dumped just
    before the kill, down to the blocking call (a blind user's pools: a blocking socket recv,
    a finalizer waiting for a lock, which the watchdogs now see as hangs; a call that never
    lets the GIL go stops them too)."""
    from kvstress.fuzz import _isolate

    monkeypatch.setattr(_isolate, "OVERSTAY_S", 2.0)
    # The child must reach the pool's 50th release before the kill: its start-up (torch's
    # import) took 6 s beside a loaded machine's other work.
    status, report = _fuzz(tmp_path, "HoldsTheGilPool", "--budget", "8")
    assert status == 1 and report["invariant"] == "crash"
    assert "did not stop within 2 s of its budget" in str(report["message"])
    assert "ended the process" not in str(report["message"])
    assert any("in die" in line for line in report["stderr"]), report["stderr"]


SLOW = "pools.slow_import:SlowToImportPool"


def test_a_slow_start_up_is_not_counted_against_the_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The overstay counts from the search's start, not the child's: under ``-X tracemalloc=5``
    loading took 28 s and more, and a correct pool was killed as hung (a blind user's CI)."""
    from kvstress.fuzz import _isolate

    monkeypatch.setattr(_isolate, "OVERSTAY_S", 2.0)
    status = main(["fuzz", "--pool", SLOW, "--budget", "1", "--report-dir", str(tmp_path)])
    assert status == 0 and not list(tmp_path.glob("*.json"))


def test_a_child_still_loading_past_its_bound_is_killed_with_its_stacks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kvstress.fuzz import _isolate

    monkeypatch.setattr(_isolate, "LOAD_S", 2.0)
    status = main(["fuzz", "--pool", SLOW, "--budget", "1", "--report-dir", str(tmp_path)])
    (found,) = tmp_path.glob("*.json")
    report = load_report(found)
    assert status == 1 and report["invariant"] == "crash" and report["mode"] == "unknown"
    message = str(report["message"])
    assert "did not stop loading within 2 s while kvstress loaded the pool" in message
    # Its stacks where it had started up far enough to write them (torch's import alone may
    # take longer on a loaded machine); else the message says it wrote none.
    if report["stderr"]:
        assert "stacks as it was killed are in the report's stderr" in message
    else:
        assert "it wrote no stacks" in message


def test_a_tracing_interpreter_gives_its_children_longer() -> None:
    import tracemalloc

    from kvstress.fuzz._isolate import slowdown

    plain = slowdown()
    tracemalloc.start()
    try:
        assert slowdown() == 15 * plain
    finally:
        tracemalloc.stop()


_ORPHAN = """
import os, time
from kvstress.fuzz._isolate import _end_with
_end_with(os.getppid())
print(os.getpid(), flush=True)
time.sleep(60)
"""


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from /proc")
def test_a_child_ends_when_its_parent_is_killed_outright() -> None:
    """A fuzzing child outlives a parent killed by SIGKILL (or an unhandled SIGTERM: ``timeout``
    around ``kvstress replay``) no longer: it watches its parent and ends (a replay's child,
    its pool blocking a thread, lived on for minutes)."""
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import subprocess, sys; subprocess.run([sys.executable, '-c', {_ORPHAN!r}])",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    parent.kill()
    parent.wait(10)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(child):
        time.sleep(0.1)
    assert not _alive(child)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def test_a_clean_child_ends_without_the_pools_exit_hooks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A correct pool whose exit hook (``weakref.finalize``) wakes its own reset thread aborted
    the fuzzing child after a clean run, as the interpreter shut down: "Fatal Python error:
    Aborted" and every thread's stack in the user's terminal. A child whose result is delivered
    now ends as a forked one does."""
    status = main(
        [
            "fuzz", "--pool", "pools.handoff_asyncio:ExitWakesResetThreadPool",
            "--budget", "2", "--report-dir", str(tmp_path),
        ]
    )  # fmt: skip
    captured = capsys.readouterr()
    assert status == 0, captured.out
    assert "no violation found" in captured.out
    for said in ("Fatal Python error", "terminate called"):
        assert said not in captured.out + captured.err
