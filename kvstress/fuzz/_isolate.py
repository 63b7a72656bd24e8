"""Isolation: the search runs in child processes under a small supervisor that outlives them.

A pool may kill the process it runs in: a C extension's segfault, ``os._exit``, an exit nobody
asked for, the kernel's kill for memory. Each child fuzzes one seed stream and keeps a flight
record in shared memory (``kvstress._flight``: the slice, its strategy and seed, and the
execution in flight). A child that ends without handing in its result is a finding: the
supervisor writes a ``crash`` report at once (the signal or exit status, the flight record, the
child's last stderr lines, with ``faulthandler``'s stacks of every thread when a signal killed
it), stops the other children and returns. A child over its budget by ``OVERSTAY_S`` (counted
from its search's start), or still loading after ``LOAD_S``, is killed and reported the same
way, so the run always ends. ``memory_limit`` bounds each child's heap and
private memory (``RLIMIT_DATA``): a runaway pool then fails an allocation, a ``crash`` finding,
instead of taking the machine down. Not ``RLIMIT_AS``: a CUDA context reserves far more address
space than it uses, and would fail under any limit a machine's memory suggests.

The flight record costs one shared-memory write per execution: 0.15 us, against 0.7 us for a
pipe and 2.4 us for a small file rewritten in place (measured, 200,000 writes each), and it needs
no reader and no flush to survive the child. The run's wall time grows by one process start
(about a second: the child imports torch); ``benchmarks/bench_isolation.py`` measures the rest.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import queue
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NoReturn

from kvstress import _flight
from kvstress._blame import InternalError, describe, raised_in_kvstress
from kvstress.controlled._patch import resolve_modules, source_files
from kvstress.fuzz._run import FuzzOutcome, Progress, signal_from_the_pool
from kvstress.fuzz._target import FuzzTarget, cwd_entries

OVERSTAY_S = 60.0
"""Seconds a child may run past its budget, counted from its search's start, before the
supervisor kills it as hung (times ``slowdown()``)."""
LOAD_S = 120.0
"""Seconds a child may take to load (import kvstress, torch and the pool's module, build the
pool that checks the protocol) before the supervisor kills it as hung (times ``slowdown()``):
about 2 s here, 28 s under ``-X tracemalloc=5``, where a correct pool was killed "hung" at the
budget and the overstay counted from the child's start (a blind user's CI)."""


def slowdown() -> float:
    """How many times slower than usual this interpreter runs the search, as its children
    inherit its flags: ``tracemalloc`` tracing (its frames stored for every allocation: an
    import 15 times slower) and dev mode (the debug allocator's checks)."""
    import tracemalloc

    factor = 15.0 if tracemalloc.is_tracing() else 1.0
    return factor * 2.0 if sys.flags.dev_mode else factor


STDERR_LINES = 40
DUMP_LINES = 400  # every thread's stack (faulthandler keeps 100 frames a thread)
"""The child's last stderr lines kept in a crash report."""
INTERNAL_EXIT = 70  # EX_SOFTWARE: the child ended on an error of kvstress's own code
INTERNAL_PREFIX = "kvstress: internal error: "


def default_memory_limit() -> int | None:
    """Half of this machine's physical memory, in bytes (None where it cannot be read)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
    except (ValueError, OSError, AttributeError):
        return None


MIN_MEMORY_LIMIT = 512 << 20
"""The smallest ``--memory-limit``: a child holds about 250 MiB of heap and private memory
(Python, torch, kvstress) before the pool does anything, and each thread it starts maps a stack;
under 300 MiB it could not start its threads at all."""


def parse_size(text: str) -> int | None:
    """``--memory-limit``: bytes with an optional K, M, G or T suffix; ``none`` for no limit.
    ValueError names the option."""
    cleaned = text.strip().upper().removesuffix("B")
    if cleaned in ("NONE", "0"):
        return None
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(cleaned[-1:], 1)
    number = cleaned[:-1] if scale > 1 else cleaned
    try:
        value = float(number)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ValueError(f"--memory-limit must be a size such as 4G or 512M, or none, got {text!r}")
    if value * scale < MIN_MEMORY_LIMIT:
        raise ValueError(
            f"--memory-limit must be at least 512M (a fuzzing child uses about 250M before the pool "
            f"does anything), got {text!r}"
        )
    return int(value * scale)


@dataclass(frozen=True)
class Job:
    """What each child fuzzes: the target, by spec, and the run's options."""

    spec: str
    num_blocks: int
    block_shape: tuple[int, ...]
    backend: str
    budget_s: float
    seed: int
    mix: tuple[str, ...]
    report_dir: str
    mode: str = "unknown"  # threads or async, once a child has loaded the pool
    memory_limit: int | None = None
    refuse_trio_threads: bool = False  # a threaded pool on an explicit trio backend is refused
    # A folder to import the pool from after the current directory (a replay's ``pool_path``):
    # kept off the child's path as it starts, appended after the current directory once it runs.
    after_cwd: str = ""

    @classmethod
    def of(
        cls, target: FuzzTarget, *, budget_s: float, seed: int, mix: tuple[str, ...], report_dir: str | Path
    ) -> Job:
        """The job that fuzzes ``target`` as ``fuzz`` would."""
        return cls(
            target.spec,
            target.num_blocks,
            tuple(target.block_shape),
            target.backend,
            budget_s,
            seed,
            tuple(mix),
            str(report_dir),
            target.mode,
        )


@dataclass(frozen=True)
class Death:
    """A child that ended without its result, and where it was."""

    worker: int
    stream: int
    exitcode: int | None  # negative: the signal that killed it; None: killed for overstaying
    strategy: str
    slice: int
    slice_seed: int
    execution: int
    elapsed_s: float
    executions: int
    stderr: tuple[str, ...]

    @property
    def internal(self) -> str:
        """The one-line error when kvstress's own code ended the child (not the pool), else ""."""
        if self.exitcode != INTERNAL_EXIT:
            return ""
        line = next((line for line in reversed(self.stderr) if line.startswith(INTERNAL_PREFIX)), "")
        return line[len(INTERNAL_PREFIX) :]

    @property
    def how(self) -> str:
        """``SIGSEGV``, ``exit 3``, or ``hang``: what a reader and ``replay`` compare."""
        if self.exitcode is None:
            return "hang"
        if self.exitcode < 0:
            with contextlib.suppress(ValueError):
                return signal.Signals(-self.exitcode).name
            return f"signal {-self.exitcode}"
        return f"exit {self.exitcode}"


@dataclass
class Supervised:
    """The children's results together: the usual outcome, executions per worker, a death."""

    outcome: FuzzOutcome
    per_worker: list[int] = field(default_factory=list)
    death: Death | None = None
    internal: Path | None = None  # kvstress's own failure: its traceback, in a text file
    refused: str | None = None  # the pool could not be loaded (TargetError's one line): bad input
    mode: str = "unknown"  # threads or async, as the first child to load the pool found


def supervise(
    job: Job,
    streams: list[int],
    *,
    on_progress: Callable[[Progress], None] | None = None,
    write: bool = True,
) -> Supervised:
    """Fuzz ``job`` in one child per stream; see the module docstring. ``write`` writes a crash
    report for a death (``replay`` compares deaths without one)."""
    context = multiprocessing.get_context("spawn")
    stop, events = context.Event(), context.Queue()
    # A supervisor that ignores SIGINT (started in the background by a shell script) has its
    # children ignore it too: a Ctrl-C to the process group is no one's to act on then.
    sigint_ignored = _ignores_sigint()
    records = [context.Array("q", _flight.FIELDS, lock=False) for _ in streams]
    logs = [_log_file() for _ in streams]
    children = [
        context.Process(
            target=_child,
            args=(job, stream, worker, records[worker], events, stop, logs[worker], sigint_ignored),
            name=f"kvstress-fuzz-{worker}",
            daemon=True,
        )
        for worker, stream in enumerate(streams)
    ]
    start = time.monotonic()
    slow = slowdown()
    searching_since: float | None = None  # when the first child loaded the pool
    results: dict[int, tuple[str | None, int, int, bool]] = {}
    progress: dict[int, Progress] = {}
    loaded: dict[str, str] = {}  # "mode" once a child loaded the pool, "refused" if it could not
    death: Death | None = None
    interrupted = False
    _start_clear_of_cwd(children, job.after_cwd)
    try:
        while len(results) < len(children) and death is None and "refused" not in loaded:
            _drain(events, results, progress, on_progress, len(children), wait=0.1, loaded=loaded)
            for worker, child in enumerate(children):
                if worker in results or child.is_alive():
                    continue
                _drain(events, results, progress, on_progress, len(children), wait=0.5, loaded=loaded)
                if worker not in results and "refused" not in loaded:
                    death = _death(job, worker, streams, child.exitcode, records, progress, logs, start)
                    break
            else:
                now = time.monotonic()
                if searching_since is None and "mode" in loaded:
                    searching_since = now
                if (
                    now - start > LOAD_S * slow
                    if searching_since is None
                    else now - searching_since > job.budget_s + OVERSTAY_S * slow
                ):
                    worker = next(w for w in range(len(children)) if w not in results)
                    _dump_stacks(children[worker])
                    children[worker].kill()
                    children[worker].join(5)
                    death = _death(job, worker, streams, None, records, progress, logs, start)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        stop.set()
        for child in children:  # a Ctrl-C in a terminal reached them too; elsewhere, pass it on
            if child.is_alive() and child.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child.pid, signal.SIGINT if interrupted else signal.SIGTERM)
        for child in children:
            child.join(10)
            if child.is_alive():
                child.kill()
                child.join(5)
        with contextlib.suppress(Exception):
            _drain(events, results, progress, None, len(children), wait=0.0, loaded=loaded)
        for worker, log in enumerate(logs):
            # Not after a Ctrl-C: a child it caught while starting up leaves only a traceback;
            # nor after a refusal, which the caller says in one line.
            if not interrupted and "refused" not in loaded and (death is None or worker != death.worker):
                _echo(Path(log))
            with contextlib.suppress(OSError):
                os.unlink(log)
    per_worker = [
        results[w][1] if w in results else progress.get(w, _NONE).executions for w in range(len(streams))
    ]
    executions = sum(per_worker)
    operations = sum(
        results[w][2] if w in results else progress.get(w, _NONE).operations for w in range(len(streams))
    )
    elapsed = time.monotonic() - start
    report = next((Path(r[0]) for r in results.values() if r[0] is not None), None)
    interrupted = interrupted or any(r[3] for r in results.values())
    internal = None
    mode = loaded.get("mode", job.mode)
    if death is not None and write and report is None:
        if death.internal:
            internal = write_internal_log(job, death)
        else:
            report = write_crash_report(replace(job, mode=mode), death)
    return Supervised(
        FuzzOutcome(
            executions, operations, elapsed, None, report, interrupted and death is None and report is None
        ),
        per_worker,
        death,
        internal,
        loaded.get("refused"),
        mode,
    )


