"""The harness measured on planted bugs: is each mutant found, with a right id, and how fast?

A mutant counts as detected when a fuzzing run within the budget reports one of the ids the
mutant declares (``expected``); the time is the report's ``elapsed_s``, seconds of search. A
correct pool must stay clean. ``compare`` runs each single strategy on its own, so the default
mix is chosen by measurement.
"""

from __future__ import annotations

import statistics
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kvstress.fuzz._naive import naive_time
from kvstress.fuzz._run import DEFAULT_MIX, fuzz
from kvstress.fuzz._target import load_target
from kvstress.reports import load_report


@dataclass(frozen=True)
class Detection:
    """One pool's result: the id found (None: nothing) and when, by which strategy."""

    name: str
    expected: tuple[str, ...]
    invariant: str | None
    strategy: str | None
    elapsed_s: float | None

    @property
    def detected(self) -> bool:
        """Found with one of its declared ids."""
        return self.invariant is not None and self.invariant in self.expected


def spec_of(pool: type) -> str:
    """``MODULE:QUALNAME`` of an importable pool class."""
    return f"{pool.__module__}:{pool.__qualname__}"


def expected_of(pool: type) -> tuple[str, ...]:
    """A mutant's declared ids (a string or a tuple); () for a correct pool."""
    expected = getattr(pool, "expected", ())
    return (expected,) if isinstance(expected, str) else tuple(expected)


def detect(
    pool: type,
    *,
    budget_s: float,
    seed: int = 0,
    mix: Sequence[str] = DEFAULT_MIX,
    backend: str | None = None,
) -> Detection:
    """Fuzz ``pool`` for up to ``budget_s`` seconds; what was found, if anything, and when.

    ``backend`` defaults to the first the pool declares in ``backends`` (asyncio if none)."""
    if backend is None:
        backend = next(iter(getattr(pool, "backends", ())), "asyncio")
    target = load_target(spec_of(pool), backend=backend)
    with tempfile.TemporaryDirectory(prefix="kvstress-mutants-") as reports:
        # On Ctrl-C a score must stop, not count the pool as undetected (or clean) and go on.
        outcome = fuzz(
            target, budget_s=budget_s, seed=seed, mix=tuple(mix), report_dir=reports, raise_interrupt=True
        )
        if outcome.finding is None or outcome.report is None:
            return Detection(pool.__qualname__, expected_of(pool), None, None, None)
        elapsed = float(load_report(outcome.report)["elapsed_s"])
    finding = outcome.finding
    return Detection(
        pool.__qualname__, expected_of(pool), finding.violation.invariant, finding.strategy, elapsed
    )


def detect_naive(pool: type, *, budget_s: float, seed: int = 0, backend: str | None = None) -> Detection:
    """The naive baseline (``kvstress.fuzz._naive``) on ``pool``: it says only that a test
    failed, so a find is credited with the mutant's first declared id."""
    if backend is None:
        backend = next(iter(getattr(pool, "backends", ())), "asyncio")
    found_at = naive_time(load_target(spec_of(pool), backend=backend), budget_s, seed)
    expected = expected_of(pool)
    if found_at is None:
        return Detection(pool.__qualname__, expected, None, None, None)
    return Detection(pool.__qualname__, expected, (*expected, "crash")[0], "naive", found_at)


def score(detections: Sequence[Detection]) -> float:
    """The share of mutants detected with a declared id."""
    return sum(d.detected for d in detections) / len(detections) if detections else 0.0


def median_time(detections: Sequence[Detection]) -> float | None:
    """The median seconds to detect over the detected ones."""
    times = [d.elapsed_s for d in detections if d.detected and d.elapsed_s is not None]
    return statistics.median(times) if times else None


def run_all(
    pools: Sequence[type],
    run: Callable[[type], Detection],
    on_done: Callable[[Detection], None] | None = None,
) -> list[Detection]:
    """``run`` each pool in turn, reporting each result as it comes."""
    results = []
    for pool in pools:
        result = run(pool)
        results.append(result)
        if on_done is not None:
            on_done(result)
    return results
