"""``kvstress fuzz``: search a pool for violations within a budget; write a report for the first.

Exit 0: none found within the budget. Exit 1: a violation, its report written (a pool that
kills its fuzzing process is one: ``crash``). Exit 2: bad input (one line), or a run that
completed no execution. Exit 3: kvstress failed in its own code (its traceback in a text file
beside the reports; no finding against the pool). The search runs in child processes under a supervisor
(``kvstress.fuzz._isolate``): ``--workers N`` runs N of them on distinct seed streams and stops
them all at the first failure; ``--shard I/N`` takes every N-th stream, for CI matrices.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

from kvstress.cli._logging import configure
from kvstress.cli._parser import Parser, UsageError
from kvstress.fuzz import Progress, TargetError, parse_mix
from kvstress.fuzz._isolate import Job, Supervised, default_memory_limit, parse_size, supervise
from kvstress.fuzz._target import check_target_args

INTERNAL_STATUS = 3
"""kvstress failed in its own code: no verdict on the pool either way."""


def add_parser(subparsers: argparse._SubParsersAction[Parser]) -> None:
    """Register ``fuzz`` and its options."""
    parser = subparsers.add_parser(
        "fuzz",
        help="search a pool for violations; write a report for the first one",
        description="Spend a budget across controlled schedules, the state machine and free-running "
        "stress; stop at the first violation. Exit 0: none found; 1: found (report written); 2: bad input.",
        allow_abbrev=False,
    )
    parser.add_argument("--pool", required=True, metavar="MODULE:ATTR", help="the pool class or factory")
    parser.add_argument("--budget", type=float, default=60.0, metavar="SECONDS", help="(%(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="(%(default)s)")
    parser.add_argument("--report-dir", default="reports", metavar="DIR", help="(%(default)s)")
    parser.add_argument(
        "--blocks",
        type=int,
        default=2,
        metavar="N",
        help="blocks per pool (%(default)s); after the first pass, one slice in three tries N+2 or 2N+4",
    )
    parser.add_argument("--block-shape", default="2,4", metavar="D,D", help="(%(default)s)")
    parser.add_argument(
        "--backend", default=None, choices=("asyncio", "trio"), help="async pools (default: asyncio)"
    )
    parser.add_argument(
        "--strategy",
        default="auto",
        help="auto, or a list of contract,delay,pct,random,machine,stress,history (%(default)s)",
    )
    parser.add_argument("--workers", type=int, default=1, metavar="N", help="processes (%(default)s)")
    parser.add_argument("--shard", default="0/1", metavar="I/N", help="this machine's share (%(default)s)")
    parser.add_argument(
        "--memory-limit",
        default="auto",
        metavar="SIZE",
        help=(
            "heap and private memory per fuzzing process, such as 4G, or none "
            "(0 is none too; auto: half the machine's)"
        ),
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Fuzz as asked, in supervised child processes; print the finding's report and replay."""
    if not (args.budget > 0 and math.isfinite(args.budget)):
        raise UsageError(f"--budget must be a finite number of seconds > 0, got {args.budget:g}")
    if not 0 <= args.seed < 1 << 64:
        raise UsageError(f"--seed must be an integer in [0, 2**64), got {args.seed}")
    if args.workers < 1:
        raise UsageError(f"--workers must be >= 1, got {args.workers}")
    shard, shards = _shard(args.shard)
    mix = parse_mix(args.strategy)
    shape = _shape(args.block_shape)
    limit = default_memory_limit() if args.memory_limit == "auto" else _size(args.memory_limit)
    backend = args.backend or "asyncio"
    try:
        blocks, shape = check_target_args(args.pool, args.blocks, shape, backend)
    except TargetError as error:
        raise UsageError(_as_flags(str(error))) from None
    configure(args.report_dir)
    # The pool is loaded (imported, one built to check the protocol) in the fuzzing processes
    # only: what its code does to its process ends a child, a crash report, never this one.
    job = Job(
        args.pool,
        blocks,
        shape,
        backend,
        args.budget,
        args.seed,
        tuple(mix),
        str(args.report_dir),
        memory_limit=limit,
        # asyncio, the default, is no choice to refuse: a script passing it to every pool of a
        # mixed set lost every threaded run to exit 2 (a blind user's batch).
        refuse_trio_threads=args.backend == "trio",
    )
    streams = [shard + shards * w for w in range(args.workers)]
    before = _reports_in(args.report_dir)
    with _terminated_as_interrupted() as terminated:
        try:
            result = _supervised(job, streams)
        except KeyboardInterrupt:
            if not terminated:
                raise
            print("kvstress: interrupted", file=sys.stderr)  # one landed past the summary's making
            return 128 + signal.SIGTERM
    if result.refused is not None:
        raise UsageError(_as_flags(result.refused))
    status = _say(result, args)
    if result.outcome.report is not None:
        # Workers stopped after the first finding may each have written one of their own.
        others = sorted(_reports_in(args.report_dir) - before - {Path(result.outcome.report).resolve()})
        for other in others:
            print(f"also found by another worker: {other}")
    return 128 + signal.SIGTERM if terminated and status == 130 else status


