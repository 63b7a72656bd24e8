"""Replay a failure report: the recorded schedule (or seed) on the recorded pool, once more.

A controlled failure replays exactly from its schedule string, and a contract failure from its
fixed program, so one run says whether it recurs. Free-running stress and the state machine on
real threads can only re-run their seed; they are tried several times and the answer is a
reproduction rate. A pool that killed its fuzzing process (config kind ``crash``), or crashed in
a way that depends on what its process did before, is replayed by running the recorded stream
again from its start in a supervised child: reproduced when it dies (or crashes) the same way.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from kvstress.fuzz._contract import run_contract, run_history
from kvstress.fuzz._run import ctrl_c_flag
from kvstress.fuzz._slices import run_machine, scenario_config
from kvstress.fuzz._target import FuzzTarget, load_target, make_importable_after_cwd
from kvstress.reports import ReportError, load_report
from kvstress.scenarios import ScenarioConfig, replay, run_stress_execution, search
from kvstress.scenarios._programs import Scenario
from kvstress.schedulers import PCTScheduler, RandomScheduler, Schedule, ScheduleDivergence

KINDS = ("scenario", "stress", "machine", "contract", "crash")
CRASH_MARGIN_S = 30.0
"""Seconds a crash replay may run past the moment the recorded crash came."""


@dataclass(frozen=True)
class ReplayOutcome:
    """``hits`` of ``tries`` runs failed with the report's invariant; ``note`` says more."""

    invariant: str
    tries: int
    hits: int
    note: str = ""

    @property
    def reproduced(self) -> bool:
        """True when at least one try failed the same way."""
        return self.hits > 0


def replay_report(report: Mapping[str, Any], *, tries: int = 10) -> ReplayOutcome:
    """Re-run what ``report`` recorded (a loaded, checked report); see the module docstring."""
    config = report.get("config")
    if not isinstance(config, dict):
        raise ValueError(
            "the report has no 'config' field (what replay re-runs)"
            if config is None
            else f"the report's 'config' field is {config!r}, not an object"
        )
    kind = config.get("kind")
    if kind not in KINDS:
        raise ValueError(f"the report's config.kind is {kind!r}, expected one of {KINDS}")
    assert isinstance(config, dict)
    make_importable_after_cwd(report.get("pool_path"))
    if kind == "crash":
        return _replay_crash(report, config)
    target = load_target(
        report["pool"],
        num_blocks=config.get("num_blocks", 2),
        block_shape=config.get("block_shape", (2, 4)),
        backend=report.get("backend") or "asyncio",
        wider=False,
    )
    invariant = report["invariant"]
    # Watched as the fuzz watches it: a KeyboardInterrupt the pool raises is its crash, as it
    # was when found; only a real Ctrl-C interrupts the replay (it read as one: exit 130).
    with ctrl_c_flag() as ctrl_c:
        outcome = _replay_in_place(kind, target, report, config, invariant, tries)
    if ctrl_c.is_set():
        raise KeyboardInterrupt
    if not outcome.reproduced and invariant == "crash" and "stream" in config:
        # A pool may crash on what its process did before (its 200th release): run the stream
        # again from its start.
        return _replay_crash(report, config)
    return outcome


def _replay_in_place(
    kind: str,
    target: FuzzTarget,
    report: Mapping[str, Any],
    config: Mapping[str, Any],
    invariant: str,
    tries: int,
) -> ReplayOutcome:
    if kind == "scenario":
        return _replay_schedule(target, report, invariant, tries)
    if kind == "contract":
        history = report.get("strategy") == "history"
        violation, _ = (run_history if history else run_contract)(target)
        name = "long history" if history else "contract"
        if violation is None:
            clean = f"the {name} program ran clean: the pool no longer fails it"
            return ReplayOutcome(invariant, 1, 0, clean)
        if violation.invariant != invariant:
            return ReplayOutcome(invariant, 1, 0, f"it failed differently: {violation}")
        return ReplayOutcome(invariant, 1, 1, f"exact replay of the fixed {name} program")
    if kind == "stress":
        stress_config = scenario_config(target)
        if config.get("fixed_scenario"):  # a motif: its programs are in the report
            stress_config = replace(stress_config, scenario=Scenario.from_json(report.get("scenario")))
        hits = sum(_stress_hit(stress_config, report["seed"], invariant) for _ in range(tries))
        return ReplayOutcome(invariant, tries, hits, "free-running: a reproduction rate, not an exact replay")
    hits = 0
    batches = bool(config.get("batches", True))
    for _ in range(tries):
        # Only whether it recurs counts: shrinking each try again took seconds of real threads.
        violation = run_machine(target, report["seed"], batches=batches, shrink=False)
        hits += violation is not None and violation.invariant == invariant
    how = "tasks on a real loop" if target.is_async else "real threads"
    return ReplayOutcome(invariant, tries, hits, f"state machine ({how}, no schedule): re-run from its seed")


