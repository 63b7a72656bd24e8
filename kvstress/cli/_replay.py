"""``kvstress replay REPORT.json``: run the recorded failure again.

Exit 1 and ``reproduced: <invariant>`` when it recurs; exit 0 when it does not (and why); exit 2
for a file that is not a readable kvstress report. The verdict comes first and, after the
report's summary, again last (``verdict: ...``).
"""

from __future__ import annotations

import argparse

from kvstress.cli._parser import Parser, UsageError
from kvstress.fuzz import TargetError, replay_report
from kvstress.reports import ReportError, load_report, pool_size


def add_parser(subparsers: argparse._SubParsersAction[Parser]) -> None:
    """Register ``replay``."""
    parser = subparsers.add_parser(
        "replay",
        help="replay a failure report on its pool",
        description="Exit 1 when the recorded violation recurs, 0 when it does not, 2 for a bad file.",
        allow_abbrev=False,
    )
    parser.add_argument("report", metavar="REPORT.json")
    parser.add_argument(
        "--tries", type=int, default=10, help="re-runs of a failure that cannot replay exactly (%(default)s)"
    )
    parser.add_argument(
        "--quiet",
        action="store_true",
        help="only the verdict line (and, where it did not recur, why), without the summary and interleaving",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Replay and say whether it recurred."""
    if args.tries < 1:
        raise UsageError(f"--tries must be >= 1, got {args.tries}")
    try:
        report = load_report(args.report)
        outcome = replay_report(report, tries=args.tries)
    except (ReportError, TargetError) as error:
        said = str(error)
        # Name the file where the error does not (a corrupt schedule said only "schedule is
        # corrupt", a blind tester's).
        raise UsageError(said if str(args.report) in said else f"{args.report}: {said}") from None
    rate = f" ({outcome.hits}/{outcome.tries} tries)" if outcome.tries > 1 else ""
    verdict = f"{'reproduced' if outcome.reproduced else 'not reproduced'}: {outcome.invariant}{rate}"
    print(verdict)
    if outcome.note and (not args.quiet or not outcome.reproduced):
        print(outcome.note)  # why it did not recur: what the replay searched
    if args.quiet:
        return 1 if outcome.reproduced else 0
    _summary(report)
    print(f"verdict: {verdict}")  # again last: output read through ``tail`` keeps it
    return 1 if outcome.reproduced else 0


def _summary(report: dict[str, object]) -> None:
    """What the report recorded: the violation, where it was found, and its interleaving."""
    print("the report recorded:")
    print(f"violation: [{report['invariant']}] {' '.join(str(report['message']).splitlines())}")
    size = pool_size(report)
    pool = f"{report['pool']} ({size})" if size else report["pool"]
    print(f"pool: {pool}  strategy: {report['strategy']}  seed: {report['seed']}")
    table = report.get("table")
    if isinstance(table, str) and table:
        print("interleaving:")
        print(table)
    if not report.get("switches") and report.get("switches_note"):
        print(f"switch points: {report['switches_note']}")
    program = report.get("program")
    if isinstance(program, str) and program:
        print("program:")
        print(program)
    stderr = report.get("stderr")
    if isinstance(stderr, list) and stderr:
        print("the process's last words:")
        print("\n".join(str(line) for line in stderr[:12]))
