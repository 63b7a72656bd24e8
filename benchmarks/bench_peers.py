"""kvstress beside a peer and a naive stress test, on the corpus's threaded mutants, in one run.

Run from the repository root: ``python benchmarks/bench_peers.py [--budget S] [--seeds N]``.
frontrun (deterministic thread interleaving for Python, DPOR and random bytecode schedules, on
the package index) is an optional benchmark dependency, never a runtime one: ``pip install
frontrun``; without it its columns read ``n/a``. Its explorations need its launcher (``frontrun
python ...``, which preloads its I/O detection), so each runs in a child process started that
way, with a virtual clock (``clock="virtual"``: with the real one its DPOR gives up on a waiting
acquire); kvstress and the naive test run in this process, untouched by it.

Each tool gets ``--budget`` seconds per mutant (default 10) and is timed to its first failure:

- **kvstress**: ``kvstress fuzz``'s default mix, median over seeds 0..N-1 (search seconds, as a
  report's ``elapsed_s``), and on how many seeds it found the bug;
- **frontrun dpor / random**: ``frontrun.explore`` as its docs recommend, on the short tests a
  user writes for a pool (``MOTIFS``: two sharers release together, two acquirers race for one
  block, a release races a waiting acquire, a retain races a release, plus a sequential misuse
  test), one after another, each with what is left of the budget. A finding counts only where
  the same strategy stays silent on the mutant's correct design (the corpus pool it derives
  from) for at least three times as long, at least a second: otherwise the cell reads
  ``false alarm`` (frontrun's stand-in for ``queue.Queue``, for one, has no ``mutex``, so a
  pool whose ``free_ids`` reads it raises under frontrun whatever its bug);
- **naive**: ``kvstress.fuzz._naive``, the same kind of short tests on real threads with random
  sleeps of up to 100 us at their start, repeated until one fails or hangs, as a user writes in
  an afternoon (``kvstress mutants --compare`` has it as its ``naive`` column).

Timing bugs (a busy wait, a late timeout) have no invariant a short test can state, so the
peers' columns read ``-`` for them. Each mutant's row runs in a process of its own: a hung
naive test leaves threads behind (some poll forever) that would slow every later row. Numbers
vary with the machine, so they are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

# Measure this checkout, not whatever copy of kvstress happens to be installed.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kvstress import mutants
from kvstress.fuzz._naive import naive_time
from kvstress.fuzz._score import detect, spec_of
from kvstress.fuzz._target import load_target
from kvstress.pool._state import BlockState

Motif = tuple[Callable[[], Any], list[Callable[[Any], Any]], Callable[[Any], bool]]
SHAPE = (2, 4)


def _at_rest(pool: Any, free: int) -> bool:
    ids = list(pool.free_ids())
    return pool.free_count() == len(ids) == free and len(set(ids)) == len(ids)


def _release_pair(cls: type) -> Motif:
    def setup() -> Any:
        pool = cls(2, SHAPE)
        block = pool.acquire(0)
        pool.mark_in_use(block)
        pool.retain(block)
        return SimpleNamespace(pool=pool, block=block, answers=[])

    def release(s: Any) -> None:
        s.answers.append(s.pool.release(s.block))

    def holds(s: Any) -> bool:
        return sorted(s.answers) == [False, True] and _at_rest(s.pool, 2)

    return setup, [release, release], holds


def _acquire_pair(cls: type) -> Motif:
    def setup() -> Any:
        pool = cls(2, SHAPE)
        pool.mark_in_use(pool.acquire(0))
        return SimpleNamespace(pool=pool, got=[])

    def acquire(s: Any) -> None:
        s.got.append(s.pool.acquire(0))

    def holds(s: Any) -> bool:
        taken = [b for b in s.got if b is not None]
        return len(taken) == 1 and _at_rest(s.pool, 0)

    return setup, [acquire, acquire], holds


def _release_wakes(cls: type) -> Motif:
    def setup() -> Any:
        pool = cls(2, SHAPE)
        first, second = pool.acquire(0), pool.acquire(0)
        first.data.fill_(7.0)
        return SimpleNamespace(pool=pool, block=first, other=second, got=None, clean=None)

    def release(s: Any) -> None:
        s.pool.release(s.block)

    def acquire(s: Any) -> None:
        s.got = s.pool.acquire(None)
        s.clean = s.got is not None and bool((s.got.data == 0).all())

    def holds(s: Any) -> bool:
        return s.got is not None and bool(s.clean) and _at_rest(s.pool, 0)

    return setup, [release, acquire], holds


def _retain_race(cls: type) -> Motif:
    def setup() -> Any:
        pool = cls(2, SHAPE)
        block = pool.acquire(0)
        pool.mark_in_use(block)
        pool.retain(block)
        return SimpleNamespace(pool=pool, block=block)

    def release(s: Any) -> None:
        s.pool.release(s.block)

    def retain(s: Any) -> None:
        s.pool.retain(s.block)

    def holds(s: Any) -> bool:
        return s.block.refcount == 2 and s.block.state is BlockState.IN_USE and _at_rest(s.pool, 1)

    return setup, [release, retain], holds


def _misuse(cls: type) -> Motif:
    def setup() -> Any:
        pool = cls(2, SHAPE)
        return SimpleNamespace(pool=pool, ok=None)

    def misuse(s: Any) -> None:
        block = s.pool.acquire(0)
        s.pool.mark_in_use(block)
        first, second = s.pool.release(block), s.pool.release(block)
        try:
            s.pool.retain(block)
            refused = False
        except ValueError:
            refused = True
        s.ok = first is True and second is False and refused

    def holds(s: Any) -> bool:
        return bool(s.ok) and _at_rest(s.pool, 2)

    return setup, [misuse], holds


MOTIFS = (_release_pair, _acquire_pair, _release_wakes, _retain_race, _misuse)


def frontrun_time(cls: type, strategy: str, budget: float) -> float | None:
    """Seconds until frontrun's ``strategy`` fails one of the motifs, or None (in a process
    started by frontrun's launcher)."""
    import frontrun

    start = time.monotonic()
    for motif in MOTIFS:
        left = budget - (time.monotonic() - start)
        if left <= 0:
            return None
        setup, workers, holds = motif(cls)
        options: dict[str, Any] = {"seed": 0} if strategy == "random" else {}
        try:
            result = frontrun.explore(
                setup,
                workers,
                holds,
                strategy=strategy,
                total_timeout=left,
                detect_io=False,
                clock="virtual",
                **options,
            )
        except Exception as error:  # the pool raised inside a worker: the test fails, a finding
            if not _raised_by_the_pool(error):
                raise
            return time.monotonic() - start
        if result.property_holds is False:
            return time.monotonic() - start
    return None