def _replay_schedule(
    target: FuzzTarget, report: Mapping[str, Any], invariant: str, tries: int
) -> ReplayOutcome:
    """The recorded schedule, once; where that does not fail the same way, up to ``tries`` runs
    in all, for a rate: a pool that hands work to real threads (``to_thread``, a reset worker of
    its own) runs it on real time, which no schedule fixes, so one replay may not follow the
    schedule, or follow it with the thread's work landing elsewhere (a blind user's three real
    findings each said "not reproduced" in most single replays, exit 0, as after a fix). A pool
    that no longer fails runs clean ``tries`` times (a few milliseconds each)."""
    schedule = report.get("schedule")
    if not isinstance(schedule, str):
        raise ValueError("the report has no schedule string to replay")
    try:
        Schedule.decode(schedule)
    except ValueError as error:  # the report is corrupt, not the pool's run
        raise ReportError(str(error)) from None
    config = scenario_config(target)
    if report["config"].get("fixed_scenario"):  # a motif: its programs are in the report
        config = replace(config, scenario=Scenario.from_json(report.get("scenario")))
    diverged = clean = 0
    other = ""
    for attempt in range(1, tries + 1):
        try:
            failure = replay(config, schedule)
        except ScheduleDivergence as divergence:
            diverged += 1
            other = other or f"the run no longer follows the schedule: {divergence}"
            continue
        if failure is None:
            clean += 1
        elif failure.violation.invariant != invariant:
            other = other or f"it failed differently: {failure.violation}"
        elif attempt == 1:
            return ReplayOutcome(invariant, 1, 1, "exact replay of the recorded schedule")
        else:
            return ReplayOutcome(invariant, attempt, 1, _UNSTEADY.format(attempt - 1))
    if diverged:
        searched = _search_programs(config, report, invariant)
        if searched is not None:
            return searched
    if diverged == tries:
        return ReplayOutcome(
            invariant,
            tries,
            0,
            f"{other} (in each of {tries} replays: the pool's code changed since the report (a fix "
            "does that), or its work outside the schedule, in real threads or on the real clock, "
            "takes another course each run; a clean replay does not show a fix here: "
            f"{_fuzz_again(report)})",
        )
    if clean == tries:
        # Each try the same schedule: "(0/10 tries)" on an exact replay read as a rate of
        # something random (a blind user's); say why it is run more than once.
        return ReplayOutcome(
            invariant,
            tries,
            0,
            f"the recorded schedule ran clean in each of {tries} replays (run more than once, as a "
            "pool's work in real threads may take another course each time): the pool no longer "
            "fails this way",
        )
    ran = f"{clean} clean, {diverged} off the schedule, {tries - clean - diverged} failing otherwise"
    return ReplayOutcome(invariant, tries, 0, f"{other} ({ran})")


PROGRAMS_SEARCH_S = 5.0
"""Wall seconds a replay whose schedule no longer applies searches the report's programs."""
PROGRAMS_SEARCH_RUNS = 2000
"""Executions that search runs at most (each strategy half of them)."""


def _search_programs(
    config: ScenarioConfig, report: Mapping[str, Any], invariant: str
) -> ReplayOutcome | None:
    """Where the recorded schedule no longer applies (the pool changed, a fix say, or its
    threads take another course), search other schedules of the report's own programs, PCT
    then random, seeded by the report: the same failure again is a reproduction; none in the
    bound is as good a sign of a fix as a replay can give. None: the report has no programs."""
    try:
        programs = Scenario.from_json(report.get("scenario"))
    except (TypeError, ValueError, KeyError, IndexError):
        return None
    fixed = replace(config, scenario=programs)
    recorded = report.get("seed")
    seed = recorded % (1 << 64) if isinstance(recorded, int) else 0
    runs = 0
    began = time.monotonic()
    for scheduler in (PCTScheduler(depth=3, seed=seed), RandomScheduler(seed=seed)):
        found = search(
            fixed,
            scheduler,
            max_executions=PROGRAMS_SEARCH_RUNS // 2,
            budget_s=PROGRAMS_SEARCH_S / 2,
            shrink=False,
        )
        runs += found.executions
        if found.failure is not None and found.failure.violation.invariant == invariant:
            return ReplayOutcome(
                invariant,
                1,
                1,
                f"the recorded schedule no longer applies, but a search of the report's programs "
                f"({scheduler.name}) failed the same way after {runs} executions "
                f"({time.monotonic() - began:.2f} s): {found.failure.violation}",
            )
    return ReplayOutcome(
        invariant,
        1,
        0,
        f"the recorded schedule no longer applies (the pool's code changed, or its work in real "
        f"threads took another course), and {runs} other schedules of the report's programs "
        f"({time.monotonic() - began:.1f} s of PCT and random) ran without it: what a replay can "
        f"show of a fix; {_fuzz_again(report)} for the whole search",
    )


