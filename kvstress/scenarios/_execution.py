"""One execution of a scenario under a scheduler: build the pool, run the workers, check it.

Threads run under the baton (``run_threads``), async pools on the controlled asyncio loop
(``run_controlled``), so every interleaving is the scheduler's and time is virtual: checks on
timeouts are exact (a few nanoseconds of slack for float rounding). The scenario's programs
come from the scheduler's random stream, so a schedule replays the data too.

Every operation is checked as it returns (the ``Operations`` checks), the pool is checked at rest
at the end, and the history must be linearizable. Whatever the pool does, the execution ends:
a deadlock, a spin or a stuck thread becomes a ``hang`` (or ``busy-wait``) violation.
"""

from __future__ import annotations

import asyncio
import inspect
import random
import threading
import time
import types
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import anyio
import torch

from kvstress import _flight, checkers
from kvstress._blame import (
    MAX_LOOP_ERRORS,
    InternalError,
    internal_error,
    loop_error_line,
    loop_errors_violation,
    raised_in_kvstress,
)
from kvstress._checks import check_block_shape, check_num_blocks
from kvstress._format import error_text
from kvstress._violation import BlockRecord, InvariantViolation, Operation
from kvstress.checkers import TimingPolicy
from kvstress.controlled import (
    ControlledLoopError,
    SchedulerExhausted,
    SchedulerMisbehaved,
    StepLimitExceeded,
    ThreadDeadlock,
    TimeLimitExceeded,
    current_loop,
    run_controlled,
    spawn,
)
from kvstress.controlled._baton import active_controller
from kvstress.controlled._coop import Event as CoopEvent
from kvstress.controlled._coop import sleep as coop_sleep
from kvstress.controlled._patch import loop_clock, resolve_modules, source_files
from kvstress.controlled._threads import run_threads
from kvstress.harness._cpu import watch_stalls
from kvstress.harness._dump import dump_blocks
from kvstress.harness._history import History
from kvstress.harness._ledger import Ledger
from kvstress.harness._runner import run_to_completion
from kvstress.harness._scenarios import Scenarios, first_violation, speaks_anyio
from kvstress.linearize import LinearizabilityResult, check_history
from kvstress.linearize._model import operation_index
from kvstress.scenarios._programs import TIMEOUTS, Scenario, draw
from kvstress.schedulers import Scheduler
from kvstress.schedulers._errors import ScheduleDivergence

VIRTUAL_TIMING = TimingPolicy(slack=1e-6, early_tolerance=1e-6, early_ratio=0.0, virtual=True)
"""Timing checks on the virtual clock: exact but for float rounding."""


@dataclass(frozen=True)
class ScenarioConfig:
    """What every execution of a search shares. ``modules`` are the code under test (default:
    the factory's, for a class its whole MRO); ``max_steps`` bounds one execution's scheduling
    points; ``stall_timeout`` is the wall time a thread may run without one."""

    factory: Callable[..., Any]
    is_async: bool
    num_blocks: int = 2
    block_shape: tuple[int, ...] = (2, 4)
    workers: int = 3
    length: int = 5
    modules: tuple[object, ...] = ()
    max_steps: int = 20_000
    stall_timeout: float = 5.0
    backend: str = "asyncio"  # for async pools: "asyncio" (fully controlled) or "trio" (seeded)
    linearize_limit: float = 1.0
    timing: TimingPolicy = field(default=VIRTUAL_TIMING)
    scenario: Scenario | None = None  # fixed programs for every execution (motifs); else drawn

    def __post_init__(self) -> None:
        if self.backend not in ("asyncio", "trio"):
            raise ValueError(f"backend must be 'asyncio' or 'trio', got {self.backend!r}")
        check_num_blocks(self.num_blocks)
        object.__setattr__(self, "block_shape", check_block_shape(self.block_shape))

    def pool_modules(self) -> tuple[types.ModuleType, ...]:
        """The modules of the code under test: ``modules``, else the factory's."""
        return resolve_modules(self.modules or (self.factory,))

    def pool_files(self) -> frozenset[str]:
        """The source files of the code under test."""
        return source_files(self.pool_modules())


