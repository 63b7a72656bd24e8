"""What isolation costs: the same fuzzing run in this process and in a supervised child, side by side.

Run from the repository root: ``python benchmarks/bench_isolation.py [--budget S] [--rounds N]``.
Each pool is fuzzed with the default mix for ``--budget`` seconds, seed 0, alternately in this
process (``fuzz``) and in a child under the supervisor (``supervise``, as ``kvstress fuzz`` runs),
``--rounds`` times each. Printed: executions per second of search in each (the child's own
count over its budget), the ratio, and the wall seconds of each run, which for the child include
its start (spawn, imports). The flight record is one shared-memory write per execution.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kvstress.fuzz import DEFAULT_MIX, fuzz, load_target
from kvstress.fuzz._isolate import Job, supervise

POOLS = (
    "kvstress.mutants:CondvarPool",
    "kvstress.mutants:AsyncConditionPool",
    "kvstress.mutants:PollingCasPool",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    print(f"{'pool':36s} {'in-process/s':>13s} {'isolated/s':>11s} {'ratio':>6s} {'wall in/iso s':>14s}")
    for spec in POOLS:
        target = load_target(spec)
        here, there, walls = [], [], []
        for _ in range(args.rounds):
            with tempfile.TemporaryDirectory() as reports:
                start = time.monotonic()
                outcome = fuzz(target, budget_s=args.budget, seed=0, report_dir=reports)
                here.append(outcome.executions / outcome.elapsed_s)
                wall_in = time.monotonic() - start
                job = Job.of(target, budget_s=args.budget, seed=0, mix=DEFAULT_MIX, report_dir=reports)
                start = time.monotonic()
                result = supervise(job, [0])
                there.append(result.outcome.executions / args.budget)
                walls.append((wall_in, time.monotonic() - start))
        a, b = statistics.median(here), statistics.median(there)
        wall = f"{statistics.median(w[0] for w in walls):.1f}/{statistics.median(w[1] for w in walls):.1f}"
        print(f"{spec.split(':')[1]:36s} {a:13.0f} {b:11.0f} {b / a:6.2f} {wall:>14s}", flush=True)


if __name__ == "__main__":
    main()
