"""Free-running stress, jcstress-style: real threads, real time, noise injected at the pool's lines.

The controlled modes see only what their model sees: one thread at a time, switches at lines
and primitives, virtual time. Some bugs live below that (a race inside one line's bytecodes, a
C extension releasing the GIL, real timing), so this mode runs the same scenarios with the OS
scheduling: the GIL switch interval is cut to a microsecond and each line the pool executes
yields the GIL with a small seeded probability. The checks are the same, on the real clock with
the harness's usual slack.

Such a run cannot be replayed exactly, only re-run with its seed: a failure says how often its
seed reproduces it (``reproduced`` of ``replays``), which is the honest measure of how flaky it
will look in CI.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any

import anyio

from kvstress import _flight
from kvstress._violation import BlockRecord, InvariantViolation, Operation
from kvstress.checkers import TimingPolicy
from kvstress.controlled._chain import beside
from kvstress.controlled._patch import own_loop_primitives
from kvstress.harness._dump import dump_blocks
from kvstress.harness._runner import Abandoned, run_on_a_thread, run_to_completion
from kvstress.harness._scenarios import first_violation
from kvstress.scenarios._execution import (
    ExecutionRecord,
    ScenarioConfig,
    ScenarioOps,
    build_pool,
    crash_of,
    draw_scenario,
    judge_run,
    note_loop_error,
    with_loop_errors,
)
from kvstress.scenarios._programs import Scenario

SWITCH_INTERVAL = 1e-6
"""The GIL switch interval during a stress run, in seconds (CPython's default is 5 ms)."""


@dataclass(frozen=True)
class StressFailure:
    """A failing stress run: its seed, what it ran and saw, and how often the seed reproduces it."""

    violation: InvariantViolation
    seed: int
    scenario: Scenario
    history: tuple[Operation, ...]
    reproduced: int
    replays: int
    blocks: tuple[BlockRecord, ...] = ()
    failed_op: int | None = None  # the operation whose check failed, when one did
    fixed: bool = False  # its scenario was given (a motif), not drawn from its seed

    @property
    def reproduction_rate(self) -> float:
        """The share of re-runs with the same seed that failed the same way."""
        return self.reproduced / self.replays if self.replays else 0.0


@dataclass(frozen=True)
class StressResult:
    """Executions run, wall seconds to the failure (or in all), and the failure if any."""

    executions: int
    elapsed_s: float
    failure: StressFailure | None = None
    operations: int = 0


def stress(
    config: ScenarioConfig,
    *,
    seed: int,
    max_executions: int | None = None,
    budget_s: float | None = None,
    yield_probability: float = 0.05,
    replays: int = 20,
    replay_budget_s: float | None = None,
    timing: TimingPolicy | None = None,
    switch_interval: float | None = SWITCH_INTERVAL,
    fixed: Sequence[Scenario] = (),
    fixed_only: bool = False,
) -> StressResult:
    """Run seeded scenarios on free-running threads until one fails or a limit is reached.

    Execution ``i`` uses seed ``seed + i``. A failure is re-run up to ``replays`` times with its
    seed to measure how often it reproduces; no re-run starts once ``replay_budget_s`` seconds
    have gone to them (a hang costs its whole bound each time), and the failure says how many
    ran. ``yield_probability=0`` with ``switch_interval=None`` is plain threading, as a test
    suite without kvstress would run the pool.

    ``fixed`` scenarios (the motifs: two calls that race, every time) take half of the time, in
    turn: a short test runs in a few milliseconds where a drawn scenario waits out its
    timeouts, so a race between two calls comes up many times a second. ``fixed_only`` runs
    nothing else (a short slice: a drawn scenario would outlast it). A failure's
    ``fixed`` says whether its scenario was one of them (replay it from the report's programs).
    """
    if max_executions is None and budget_s is None:
        raise ValueError("stress needs max_executions or budget_s (or both), got neither")
    if not 0.0 <= yield_probability <= 1.0:
        raise ValueError(f"yield_probability must be in [0, 1], got {yield_probability!r}")
    if type(replays) is not int or replays < 0:
        raise ValueError(f"replays must be an int >= 0, got {replays!r}")
    if replay_budget_s is not None and not replay_budget_s >= 0:
        raise ValueError(f"replay_budget_s must be a number of seconds >= 0 or None, got {replay_budget_s!r}")
    start = time.monotonic()
    done = operations = turns = 0
    spent = {True: 0.0, False: 0.0}  # seconds on fixed and on drawn scenarios
    while max_executions is None or done < max_executions:
        if budget_s is not None and time.monotonic() - start >= budget_s:
            break
        run_seed = seed + done
        # Half of the time to the fixed scenarios, in turn; half to drawn ones.
        on_fixed = bool(fixed) and (fixed_only or spent[True] <= spent[False])
        run_config = dataclasses.replace(config, scenario=fixed[turns % len(fixed)]) if on_fixed else config
        turns += on_fixed
        began = time.monotonic()
        record = run_stress_execution(run_config, run_seed, yield_probability, timing, switch_interval)
        spent[on_fixed] += time.monotonic() - began
        done += 1
        if record.failure is not None:
            elapsed = time.monotonic() - start
            invariant = record.failure.invariant
            again = ran = 0
            replay_start = time.monotonic()
            while ran < replays and (
                replay_budget_s is None or time.monotonic() - replay_start < replay_budget_s
            ):
                rerun = run_stress_execution(run_config, run_seed, yield_probability, timing, switch_interval)
                again, ran = again + _fails_as(rerun, invariant), ran + 1
            assert record.scenario is not None
            failure = StressFailure(
                record.failure,
                run_seed,
                record.scenario,
                record.history,
                again,
                ran,
                record.blocks,
                fixed=run_config.scenario is not None,
            )
            if record.ops is not None:
                failure = dataclasses.replace(failure, failed_op=record.ops.failed_op)
            return StressResult(done, elapsed, failure, operations)
        operations += len(record.history)
    return StressResult(done, time.monotonic() - start, operations=operations)


def run_stress_execution(
    config: ScenarioConfig,
    seed: int,
    yield_probability: float = 0.05,
    timing: TimingPolicy | None = None,
    switch_interval: float | None = SWITCH_INTERVAL,
) -> ExecutionRecord:
    """One free-running execution of the scenario drawn from ``seed``; the violation, if any,
    is in the record."""
    _flight.execution_started()
    record = ExecutionRecord(scenario=draw_scenario(config, seed))
    timing = timing or TimingPolicy()
    try:
        if config.is_async:
            _async_on_a_thread(config, record, timing)
        else:
            files = config.pool_files()
            with _switching(switch_interval):
                _thread_run(config, record, timing, files, seed, yield_probability)
    except InvariantViolation as violation:
        record.failure = violation
    except BaseExceptionGroup as group:
        found = first_violation(group)
        if not isinstance(found, InvariantViolation):
            found = crash_of(found, config, "the run")
        record.failure = found
    caught = judge_run(config, record)
    if record.failure is not None and record.ops is not None:
        record.blocks = dump_blocks(record.ops.pool, config.num_blocks, record.ops.ledger)
    if record.failure is not None and caught:
        record.failure = with_loop_errors(record.failure, caught)
    return record


def _thread_run(
    config: ScenarioConfig,
    record: ExecutionRecord,
    timing: TimingPolicy,
    files: frozenset[str],
    seed: int,
    yield_probability: float,
) -> None:
    assert record.scenario is not None
    ops = record.ops = ScenarioOps(config, build_pool(config), time.monotonic, virtual=False, timing=timing)
    scenario = record.scenario
    barrier = threading.Barrier(len(scenario.programs))
    errors: list[BaseException] = []

    def work(number: int, holder: str, program: Any) -> None:
        noise = random.Random(seed * 1_000_003 + number)
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait(timeout=5)
        if files and yield_probability > 0:
            sys.settrace(beside(_noise_tracer(files, noise, yield_probability), sys.gettrace()))
        try:
            run_to_completion(ops.run_program(holder, program))
        except BaseException as error:
            errors.append(error)
        finally:
            sys.settrace(None)

    threads = [
        threading.Thread(target=work, args=(i, h, p), name=f"kvstress-stress-{h}", daemon=True)
        for i, (h, p) in enumerate(zip(scenario.workers, scenario.programs, strict=True))
    ]
    for thread in threads:
        thread.start()
    hang = timing.hang_now()
    bound = scenario.total_timeout + hang
    deadline = time.monotonic() + bound
    try:
        for holder, thread in zip(scenario.workers, threads, strict=True):
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                raise InvariantViolation("hang", f"{holder}: its program did not finish within {bound:g} s")
    except KeyboardInterrupt:
        _let_finish(threads, grace=min(bound, 2.0))
        raise
    if errors:
        first = errors[0]
        raise first if isinstance(first, InvariantViolation) else crash_of(first, config, "the run")
    _bounded_finish(ops, hang)


def _bounded_finish(ops: ScenarioOps, bound: float) -> None:
    """``ops.finish()`` (release what the workers still hold, check the pool at rest) on a
    daemon thread: a pool that never returns from a release hangs that thread, not the harness."""
    _on_a_thread(
        lambda: run_to_completion(ops.finish()),
        bound,
        "kvstress-stress-finish",
        f"the harness's final release of a block still held did not return within {bound:g} s",
    )


def _async_on_a_thread(config: ScenarioConfig, record: ExecutionRecord, timing: TimingPolicy) -> None:
    """The async execution on a daemon thread of its own: a pool that blocks its event loop's
    thread (a real lock never released) can only be abandoned, and the harness must go on."""
    assert record.scenario is not None
    # The run bounds itself (programs: timeouts + hang_bound; the final releases: hang_bound);
    # this outer bound only catches a loop that cannot run those, so it leaves them room.
    hang = timing.hang_now()  # once: the bounds inside the run are made of the same
    bound = record.scenario.total_timeout + 2 * hang + 1.0
    modules = config.pool_modules()
    with own_loop_primitives(modules):  # this run's loop is a new one
        _on_a_thread(
            lambda: anyio.run(_async_run, config, record, timing, hang, backend=config.backend),
            bound,
            "kvstress-stress-loop",
            f"the async run did not end within {bound:g} s: a wait that cancellation cannot end "
            "(a shielded one) never finishes, or the pool blocks the event loop's thread",
        )


def _on_a_thread(run: Callable[[], object], bound: float, name: str, hang: str) -> None:
    """``run()`` on a daemon thread, waited for ``bound`` seconds: raises what it raised, or a
    ``hang`` violation saying ``hang`` when it is still running (the thread is abandoned)."""
    try:
        run_on_a_thread(run, bound, name=name)
    except Abandoned:
        raise InvariantViolation("hang", hang) from None


async def _async_run(
    config: ScenarioConfig, record: ExecutionRecord, timing: TimingPolicy, hang: float
) -> None:
    assert record.scenario is not None
    if config.backend == "asyncio":  # trio has no callbacks whose errors a handler swallows
        loop = asyncio.get_running_loop()
        files = frozenset(config.pool_files())
        loop.set_exception_handler(lambda _loop, context: note_loop_error(record, context, files))
    pool = build_pool(config)
    ops = record.ops = ScenarioOps(config, pool, anyio.current_time, virtual=False, timing=timing)
    bound = hang + record.scenario.total_timeout
    try:
        with anyio.move_on_after(bound) as scope:
            async with anyio.create_task_group() as tg:
                for holder, program in zip(record.scenario.workers, record.scenario.programs, strict=True):
                    tg.start_soon(ops.program, holder, program, name=holder)
    finally:
        ops.close_unstarted()
    if scope.cancelled_caught:
        raise InvariantViolation("hang", f"the workers' programs did not finish within {bound:g} s")
    with anyio.move_on_after(hang) as scope:
        await ops.finish()
    if scope.cancelled_caught:
        bound = hang
        raise InvariantViolation(
            "hang", f"the harness's final release of a block still held did not return within {bound:g} s"
        )


def _let_finish(threads: list[threading.Thread], grace: float) -> None:
    """Give free-running workers ``grace`` seconds to end after Ctrl-C: a daemon thread still
    inside torch when the interpreter exits takes the process down with it (``terminate``)."""
    deadline = time.monotonic() + grace
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))


def _noise_tracer(files: frozenset[str], noise: random.Random, probability: float) -> Any:
    def on_line(frame: FrameType, event: str, arg: object) -> Any:
        if event == "line" and noise.random() < probability:
            time.sleep(0)  # the real one: give the GIL away here
        return on_line

    def on_call(frame: FrameType, event: str, arg: object) -> Any:
        return on_line if frame.f_code.co_filename in files else None

    return on_call


@contextlib.contextmanager
def _switching(interval: float | None) -> Iterator[None]:
    before = sys.getswitchinterval()
    if interval is not None:
        sys.setswitchinterval(interval)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def _fails_as(record: ExecutionRecord, invariant: str) -> bool:
    return record.failure is not None and record.failure.invariant == invariant