def checked_frontrun_time(cls: type, strategy: str, budget: float) -> float | str | None:
    """``frontrun_time``, where a finding is checked against the mutant's correct design: the
    same strategy on it for three times as long (at least a second) must find nothing, or the
    finding is frontrun's false alarm (``"false alarm"``)."""
    found = frontrun_time(cls, strategy, budget)
    design = correct_design(cls)
    if found is None or design is None:
        return found
    return "false alarm" if frontrun_time(design, strategy, max(1.0, 3 * found)) is not None else found


def correct_design(cls: type) -> type | None:
    """The corpus's correct pool that mutant ``cls`` derives from (None where there is none)."""
    return next((base for base in cls.__mro__[1:] if base in mutants.CORRECT_POOLS), None)


def _raised_by_the_pool(error: BaseException) -> bool:
    tb = error.__traceback__
    while tb is not None:
        if "/kvstress/mutants/" in tb.tb_frame.f_code.co_filename:
            return True
        tb = tb.tb_next
    return False


def frontrun_child(name: str, budget: float) -> tuple[str, str]:
    """frontrun's two columns for mutant ``name``, from a child under its launcher."""
    launcher = shutil.which("frontrun") or str(Path(sys.executable).with_name("frontrun"))
    if not Path(launcher).exists():
        return "n/a", "n/a"
    command = [launcher, sys.executable, __file__, "--frontrun-child", name, "--budget", str(budget)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=4 * budget + 60)
        dpor, rand = json.loads(done.stdout.strip().splitlines()[-1])
    except (subprocess.TimeoutExpired, ValueError, IndexError):
        return "error", "error"
    return _cell(dpor), _cell(rand)


def _cell(value: float | str | None) -> str:
    if isinstance(value, str):
        return value
    return "-" if value is None else f"{value:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=10.0)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--only", default="")
    parser.add_argument("--frontrun-child", default="", help=argparse.SUPPRESS)
    parser.add_argument("--row", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.frontrun_child:
        cls = getattr(mutants, args.frontrun_child)
        print(json.dumps([checked_frontrun_time(cls, s, args.budget) for s in ("dpor", "random")]))
        return
    if args.row:
        row(getattr(mutants, args.row), args.budget, args.seeds)
        return
    chosen = [
        m
        for m in mutants.MUTANTS
        if not mutants.backends_of(m) and (not args.only or m.__qualname__ in args.only.split(","))
    ]
    print(f"{'mutant':34s} {'kvstress':>16s} {'frontrun dpor':>14s} {'frontrun random':>16s} {'naive':>8s}")
    for cls in chosen:
        # A process per mutant: a hung test's abandoned threads (some poll forever) would slow
        # every later row.
        command = [sys.executable, __file__, "--row", cls.__qualname__, "--budget", str(args.budget)]
        subprocess.run([*command, "--seeds", str(args.seeds)], check=False, timeout=30 * args.budget + 600)


def row(cls: type, budget: float, seeds: int) -> None:
    """One mutant's row: kvstress over ``seeds`` seeds, frontrun's two strategies, naive."""
    times = []
    for seed in range(seeds):
        found = detect(cls, budget_s=budget, seed=seed)
        times.append(found.elapsed_s if found.detected else None)
    hits = [t for t in times if t is not None]
    ours = f"{statistics.median(hits):.3f} {len(hits)}/{seeds}" if hits else f"- 0/{seeds}"
    dpor, rand = frontrun_child(cls.__qualname__, budget)
    naive = _cell(naive_time(load_target(spec_of(cls)), budget))
    print(f"{cls.__qualname__:34s} {ours:>16s} {dpor:>14s} {rand:>16s} {naive:>8s}", flush=True)


if __name__ == "__main__":
    main()