def _as_flags(said: str) -> str:
    """The API names its parameters; on the command line the user wrote the flags."""
    for name, flag in (("num_blocks", "--blocks"), ("block_shape", "--block-shape")):
        said = f"{flag}{said.removeprefix(name)}" if said.startswith(f"{name} ") else said
    return said


def _reports_in(folder: str) -> set[Path]:
    """The JSON reports in ``folder`` now (none where it cannot be read)."""
    try:
        return {path.resolve() for path in Path(folder).glob("*.json")}
    except OSError:
        return set()


@contextlib.contextmanager
def _terminated_as_interrupted() -> Iterator[list[int]]:
    """SIGTERM (a CI job's time limit, ``kill``) ends the run as Ctrl-C does: the children are
    stopped, what they found is kept and the summary printed, then exit 143. Without it the
    process died at once, its children lived on for seconds, and Python's resource tracker
    printed leaked semaphores over the log. The list holds the signal once it came."""
    came: list[int] = []

    def interrupt(signum: int, frame: object) -> None:
        came.append(signum)
        if len(came) == 1:
            # Once: GNU timeout signals the command and then its process group, so the run gets
            # two at once, and the second, raised while the first unwound, lost the summary and
            # the status (``kvstress: interrupted``, 130: a blind user's CI script, now and then).
            raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread: leave signals alone
        yield came
        return
    try:
        yield came
    finally:
        # Once one came, the process is on its way out: a later one must not kill it before the
        # summary (the default action would, as the block ends).
        signal.signal(signal.SIGTERM, signal.SIG_IGN if came else previous)


def _size(text: str) -> int | None:
    try:
        return parse_size(text)
    except ValueError as error:
        raise UsageError(str(error)) from None


def _supervised(job: Job, streams: list[int]) -> Supervised:
    if sys.stderr.isatty():
        from rich.progress import BarColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as Bar

        with Bar(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), transient=True) as bar:
            task = bar.add_task("fuzz", total=job.budget_s)

            def show(p: Progress) -> None:
                rate = p.executions / p.elapsed_s if p.elapsed_s else 0.0
                bar.update(
                    task,
                    completed=p.elapsed_s,
                    description=(
                        f"{p.strategy:<8} {p.executions:>8,} executions {rate:>7,.0f}/s "
                        f"{p.operations:>9,} operations"
                    ),
                )

            return supervise(job, streams, on_progress=show)
    last = [0.0]

    def line(p: Progress) -> None:
        if p.elapsed_s - last[0] >= 5.0:
            last[0] = p.elapsed_s
            print(
                f"kvstress: fuzz {p.elapsed_s:.0f}/{p.budget_s:g} s, {p.executions} executions, "
                f"{p.operations} operations, now {p.strategy}",
                file=sys.stderr,
                flush=True,
            )

    return supervise(job, streams, on_progress=line)


def _say(result: Supervised, args: argparse.Namespace) -> int:
    outcome = result.outcome
    if result.death is not None and result.death.internal:
        print(
            "kvstress: internal error, no verdict on the pool (the run stopped there): "
            f"{result.death.internal}; traceback in {result.internal} (a bug in kvstress: please report it)",
            file=sys.stderr,
        )
        return INTERNAL_STATUS
    if outcome.report is not None:
        from kvstress.reports import load_report, pool_size, replay_line

        report = load_report(outcome.report)
        print(f"violation: [{report['invariant']}] {' '.join(report['message'].splitlines())}")
        print(
            f"strategy: {report['strategy']}  seed: {report['seed']}  found after {report['elapsed_s']:.3f} s"
        )
        larger = pool_size(report, only_larger=True)
        if larger:
            print(f"on a pool of {larger}")
        print(f"report: {outcome.report}")
        print(f"html: {outcome.report.with_suffix('.html')}")
        print(replay_line(report))
        return 1
    if not outcome.interrupted and outcome.executions == 0:
        raise UsageError(
            f"no execution completed in {args.budget:g} s, so nothing was checked: give it a longer "
            "--budget (the pool's construction or first execution takes longer than that)"
        )
    what = "interrupted" if outcome.interrupted else "no violation found"
    each = f" (per worker: {', '.join(map(str, result.per_worker))})" if len(result.per_worker) > 1 else ""
    print(
        f"{what}: {outcome.executions} execution{'' if outcome.executions == 1 else 's'}{each}, "
        f"{outcome.operations} operations in "
        f"{outcome.elapsed_s:.1f} s ({args.pool})"
    )
    return 130 if outcome.interrupted else 0


def _shard(text: str) -> tuple[int, int]:
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        raise UsageError(f"--shard must be I/N with 0 <= I < N, got {text!r}") from None
    if not 0 <= index < count:
        raise UsageError(f"--shard must be I/N with 0 <= I < N, got {text!r}")
    return index, count


def _shape(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise UsageError(f"--block-shape must be comma-separated ints such as 4,8, got {text!r}") from None