@dataclass
class ExecutionRecord:
    """What one execution left behind, filled in as far as it got (also when it failed)."""

    scenario: Scenario | None = None
    ops: ScenarioOps | None = None
    failure: InvariantViolation | None = None
    blocks: tuple[BlockRecord, ...] = ()  # dumped when the execution failed
    blocks_at: str = ""  # the moment ``blocks`` show, for a reader
    loop_errors: list[str] = field(default_factory=list)
    task_deaths: list[str] = field(default_factory=list)  # the pool's own tasks that died (``_deaths``)
    """Exceptions the event loop caught in a callback or a task before any check failed (a
    pool's done-callback that raised): what a report of a block lost that way says next."""

    @property
    def history(self) -> tuple[Operation, ...]:
        """The operations so far."""
        return self.ops.history.snapshot() if self.ops is not None else ()


class ScenarioOps(Scenarios):
    """The harness operations for one controlled execution (no worker threads, no loop thread)."""

    def __init__(
        self,
        config: ScenarioConfig,
        pool: Any,
        clock: Callable[[], float],
        *,
        virtual: bool = True,
        timing: TimingPolicy | None = None,
    ) -> None:
        self.pool = pool
        self.num_blocks = config.num_blocks
        self.timing = timing or config.timing
        self.history = History()
        self.ledger = Ledger(config.num_blocks)
        self.loop = None
        self.is_async = config.is_async
        self.sequential = False
        self.virtual_time = virtual
        self.clock = clock
        self.thread_pause = coop_sleep if virtual else time.sleep
        self.thread_event = CoopEvent if virtual else threading.Event
        if not virtual:
            watch_stalls()
        self._workers = {}
        self._scopes = {}
        self._newest = {}
        self._programs: list[Coroutine[Any, Any, None]] = []
        self.native_cancel = config.is_async and config.backend == "asyncio" and not speaks_anyio(pool)
        self.backoff_bound = self.timing.backoff_bound_of(pool)

    failed_op: int | None = None  # the operation whose check failed, when one did
    failed_blocks: tuple[BlockRecord, ...] | None = None  # the blocks as that check failed

    async def run_program(self, holder: str, program: Sequence[tuple[str, Any]]) -> None:
        """``Scenarios.run_program``, noting which operation a failing check was about."""
        try:
            await super().run_program(holder, program)
        except InvariantViolation:
            self._note_failure(holder)
            raise

    def program(self, holder: str, program: Sequence[tuple[str, Any]]) -> Coroutine[Any, Any, None]:
        """``run_program``'s coroutine for a worker's task, kept for ``close_unstarted``."""
        coro = self.run_program(holder, program)
        self._programs.append(coro)
        return coro

    def close_unstarted(self) -> None:
        """Close the programs whose task never began: a run stopped first (a finding, a limit)
        dropped them, or asyncio cancelled anyio's wrapper before it awaited one, and Python
        printed "coroutine 'ScenarioOps.run_program' was never awaited" at a later collection."""
        for coro in self._programs:
            if inspect.getcoroutinestate(coro) == inspect.CORO_CREATED:
                coro.close()

    async def finish(self) -> None:
        """With every worker done: release what they still hold, check the pool at rest, then
        take every block once (a try-once each: nothing is in flight, so a None is a lost block,
        whatever the pool's queue shows) and give them back, a moment later where the pool may
        still be serving an acquire that gave up (cancelled or timed out); then the pool's
        optional ``close()``."""
        self.sequential = True
        for holder, block_id in [(h, b) for b, t in self.ledger.open.items() for h in t.holders]:
            if holder in self.ledger.holders_of(block_id):
                await self.op_release(holder, block_id)
        try:
            if self.gave_up_served():
                # The pool may still be serving an acquire that gave up: a worker of its own
                # (or a stale queue entry) that takes a block just released for a caller who is
                # gone gives it back within the settle bound; the pool is read at rest after that.
                await self._sleep(self._settle_bound())
            await self.op_check_quiet()
            taken = [await self.op_acquire("harness", 0) for _ in range(self.num_blocks)]
            for got in taken:
                if got is not None:
                    await self.op_release("harness", got)
            # A pool that offers released blocks later (a reset worker) comes to rest before
            # the run ends: its worker does not hand a block back to a loop closed meanwhile.
            await self.op_settle()
            await self.op_close()
        except InvariantViolation:
            self._note_failure("harness")
            raise

    def _note_failure(self, worker: str) -> None:
        if self.failed_op is None:
            mine = [op.index for op in self.history.snapshot() if op.worker == worker]
            self.failed_op = mine[-1] if mine else None
        if self.virtual_time and self.failed_blocks is None:
            # Under a scheduler every other worker is paused right now: this is the state the
            # check saw. Once the run unwinds (cancelled releases taken back), it is not.
            self.failed_blocks = dump_blocks(self.pool, self.num_blocks, self.ledger)


