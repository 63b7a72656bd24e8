"""``kvstress fuzz``: search a pool for violations within a budget; write a report for the first.

Exit 0: none found within the budget. Exit 1: a violation, its report written. Exit 2: bad
input (one line). ``--workers N`` runs N processes on distinct seed streams and stops them all
at the first failure; ``--shard I/N`` takes every N-th stream, for CI matrices.
"""

from __future__ import annotations

import argparse
import multiprocessing
import queue
import sys
import time
from pathlib import Path
from typing import Any

from kvstress.cli._logging import configure
from kvstress.cli._parser import Parser, UsageError
from kvstress.fuzz import FuzzOutcome, Progress, TargetError, fuzz, load_target, parse_mix
from kvstress.fuzz._target import cwd_entries


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
    parser.add_argument("--blocks", type=int, default=2, metavar="N", help="blocks per pool (%(default)s)")
    parser.add_argument("--block-shape", default="2,4", metavar="D,D", help="(%(default)s)")
    parser.add_argument("--backend", default="asyncio", choices=("asyncio", "trio"), help="async pools")
    parser.add_argument(
        "--strategy",
        default="auto",
        help="auto, or a list of contract,delay,pct,random,machine,stress (%(default)s)",
    )
    parser.add_argument("--workers", type=int, default=1, metavar="N", help="processes (%(default)s)")
    parser.add_argument("--shard", default="0/1", metavar="I/N", help="this machine's share (%(default)s)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Fuzz as asked; print the finding's report and replay command."""
    if not args.budget > 0:
        raise UsageError(f"--budget must be > 0 seconds, got {args.budget:g}")
    if args.workers < 1:
        raise UsageError(f"--workers must be >= 1, got {args.workers}")
    shard, shards = _shard(args.shard)
    mix = parse_mix(args.strategy)
    shape = _shape(args.block_shape)
    try:
        target = load_target(args.pool, num_blocks=args.blocks, block_shape=shape, backend=args.backend)
    except TargetError as error:
        raise UsageError(str(error)) from None
    configure(args.report_dir)
    options = {"budget_s": args.budget, "seed": args.seed, "mix": mix, "report_dir": args.report_dir}
    streams = [shard + shards * w for w in range(args.workers)]
    if args.workers == 1:
        outcome = _single(target, streams[0], options)
    else:
        outcome = _many(args.pool, args.blocks, shape, args.backend, streams, options)
    return _say(outcome, args)


def _single(target: Any, stream: int, options: dict[str, Any]) -> FuzzOutcome:
    if sys.stderr.isatty():
        from rich.progress import BarColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as Bar

        with Bar(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), transient=True) as bar:
            task = bar.add_task("fuzz", total=options["budget_s"])

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

            return fuzz(target, stream=stream, on_progress=show, **options)
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

    return fuzz(target, stream=stream, on_progress=line, **options)


def _many(
    spec: str, blocks: int, shape: tuple[int, ...], backend: str, streams: list[int], options: dict[str, Any]
) -> FuzzOutcome:
    context = multiprocessing.get_context("spawn")
    stop, results = context.Event(), context.Queue()
    processes = [
        context.Process(
            target=_worker, args=(spec, blocks, shape, backend, stream, options, stop, results), daemon=True
        )
        for stream in streams
    ]
    start = time.monotonic()
    _start_clear_of_cwd(processes)
    found: FuzzOutcome | None = None
    executions = operations = 0
    try:
        for _ in processes:
            done = _next_result(results, processes, options["budget_s"] + 60)
            if done is None:
                break
            executions, operations = executions + done[1], operations + done[2]
            if done[0] is not None and found is None:
                found = FuzzOutcome(0, 0, 0.0, report=Path(done[0]))
                stop.set()
    finally:
        stop.set()
        for process in processes:
            process.join(timeout=10)
    if found is not None:
        return FuzzOutcome(executions, operations, time.monotonic() - start, report=found.report)
    return FuzzOutcome(executions, operations, time.monotonic() - start)


def _start_clear_of_cwd(processes: list[Any]) -> None:
    """Start ``processes`` with the parent's ``sys.path`` less the current directory.

    A spawned child imports kvstress before anything else; with the current directory on its
    path, a folder there named ``kvstress`` (a clone) would be imported as a namespace package
    instead of the installed one (an editable install's finder comes after the path). Each
    child appends the directory once kvstress is in (``load_target``), for the user's pool.
    """
    removed = cwd_entries()
    saved = list(sys.path)
    sys.path[:] = [entry for entry in sys.path if entry not in removed]
    try:
        for process in processes:
            process.start()
    finally:
        sys.path[:] = saved


def _next_result(results: Any, processes: list[Any], bound: float) -> tuple[str | None, int, int] | None:
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        try:
            return results.get(timeout=0.2)  # type: ignore[no-any-return]
        except queue.Empty:
            if not any(p.is_alive() for p in processes) and results.empty():
                return None
    return None


def _worker(
    spec: str,
    blocks: int,
    shape: tuple[int, ...],
    backend: str,
    stream: int,
    options: dict[str, Any],
    stop: Any,
    results: Any,
) -> None:
    target = load_target(spec, num_blocks=blocks, block_shape=shape, backend=backend)
    outcome = fuzz(target, stream=stream, stop=stop, **options)
    results.put((str(outcome.report) if outcome.report else None, outcome.executions, outcome.operations))


def _say(outcome: FuzzOutcome, args: argparse.Namespace) -> int:
    if outcome.report is not None:
        from kvstress.reports import load_report

        report = load_report(outcome.report)
        print(f"violation: [{report['invariant']}] {' '.join(report['message'].splitlines())}")
        print(
            f"strategy: {report['strategy']}  seed: {report['seed']}  found after {report['elapsed_s']:.3f} s"
        )
        print(f"report: {outcome.report}")
        print(f"html: {outcome.report.with_suffix('.html')}")
        print(f"replay: {report['replay']}")
        return 1
    what = "interrupted" if outcome.interrupted else "no violation found"
    print(
        f"{what}: {outcome.executions} executions, {outcome.operations} operations in "
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
