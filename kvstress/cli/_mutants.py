"""``kvstress mutants``: run the planted-bug corpus and print what was found, how fast, by what.

Exit 0 when every mutant is found with one of its declared ids and every correct pool stays
clean; 1 otherwise. ``--compare`` times each strategy on its own (the contract, delay-bounded
motifs, the state machine, random, PCT, free-running stress) and the naive baseline, beside the
default mix.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from kvstress._violation import INVARIANTS
from kvstress.cli._logging import configure
from kvstress.cli._parser import Parser, UsageError
from kvstress.fuzz._score import Detection, detect, detect_naive, expected_of, median_time, run_all, score
from kvstress.fuzz._slices import STRATEGIES

COMPARED = ("contract", "delay", "machine", "random", "pct", "stress", "naive")
"""Each strategy alone, and the naive baseline: the stress test a developer writes in an
afternoon (``kvstress.fuzz._naive``)."""


def add_parser(subparsers: argparse._SubParsersAction[Parser]) -> None:
    """Register ``mutants``."""
    parser = subparsers.add_parser(
        "mutants",
        help="measure kvstress on its planted-bug corpus: mutation score and time to detect",
        allow_abbrev=False,
    )
    parser.add_argument("--budget", type=float, default=10.0, metavar="S", help="per mutant (%(default)s)")
    parser.add_argument(
        "--clean-budget", type=float, default=5.0, metavar="S", help="per correct pool (%(default)s)"
    )
    parser.add_argument("--seed", type=int, default=0, help="(%(default)s)")
    parser.add_argument("--only", default="", metavar="NAME,...", help="run only these mutants")
    parser.add_argument("--compare", action="store_true", help="also time each strategy on its own")
    parser.add_argument(
        "--report-dir", default="reports", metavar="DIR", help="for events.jsonl (%(default)s)"
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Score the corpus; print the table, the score and the correct pools' verdicts."""
    from kvstress.mutants import CORRECT_POOLS, MUTANTS, backends_of

    if not args.budget > 0 or not args.clean_budget > 0:
        raise UsageError("--budget and --clean-budget must be > 0 seconds")
    chosen = _choose(MUTANTS, args.only)
    configure(args.report_dir, console=False)  # the table is the output; events go to the file
    # Row by row as each mutant finishes (widths fixed up front), so Ctrl-C loses nothing shown.
    header = ["mutant", "declared", "found", "by", "search s"]
    widths = [
        max(len(header[0]), *(len(m.__qualname__) for m in chosen)),
        max(len(header[1]), *(len(",".join(expected_of(m))) for m in chosen)),
        max(len(header[2]), *(len(i) for i in INVARIANTS)),
        max(len(header[3]), *(len(s) for s in STRATEGIES)),
    ]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(cell.ljust(width) for cell, width in zip(cells, [*widths, 0], strict=True)).rstrip()

    print(line(header), flush=True)
    found = run_all(
        chosen,
        lambda pool: detect(pool, budget_s=args.budget, seed=args.seed),
        on_done=lambda d: print(
            line([d.name, ",".join(d.expected), d.invariant or "-", d.strategy or "-", _time(d)]), flush=True
        ),
    )
    median = median_time(found)
    slowest = max((d.elapsed_s for d in found if d.detected and d.elapsed_s is not None), default=None)
    print(
        f"\nmutation score: {sum(d.detected for d in found)}/{len(found)} ({score(found):.0%}); "
        f"median time to detect {_seconds(median)}, slowest {_seconds(slowest)} (budget {args.budget:g} s)"
    )
    if args.compare:
        _compare(chosen, args)
    alarms = 0
    for pool in CORRECT_POOLS:  # each on every backend it runs on, as it finishes
        for backend in backends_of(pool) or (None,):
            d = detect(pool, budget_s=args.clean_budget, seed=args.seed, backend=backend)
            alarms += d.invariant is not None
            verdict = f"FALSE ALARM {d.invariant}" if d.invariant else "clean"
            on = f" on {backend}" if backend else ""
            print(f"correct pool {d.name}{on}: {verdict} ({args.clean_budget:g} s)", flush=True)
    return 0 if score(found) == 1.0 and not alarms else 1


def _compare(mutants: Sequence[type], args: argparse.Namespace) -> None:
    # Row by row as each mutant finishes, so a run cut short still shows what it measured.
    print(f"\nseconds of search to detect, each strategy alone (- : not found in {args.budget:g} s)")
    width = max(len(m.__qualname__) for m in mutants) + 2
    print(("mutant".ljust(width) + "".join(s.ljust(10) for s in COMPARED)).rstrip(), flush=True)
    columns: dict[str, list[Detection]] = {s: [] for s in COMPARED}
    for pool in mutants:
        for strategy in COMPARED:
            if strategy == "naive":
                found = detect_naive(pool, budget_s=args.budget, seed=args.seed)
            else:
                found = detect(pool, budget_s=args.budget, seed=args.seed, mix=(strategy,))
            columns[strategy].append(found)
        cells = "".join(_time(columns[s][-1]).ljust(10) for s in COMPARED)
        print((pool.__qualname__.ljust(width) + cells).rstrip(), flush=True)
    print(("score".ljust(width) + "".join(f"{score(columns[s]):.0%}".ljust(10) for s in COMPARED)).rstrip())
    print(
        (
            "median".ljust(width) + "".join(_seconds(median_time(columns[s])).ljust(10) for s in COMPARED)
        ).rstrip()
    )


def _choose(mutants: Sequence[type], only: str) -> list[type]:
    if not only:
        return list(mutants)
    wanted = {name.strip() for name in only.split(",") if name.strip()}
    known = {m.__qualname__ for m in mutants}
    unknown = sorted(wanted - known)
    if unknown:
        raise UsageError(f"--only names unknown mutants: {', '.join(unknown)}")
    return [m for m in mutants if m.__qualname__ in wanted]


def _time(detection: Detection) -> str:
    if detection.invariant is None:
        return "-"
    mark = "" if detection.detected else " (wrong id)"
    return f"{detection.elapsed_s:.3f}{mark}"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f} s"