_NONE = Progress(0.0, 0.0, 0, 0, "")


def _log_file() -> str:
    fd, name = tempfile.mkstemp(prefix="kvstress-child-", suffix=".err")
    os.close(fd)
    return name


def _drain(
    events: Any,
    results: dict[int, tuple[str | None, int, int, bool]],
    progress: dict[int, Progress],
    on_progress: Callable[[Progress], None] | None,
    workers: int,
    wait: float,
    loaded: dict[str, str] | None = None,
) -> None:
    first = True
    while True:
        try:
            event = events.get(timeout=wait) if first and wait else events.get_nowait()
        except (queue.Empty, EOFError, OSError):
            return
        first = False
        kind, worker, *rest = event
        if kind == "progress":
            progress[worker] = Progress(*rest)
            if on_progress is not None:
                shown = list(progress.values())
                on_progress(
                    Progress(
                        max(p.elapsed_s for p in shown),
                        rest[1],
                        sum(p.executions for p in shown),
                        sum(p.operations for p in shown),
                        rest[4],
                    )
                )
        elif kind == "done":
            results[worker] = (rest[0], rest[1], rest[2], rest[3])
        elif kind == "loaded" and loaded is not None:
            loaded.setdefault("mode", rest[0])
        elif kind == "refused" and loaded is not None:
            loaded.setdefault("refused", rest[0])