FOREIGN_MARGIN = 2.0
"""How many times an acquire's longest timeout an idle loop waits for a thread of the pool's own
to answer (``ControlledEventLoop.foreign_patience``): the thread's timed wait began before the loop
went idle, and wakes late on a loaded machine."""


def run_execution(
    config: ScenarioConfig, scheduler: Scheduler, record: ExecutionRecord | None = None
) -> ExecutionRecord:
    """Run one execution (``scheduler.new_execution()`` is called by the run); never raises a
    violation: it is in the record's ``failure``. Raises ``SchedulerExhausted`` when the
    scheduler has no execution left, and what a broken scheduler raises. ``record`` (a fresh
    one) lets a caller watch the run as it goes: the switch recorder reads its history."""
    _flight.execution_started()
    record = ExecutionRecord() if record is None else record
    try:
        if config.is_async and config.backend == "trio":
            from kvstress.scenarios._trio import run_trio_execution

            with loop_clock(config.pool_modules()):
                run_trio_execution(config, scheduler, record)
        elif config.is_async:
            modules = config.pool_modules()
            with loop_clock(modules, fresh_primitives=True):
                run_controlled(
                    lambda: _async_main(config, record),
                    scheduler,
                    max_steps=config.max_steps,
                    max_time=time_bound(config),
                )
        else:
            run_threads(
                lambda: _thread_main(config, record),
                scheduler,
                modules=config.modules or (config.factory,),
                max_steps=config.max_steps,
                stall_timeout=config.stall_timeout,
                max_time=time_bound(config),
            )
    except InvariantViolation as violation:
        record.failure = violation
    except BaseExceptionGroup as group:
        record.failure = as_violation(first_violation(group), record, config)
    except (SchedulerExhausted, SchedulerMisbehaved):
        raise
    except ControlledLoopError as error:
        record.failure = as_violation(error, record, config)
    except (ScheduleDivergence, InternalError):
        raise
    except Exception as error:
        # Raised in a thread the pool started, which the run controls as one of its own (an
        # allocator thread whose check and pop fell apart): a crash of this execution, with its
        # schedule. It went up through the search and ended a fuzzing child, reported as the
        # pool having ended the process, with no schedule to replay (a blind user's).
        record.failure = crash_of(error, config, "a thread the pool started")
    finally:
        if record.ops is not None:
            record.ops.close_unstarted()
    caught = judge_run(config, record)
    if record.failure is not None and record.ops is not None:
        record.blocks, record.blocks_at = blocks_of_failure(config, record.ops)
    if record.failure is not None and (caught or record.task_deaths):
        record.failure = with_loop_errors(record.failure, caught, record.task_deaths)
    return record


def with_loop_errors(
    violation: InvariantViolation, errors: Sequence[str], deaths: Sequence[str] = ()
) -> InvariantViolation:
    """The violation, its message naming what the event loop caught in callbacks before it, and
    the pool's own tasks that died (``_deaths``)."""
    said = [f"the event loop caught in a callback: {'; '.join(errors)}"] if errors else []
    if deaths:
        said.append(f"a task of the pool's own ended by raising, handled or not: {'; '.join(deaths)}")
    found = InvariantViolation(
        violation.invariant,
        f"{violation.message} (before it, {'; '.join(said)})",
        violation.history,
        violation.blocks,
    )
    found.program = violation.program
    return found


def blocks_of_failure(config: ScenarioConfig, ops: ScenarioOps) -> tuple[tuple[BlockRecord, ...], str]:
    """The blocks as the failing check saw them (or at the end, for a failure of the whole run),
    and a phrase saying which moment that is."""
    if ops.failed_blocks is None:
        return dump_blocks(ops.pool, config.num_blocks, ops.ledger), "when the run ended"
    history = ops.history.snapshot()
    failed = ops.failed_op
    what = history[failed].describe() if failed is not None and 0 <= failed < len(history) else "an operation"
    return ops.failed_blocks, f"as the check failed ({what}, operation #{failed}), the other workers paused"