def _fuzz_again(report: Mapping[str, Any]) -> str:
    """The command that repeats the report's fuzz run (its --seed is the run's, not the stream's)."""
    config = report.get("config")
    seed = config.get("fuzz_seed") if isinstance(config, Mapping) else None
    pool = report.get("pool")
    if isinstance(seed, int) and isinstance(pool, str):
        return f"kvstress fuzz --pool {pool} --seed {seed}"
    return "fuzz again"


_UNSTEADY = (
    "reproduced after {} replay(s) that took another course: the pool's work outside the "
    "schedule (in real threads, on the real clock) is not replayed exactly"
)


def _stress_hit(config: ScenarioConfig, seed: int, invariant: str) -> bool:
    record = run_stress_execution(config, seed)
    return record.failure is not None and record.failure.invariant == invariant


def _replay_crash(report: Mapping[str, Any], config: Mapping[str, Any]) -> ReplayOutcome:
    """Run the recorded stream again from its start in a supervised child, up to a little past
    the moment it died: the same slices in the same order, so a pool that dies on its 200th
    release dies again. Reproduced when the child dies the same way."""
    import tempfile

    from kvstress.fuzz._isolate import Job, default_memory_limit, supervise

    recorded = str(config.get("death", ""))  # empty: a crash the child reported itself
    try:
        job = Job(
            spec=str(report["pool"]),
            # The run's own --blocks: its slices on larger pools follow from it.
            num_blocks=int(config.get("run_blocks", config["num_blocks"])),
            block_shape=tuple(int(d) for d in config["block_shape"]),
            backend=report.get("backend") or "asyncio",
            budget_s=min(float(config["budget_s"]), float(report["elapsed_s"]) + CRASH_MARGIN_S),
            seed=int(config["fuzz_seed"]),
            mix=tuple(str(m) for m in config["mix"]),
            report_dir="",  # set to a scratch folder below
            mode=str(report["mode"]),
            # The run's own bound where the report has it; else fuzz's default, never none: a
            # crash of memory replayed unbounded took the machine's 23 GB and was OOM-killed.
            memory_limit=config["memory_limit"] if "memory_limit" in config else default_memory_limit(),
            after_cwd=str(report.get("pool_path") or ""),
        )
        stream = int(config["stream"])
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"the crash report's config is incomplete or corrupt: {error}") from None
    with tempfile.TemporaryDirectory(prefix="kvstress-replay-") as scratch:
        result = supervise(replace(job, report_dir=scratch), [stream], write=False)
        found = load_report(result.outcome.report)["invariant"] if result.outcome.report else None
    again = "the run, replayed from its start in a child,"
    if not recorded:  # a crash the child reported itself (SystemExit from the pool, say)
        if found == "crash":
            return ReplayOutcome("crash", 1, 1, f"{again} crashed the same way")
        if result.death is not None:  # a crash still: the pool's MemoryError may come as a kill
            return ReplayOutcome("crash", 1, 1, f"{again} died: {result.death.how}")
        return ReplayOutcome("crash", 1, 0, f"{again} found {found or 'nothing'}")
    # "reproduced: crash (SIGSEGV)" says how it died again; a verdict that it did not keeps the
    # recorded death to its note: "not reproduced: crash (exit 1)" beside the replay's own exit
    # status 0 read as a contradiction (a blind user's).
    was = f"the run had died: {recorded}"
    if result.death is not None:
        if result.death.how == recorded:
            return ReplayOutcome(f"crash ({recorded})", 1, 1, f"{again} died the same way")
        return ReplayOutcome("crash", 1, 0, f"{again} died differently: {result.death.how} ({was})")
    if found is not None:
        return ReplayOutcome("crash", 1, 0, f"{again} found {found} before any crash ({was})")
    return ReplayOutcome("crash", 1, 0, f"{again} did not die ({was})")