def _death(
    job: Job,
    worker: int,
    streams: list[int],
    exitcode: int | None,
    records: list[Any],
    progress: dict[int, Progress],
    logs: list[str],
    start: float,
) -> Death:
    record = list(records[worker])
    return Death(
        worker,
        streams[worker],
        exitcode,
        _flight.strategy_of(record[_flight.STRATEGY]),
        record[_flight.SLICE],
        record[_flight.SEED],
        record[_flight.EXECUTION],
        _since(record[_flight.STARTED_US], time.monotonic() - start),
        progress.get(worker, _NONE).executions,
        tuple(_tail(Path(logs[worker]))),
    )


def _since(started_us: int, fallback: float) -> float:
    """Seconds since the child's search began (its own start-up left out, as for any finding)."""
    return time.time() - started_us / 1e6 if started_us else fallback


def _tail(path: Path) -> list[str]:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    # A line is cut at 2,000 characters: a pool's megabyte-long message is its own to keep.
    lines = [line[:2000] for line in lines if not line.startswith("kvstress: fuzz ")]
    fatal = next((i for i, line in enumerate(lines) if line.startswith("Fatal Python error")), None)
    if fatal is not None:  # faulthandler: the fatal line and the current thread's stack first
        return lines[fatal : fatal + STDERR_LINES]
    dumped = next((i for i, line in enumerate(lines) if line.startswith("Thread 0x")), None)
    if dumped is not None:  # every thread's stack, asked for before a kill: the blocked one among them
        return lines[dumped : dumped + DUMP_LINES]
    return lines[-STDERR_LINES:]