def _thread_main(config: ScenarioConfig, record: ExecutionRecord) -> None:
    controller = active_controller()
    assert controller is not None  # run_threads runs us
    record.scenario = draw_scenario(config, controller.scheduler.next_u64())
    pool = build_pool(config)
    ops = record.ops = ScenarioOps(config, pool, lambda: controller.now)
    workers = [
        spawn(lambda h=h, p=p: run_to_completion(ops.run_program(h, p)), name=h)  # type: ignore[misc]
        for h, p in zip(record.scenario.workers, record.scenario.programs, strict=True)
    ]
    for worker in workers:
        worker.join()
    run_to_completion(ops.finish())


async def _async_main(config: ScenarioConfig, record: ExecutionRecord) -> None:
    loop = current_loop()
    # Once a run has failed, the tasks it cancels may raise again while asyncio shuts down;
    # the first failure is the finding, the rest is noise for the loop's default logger. Before
    # that, what a callback raised is noted for the report (a pool's done-callback that died).
    files = frozenset(config.pool_files())
    loop.set_exception_handler(lambda _loop, context: note_loop_error(record, context, files))
    record.scenario = draw_scenario(config, loop.scheduler.next_u64())
    loop.deadlock_note = lambda: timeouts_not_kept(record.history)
    # A pool's own thread may keep an acquire's timeout in a real timed wait (an async face
    # over worker threads): the loop waits that long for it before it calls the wait a
    # deadlock (it raced the thread's own timeout, and lost under load, at the same 1 s).
    loop.foreign_patience = max(loop.foreign_patience, FOREIGN_MARGIN * record.scenario.longest_timeout)
    loop.tasks_made = []
    try:
        await run_workers(config, record, anyio.current_time)
    finally:
        record.task_deaths = _deaths(loop.tasks_made, files, MAX_LOOP_ERRORS)
        loop.tasks_made = None


def _deaths(tasks: Sequence[asyncio.Task[Any]], files: frozenset[str], most: int) -> list[str]:
    """The exceptions tasks of the pool's own (their coroutine's code in ``files``) died with, at
    most ``most``: such a task, held by the pool, is never collected during the run, so asyncio's
    "Task exception was never retrieved" came after the finding, on stderr, and the report only
    showed what followed (a dead allocator task's blocks, ``lost-block``: a blind user's). Named
    in a finding's message only, never a finding of their own: the pool may await such a task
    and handle what it raised."""
    found: list[str] = []
    for task in tasks:
        if len(found) >= most:
            break
        code = getattr(task.get_coro(), "cr_code", None)
        if not task.done() or task.cancelled() or code is None:
            continue
        if code.co_filename in files and (error := task.exception()) is not None:
            found.append(f"{task.get_name()!r} with {error_text(error)}")
    return found


async def run_workers(config: ScenarioConfig, record: ExecutionRecord, clock: Callable[[], float]) -> None:
    """Build the pool, run ``record.scenario``'s programs as tasks, then finish (async pools)."""
    assert record.scenario is not None
    pool = build_pool(config)
    ops = record.ops = ScenarioOps(config, pool, clock)
    async with anyio.create_task_group() as tg:
        for holder, program in zip(record.scenario.workers, record.scenario.programs, strict=True):
            tg.start_soon(ops.program, holder, program, name=holder)
    await ops.finish()


def note_loop_error(
    record: ExecutionRecord, context: dict[str, Any], files: frozenset[str] = frozenset()
) -> None:
    """An exception the event loop caught in a task or callback nobody awaits: noted for the
    run's failure (``loop_error_crash``), unless kvstress's own code alone raised it (``files``:
    the pool's source files)."""
    if len(record.loop_errors) >= MAX_LOOP_ERRORS or (
        record.ops is not None and record.ops.failed_op is not None
    ):
        return
    line = loop_error_line(context, files)
    if line is not None:
        record.loop_errors.append(line)


def judge_run(config: ScenarioConfig, record: ExecutionRecord) -> Sequence[str]:
    """The run's checks for one that raised nothing (``check_run``), then what the event loop
    caught (``loop_error_crash``): ``record.failure`` set to the first finding. Returns what the
    loop caught that a finding should still name (not the loop's own crash: it names them)."""
    if record.failure is not None or record.ops is None:
        return record.loop_errors
    record.failure = check_run(config, record.ops)
    if record.failure is not None:
        return record.loop_errors
    record.failure = loop_error_crash(record)
    return ()