def _echo(path: Path) -> None:
    """Pass a child's stderr on to ours (its one-line notices, a library's warnings)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return
    if text:
        sys.stderr.write(text if text.endswith("\n") else text + "\n")


def write_internal_log(job: Job, death: Death) -> Path:
    """kvstress's own failure in a child (``Death.internal``): no report against the pool, but
    the traceback kept in ``<report dir>/<time>-kvstress-internal-error-<pid>.txt``."""
    folder = Path(job.report_dir)
    folder.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path = folder / f"{stamp}-kvstress-internal-error-{os.getpid()}.txt"
    lines = [
        f"kvstress failed in its own code, not the pool ({job.spec}): {death.internal}",
        f"fuzz seed {job.seed}, stream {death.stream}, {death.strategy or 'before the first'} slice "
        f"{death.slice} (seed {death.slice_seed}), execution {death.execution}",
        "",
        *death.stderr,
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def write_crash_report(job: Job, death: Death) -> Path:
    """The report of a child's death (schema ``kvstress.failure/1``, invariant ``crash``)."""
    from kvstress.reports import versions, write_report

    where = (
        f"in execution {death.execution} of a {death.strategy} slice (slice {death.slice}, seed "
        f"{death.slice_seed})"
        if death.strategy
        else "before the first slice began"
        if job.mode != "unknown"
        else "while kvstress loaded the pool (importing its module, or building the one pool that "
        "checks the protocol)"
    )
    if death.exitcode is None:
        # kvstress stopped it: the pool did not end it. Its stacks, dumped first, are in stderr.
        slow = slowdown()
        limit = (
            f"within {OVERSTAY_S * slow:g} s of its budget"
            if job.mode != "unknown"
            else f"loading within {LOAD_S * slow:g} s"
        )
        stacks = (
            "its threads' stacks as it was killed are in the report's stderr"
            if death.stderr
            else "it wrote no stacks (killed before it could: still starting up)"
        )
        message = (
            f"the fuzzing process did not stop {limit} {where}, and was killed: a thread blocked "
            "where kvstress cannot see it (a blocking socket or file call, a C extension's lock, a "
            "finalizer or callback waiting for a lock a parked thread holds) or a call that never "
            f"returns; {stacks}"
        )
    else:
        if death.exitcode < 0:
            what = f"the fuzzing process was killed by {death.how} {where}"
        else:
            what = f"the fuzzing process exited with status {death.exitcode}, unasked, {where}"
        last = next((line for line in death.stderr if line.startswith("Fatal Python error")), "")
        last = last or next((line for line in reversed(death.stderr) if line.strip()), "")
        message = f"{what}: the pool ended the process it runs in" + (
            f"; its last words: {last.strip()}" if last else ""
        )
    report = {
        "schema": "kvstress.failure/1",
        "invariant": "crash",
        "message": message,
        "pool": job.spec,
        "mode": job.mode,
        "backend": job.backend if job.mode == "async" else None,
        "strategy": death.strategy or "unknown",
        "seed": death.slice_seed,
        "schedule": None,
        "elapsed_s": round(death.elapsed_s, 6),
        "history": [],
        "blocks": [],
        "metrics": {"executions": death.executions, "operations": 0, "fuzz_seed": job.seed},
        "versions": versions(),
        "replay": "",
        "stderr": list(death.stderr),
        "config": {
            "kind": "crash",
            "num_blocks": job.num_blocks,
            "block_shape": list(job.block_shape),
            "death": death.how,
            "stream": death.stream,
            "fuzz_seed": job.seed,
            "mix": list(job.mix),
            "budget_s": job.budget_s,
            "slice": death.slice,
            "execution": death.execution,
            "memory_limit": job.memory_limit,
        },
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    return write_report(report, job.report_dir)


def _dump_stacks(child: Any) -> None:
    """Ask a child about to be killed for every thread's stack (``faulthandler``, into its log),
    and give it a moment to write them."""
    if hasattr(signal, "SIGUSR1") and child.pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signal.SIGUSR1)
            time.sleep(0.5)


PARENT_POLL_S = 0.5


def _end_with(parent: int) -> None:
    """End this child, at once, when its parent is gone: a parent killed outright (``timeout``'s
    SIGTERM on ``kvstress replay``) cannot stop it, and a child whose pool blocks a thread for
    good lived on for minutes, its SIGTERM only asking the run to stop (a blind user's replay)."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(1)

    threading.Thread(target=watch, name="kvstress-parent-watch", daemon=True).start()


def _ignores_sigint() -> bool:
    try:
        return signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    except ValueError:  # pragma: no cover - no SIGINT on this platform
        return False


def _child(
    job: Job, stream: int, worker: int, record: Any, events: Any, stop: Any, log: str, sigint_ignored: bool
) -> None:
    """A child's whole life: stderr to its log, faulthandler on, the memory bound, then fuzz."""
    import faulthandler

    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(fd, 2)
    os.close(fd)
    faulthandler.enable(all_threads=True)
    if hasattr(signal, "SIGUSR1"):  # the parent asks for every thread's stack before a kill
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    _end_with(os.getppid())
    # The supervisor sets ``stop`` before it sends SIGTERM; one that comes first is the pool's,
    # or a signal to the whole process group that the supervisor is about to act on.
    signal.signal(signal.SIGTERM, lambda *_: None if stop.is_set() else signal_from_the_pool(stop, "SIGTERM"))
    if job.memory_limit is not None:
        import resource

        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_DATA, (job.memory_limit, job.memory_limit))
    _flight.attach(record)
    if not sigint_ignored:  # started ignored: see _start_clear_of_cwd
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if job.report_dir:  # the run's events, beside its reports, as the parent's own go there
        from kvstress.cli._logging import configure

        with contextlib.suppress(Exception):  # no events file is no reason to stop fuzzing
            configure(job.report_dir, console=False)
    from kvstress.fuzz._run import fuzz
    from kvstress.fuzz._target import TargetError, load_target, make_importable_after_cwd

    if job.after_cwd:  # a module of the pool's name in the current directory (a fix) comes first
        make_importable_after_cwd(job.after_cwd)

    # The pool's code runs here only, never in the supervisor: its module's import and the one
    # pool built to check the protocol may end the process too (a constructor that segfaults,
    # calls os._exit, or registers an exit hook), and that is a crash report like any other.
    try:
        target = load_target(
            job.spec, num_blocks=job.num_blocks, block_shape=job.block_shape, backend=job.backend
        )
    except TargetError as error:
        _hand_in(events, ("refused", worker, str(error)))
    if job.refuse_trio_threads and not target.is_async:
        _hand_in(
            events,
            ("refused", worker, f"--backend trio applies to async pools; {job.spec} is a threaded pool"),
        )
    events.put(("loaded", worker, target.mode))

    def progress(p: Progress) -> None:
        events.put(("progress", worker, p.elapsed_s, p.budget_s, p.executions, p.operations, p.strategy))

    _flight.run_started()
    try:
        outcome = fuzz(
            target,
            budget_s=job.budget_s,
            seed=job.seed,
            mix=job.mix,
            report_dir=job.report_dir,
            stream=stream,
            stop=stop,
            on_progress=progress,
            supervised=True,
        )
    except Exception as error:
        files = source_files(resolve_modules(target.pool_modules or (target.factory,)))
        if isinstance(error, InternalError) or raised_in_kvstress(error, files):
            # Not the pool's doing: say so in one line after the traceback, and exit with the
            # status the supervisor reads as kvstress's own failure.
            traceback.print_exc()
            cause = error.__cause__ if isinstance(error, InternalError) and error.__cause__ else error
            print(f"{INTERNAL_PREFIX}{describe(cause)}", file=sys.stderr, flush=True)
            os._exit(INTERNAL_EXIT)
        raise
    report = str(outcome.report) if outcome.report is not None else None
    events.put(("done", worker, report, outcome.executions, outcome.operations, outcome.interrupted))
    events.close()
    events.join_thread()  # the result is in the pipe before this process may be killed
    _exit_now()