def loop_error_crash(record: ExecutionRecord) -> InvariantViolation | None:
    """A run that passed every check while a task or callback of the pool's own died with an
    exception (asyncio only logs it: "Task exception was never retrieved", "Exception in
    callback"): a ``crash``, as an exception in a pool's own thread is (protocol.md, "Background
    workers"; a blind tester's pool whose helper task raised was clean)."""
    if not record.loop_errors:
        return None
    return loop_errors_violation(record.loop_errors, record.history)


def time_bound(config: ScenarioConfig) -> float:
    """Virtual seconds no execution can need: every acquire waiting out the longest timeout, one
    after another, plus the hang bound. Past it, something ignored its timeout: a hang."""
    if config.scenario is not None:
        return config.scenario.total_timeout + config.timing.hang_bound
    return config.workers * config.length * max(TIMEOUTS) + config.timing.hang_bound


def draw_scenario(config: ScenarioConfig, seed: int) -> Scenario:
    """The scenario an execution runs, from one random value (the fixed one, if configured)."""
    if config.scenario is not None:
        return config.scenario
    return draw(
        random.Random(seed),
        workers=config.workers,
        length=config.length,
        cancel=config.is_async,
        blocks=config.num_blocks,
        batch=has_member(config.factory, "acquire_many"),
        release_batch=has_member(config.factory, "release_many"),
    )


def has_member(factory: object, name: str) -> bool:
    """Whether ``factory``'s pools have the optional member ``name`` (``acquire_many``,
    ``release_many``), as a class says it: the draws of a run depend on it, so it is decided
    before any pool is built (a plain function's pools are taken to have neither)."""
    return callable(getattr(factory, name, None))


def build_pool(config: ScenarioConfig) -> Any:
    """The pool, from the factory with the protocol's arguments; a factory error is a crash."""
    try:
        return config.factory(config.num_blocks, config.block_shape, dtype=torch.float32, device=None)
    except Exception as error:
        hint = ""
        if isinstance(error, RuntimeError) and "can't start new thread" in str(error):
            hint = (
                f" ({threading.active_count()} threads alive: each pool the runs made left a thread "
                "of its own running; stop it in the pool's close(), which the harness calls once "
                "it is done with a pool)"
            )
        raise InvariantViolation("crash", f"the pool factory raised {error_text(error)}{hint}") from error


def as_violation(error: BaseException, record: ExecutionRecord, config: ScenarioConfig) -> InvariantViolation:
    if isinstance(error, InvariantViolation):
        return error
    if isinstance(error, ThreadDeadlock):
        # Read after the run unwound: a blocked worker's last operation is the one it was in.
        last = {op.worker: op for op in record.history}
        blocked = [last[name] for name in error.wait_for if name in last]
        note = timeouts_not_kept(blocked, unwound=True)  # a line of its own, under the graph
        return InvariantViolation("hang", str(error) + (f"\n{note.removeprefix('. ')}." if note else ""))
    if isinstance(error, ControlledLoopError):
        overran = past_their_timeouts(record.history) if isinstance(error, TimeLimitExceeded) else ""
        return InvariantViolation(_hang_kind(error, record), str(error) + overran)
    return crash_of(error, config, "the execution")


def past_their_timeouts(history: Sequence[Operation]) -> str:
    """For a run stopped at its time limit: the acquires that were still in flight past the
    timeout they were given (a try-once first), which the generic message cannot name. The
    run's unwinding ends each of them ``cancelled``; a cancel of the scenario's own ends one
    before its timeout, and is left out."""
    late = []
    for op in history:
        timeout = op.args.get("timeout")
        stopped = op.outcome == "pending" or (op.outcome == "info" and op.result == "cancelled")
        if (
            op.name in ("acquire", "acquire_many")
            and stopped
            and isinstance(timeout, int | float)
            and not isinstance(timeout, bool)
            and op.end is not None
            and op.end - op.start > timeout + 1e-9
        ):
            late.append(op)
    if not late:
        return ""
    late.sort(key=lambda op: (op.args["timeout"], op.start))
    named = ", ".join(
        f"{op.worker}'s {op.name}(timeout={op.args['timeout']:g}) from {round(op.start, 6):g} s"
        for op in late[:4]
    )
    more = f" and {len(late) - 4} more" if len(late) > 4 else ""
    return f"\nStill in flight past its timeout when the run was stopped: {named}{more}."