def _hand_in(events: Any, event: tuple[Any, ...]) -> NoReturn:
    """Hand in ``event`` and end the child at once (the pool loaded, or refused, nothing more)."""
    events.put(event)
    events.close()
    events.join_thread()
    _exit_now()


def _exit_now() -> NoReturn:
    """End a child whose result is delivered as a forked child ends (``os._exit``), its logs
    flushed, rather than through the interpreter's shutdown, which runs the pool's exit hooks
    beside its daemon threads: a pool whose ``weakref.finalize`` wakes its own reset thread at
    exit aborted the child after a clean run ("terminate called without an active exception",
    "Fatal Python error: Aborted" and every thread's stack in the user's terminal)."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(0)


def _start_clear_of_cwd(processes: list[Any], after_cwd: str = "") -> None:
    """Start ``processes`` with the parent's ``sys.path`` less the current directory (and less
    ``after_cwd``, which each child appends after it: ``Job.after_cwd``).

    A spawned child imports kvstress before anything else; with the current directory on its
    path, a folder there named ``kvstress`` (a clone) would be imported as a namespace package
    instead of the installed one (an editable install's finder comes after the path). Each
    child appends the directory once kvstress is in (``load_target``), for the user's pool.
    A replay's ``pool_path``, appended by the parent after the current directory, came before
    it in the child: a crash replay ran the report's old module, not the fix beside the replay
    (a blind user's).
    """
    removed = [*cwd_entries(), *([after_cwd] if after_cwd else [])]
    saved = list(sys.path)
    sys.path[:] = [entry for entry in sys.path if entry not in removed]
    # Children start ignoring SIGINT (the disposition survives exec), so a Ctrl-C while one is
    # still importing cannot leave a traceback; each takes it back before it fuzzes.
    try:
        ignored: Any = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread: leave signals alone
        ignored = None
    try:
        for process in processes:
            process.start()
    finally:
        sys.path[:] = saved
        if ignored is not None:
            signal.signal(signal.SIGINT, ignored)