def timeouts_not_kept(history: Sequence[Operation], unwound: bool = False) -> str:
    """For a deadlock (read as it is found, before the run unwinds): the acquires in flight that
    were given a timeout. On the run's clock a timed wait ends by a timer (or a thread of the
    pool's own that keeps it); with nothing left to wake anyone, those waits do not keep their
    timeouts, the likeliest bug (a blind user's pool that waited on a future with no deadline
    read only as "a lost wake-up, or a wait on real I/O or a thread"). ``unwound``: the
    operations of the threads a deadlock blocked, read after the run unwound them (they end
    cancelled or raised then)."""
    waiting = [
        op
        for op in history
        if op.name in ("acquire", "acquire_many")
        and (op.outcome == "pending" or (unwound and op.outcome != "ok"))
        and isinstance(op.args.get("timeout"), int | float)
        and op.args["timeout"] > 0
    ]
    if not waiting:
        return ""
    named = ", ".join(f"{op.worker}'s {op.name}(timeout={op.args['timeout']:g})" for op in waiting[:4])
    more = f" and {len(waiting) - 4} more" if len(waiting) > 4 else ""
    return (
        f". In flight with a timeout, and nothing pending that would end it then: {named}{more} "
        "(a wait that does not keep its timeout, or waits for something past it)"
    )


def crash_of(error: BaseException, config: ScenarioConfig, what: str) -> InvariantViolation:
    """The ``crash`` an error escaping ``what`` is, when the pool's code is on its way; raises
    InternalError when kvstress's own code alone raised it (``kvstress._blame``)."""
    files = config.pool_files()
    if raised_in_kvstress(error, files):
        raise internal_error(error) from error
    return InvariantViolation("crash", f"{what} raised {error_text(error)}")


def _deferred(op: Operation) -> Operation:
    if op.name != "release" or op.result is not True:
        return op
    return replace(op, observed={**(op.observed or {}), "deferred": True})


def _hang_kind(error: ControlledLoopError, record: ExecutionRecord) -> str:
    """A spin that never ends inside an acquire is busy waiting; anything else that never ends
    is a hang."""
    if isinstance(error, StepLimitExceeded):
        mine = [op for op in record.history if op.worker == error.culprit]
        # An acquire in flight when the run was stopped stays "pending", or ends "cancelled"
        # or "raised" (its lock released twice, say) as the run unwinds it.
        if mine and mine[-1].name == "acquire" and mine[-1].outcome != "ok":
            return "busy-wait"
    return "hang"


def check_run(config: ScenarioConfig, ops: ScenarioOps) -> InvariantViolation | None:
    """The checks on a finished run's whole history: wake-ups, then linearizability."""
    history = ops.history.snapshot()
    if ops.deferring:
        # The pool finished some release after it returned, and may have offered any block a
        # moment after its release's return (a reset worker quick to zero a block but not yet
        # to queue it shows no RELEASING): every release is judged so.
        history = tuple(_deferred(op) for op in history)
    try:
        # Each waiter's own stalls (observed excused_s) widen its window in the checker.
        checkers.check_wakeups(history, ops.backoff_bound, ops.timing.slack_now(), ops.timing.settle)
    except InvariantViolation as violation:
        return violation
    result = check_history(
        history, config.num_blocks, time_limit=config.linearize_limit, settle=ops.timing.settle
    )
    return None if result.status != "violation" else unlinearizable(history, result)


def unlinearizable(history: Sequence[Operation], result: LinearizabilityResult) -> InvariantViolation:
    """The violation a history with no linearization (``result``) is reported as."""
    by_index = {op.index: op for op in history}
    witness = [by_index[i] for i in map(operation_index, result.witness) if i in by_index]
    why = ""
    if result.block is None:
        # Named by the acquires that were refused (None) in the witness, not by any that waited
        # for their block: a try-once refused beside a timed acquire that got one is lost-block.
        refused = [op for op in witness if op.name == "acquire" and op.result is None] or witness
        timed = any(op.name == "acquire" and (op.args.get("timeout") or 0) > 0 for op in refused)
        invariant = "lost-wakeup" if timed else "lost-block"
        # The same history fault, named by what was refused: a waiter, or a try-once.
        why = " (a waiting acquire gave up: lost-wakeup)" if timed else " (a try-once refused: lost-block)"
    else:
        acquires = sum(op.name == "acquire" and op.result == result.block for op in witness)
        invariant = "shared-block" if acquires >= 2 else "lost-block"
    return InvariantViolation(
        invariant, f"the history is not linearizable{why}: {result.message}", history=tuple(history)
    )
