"""The fuzzing loop: spend a budget in seeded slices across strategies; stop at the first violation.

The mix runs as written, once, and then its search strategies take slices in turn: its fixed
programs (``ONCE``: the sequential contract, the long history) run once, in their place, the
history then coming back once a pass while its ladder of pool sizes lasts. Search slices written
ahead of a fixed program are short (``LEAD_SLICE_S``: the shallow races fall to them within
it, and a pool that hangs in the contract costs its whole hang bound).
Slice ``i`` of stream ``s`` has a seed derived from (seed, s, i), so a run is a function of
its seed, and streams (``--workers``, ``--shard``)
never repeat each other's seeds. The default mix puts the controlled strategies first: on the
planted-bug corpus they find what they can in milliseconds, the state machine covers misuse,
double release and the sequential contract, and free-running stress covers what the models
cannot see.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kvstress import _flight
from kvstress._interrupts import watching
from kvstress._log import get_logger
from kvstress.fuzz._slices import OPENING_GRACE_S, STRATEGIES, Finding, run_slice
from kvstress.fuzz._target import FuzzTarget
from kvstress.reports import versions, write_report
from kvstress.scenarios._switches import switch_fields

DEFAULT_MIX = ("pct", "random", "contract", "delay", "random", "machine", "pct", "stress", "history")
ONCE = frozenset({"contract", "history"})
"""Strategies that are one fixed program: they run once, first, and then leave the cycle."""
SLICE_S = 1.0
LEAD_SLICE_S = 0.1
"""The length of each search slice written ahead of a fixed program: a short look for shallow
bugs, so that the fixed programs run early."""
DELAY_SLICE_S = 0.25
"""The delay strategy's slices after its first, which runs the motifs' hot plans (up to
``SLICE_S``): the later rounds try cold delays, which PCT and random reach as well."""

log = get_logger("kvstress.fuzz")


@dataclass(frozen=True)
class Progress:
    """Where a fuzzing run stands, for a progress display."""

    elapsed_s: float
    budget_s: float
    executions: int
    operations: int
    strategy: str


@dataclass(frozen=True)
class FuzzOutcome:
    """What a run did: counts, and the finding and its report path if it found one."""

    executions: int
    operations: int
    elapsed_s: float
    finding: Finding | None = None
    report: Path | None = None
    interrupted: bool = False


def slice_seed(seed: int, stream: int, index: int) -> int:
    """The seed of slice ``index`` of ``stream``: distinct per (seed, stream, index)."""
    digest = hashlib.blake2b(f"{seed}:{stream}:{index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1  # below 2**63: fits every scheduler and Hypothesis


def parse_mix(strategy: str) -> tuple[str, ...]:
    """``auto`` or a comma-separated list of strategies; ValueError names a bad one."""
    if strategy == "auto":
        return DEFAULT_MIX
    names = tuple(part.strip() for part in strategy.split(",") if part.strip())
    for name in names:
        if name not in STRATEGIES:
            raise ValueError(f"--strategy must be auto or a list of {', '.join(STRATEGIES)}, got {name!r}")
    if not names:
        raise ValueError("--strategy names no strategy")
    return names


def fuzz(
    target: FuzzTarget,
    *,
    budget_s: float = 60.0,
    seed: int = 0,
    mix: Sequence[str] = DEFAULT_MIX,
    report_dir: str | Path = "reports",
    stream: int = 0,
    stop: threading.Event | Any = None,
    on_progress: Callable[[Progress], None] | None = None,
    raise_interrupt: bool = False,
    supervised: bool = False,
) -> FuzzOutcome:
    """Fuzz ``target`` for ``budget_s`` wall seconds or until a violation, which is written as a
    report in ``report_dir``. ``stop`` (an Event) ends the run early; so does Ctrl-C, and
    either way what was found is already written.

    On Ctrl-C the run stops cleanly (its threads unwound) and returns an ``interrupted``
    outcome, as a command that reports and exits wants; with ``raise_interrupt`` it raises
    KeyboardInterrupt instead, as a caller that must stop too wants (a test, a score).

    ``supervised``: this is a supervisor's child, and ``stop`` the supervisor's: a SIGINT counts
    as Ctrl-C only once the supervisor has it too (``stop`` set); one it never gets came from
    the pool (``signal_from_the_pool``).
    """
    if not budget_s > 0:
        raise ValueError(f"budget must be a number of seconds > 0, got {budget_s!r}")
    start = time.monotonic()
    log.info("fuzz.start", pool=target.spec, mode=target.mode, budget_s=budget_s, seed=seed, stream=stream)
    with ctrl_c_flag(stop if supervised else None) as ctrl_c:
        outcome = _loop(target, budget_s, seed, mix, report_dir, stream, stop, on_progress, ctrl_c, start)
    if outcome.interrupted and raise_interrupt:
        raise KeyboardInterrupt
    return outcome


def _loop(
    target: FuzzTarget,
    budget_s: float,
    seed: int,
    mix: Sequence[str],
    report_dir: str | Path,
    stream: int,
    stop: threading.Event | Any,
    on_progress: Callable[[Progress], None] | None,
    ctrl_c: threading.Event,
    start: float,
) -> FuzzOutcome:
    executions = operations = index = 0
    memos: dict[int, dict[str, Any]] = {}  # strategies' progress across this run's slices, per size
    spent: set[str] = set()  # strategies with nothing left to run (the delay search, exhausted)
    try:
        while (
            (elapsed := time.monotonic() - start) < budget_s
            and not (stop is not None and stop.is_set())
            and not ctrl_c.is_set()
        ):
            strategy = _strategy_at(mix, index)
            if strategy is None:
                break
            if strategy in spent:
                if set(_cycle(mix)) <= spent:
                    break  # every search strategy has run out: nothing is left to try
                index += 1
                continue
            if on_progress is not None:
                on_progress(Progress(elapsed, budget_s, executions, operations, strategy))
            seed_i = slice_seed(seed, stream, index)
            _flight.slice_started(index, strategy, seed_i)
            # The run ends at its first finding, so shrinking it may take what is left of the budget.
            slice_s = min(_slice_s(mix, index), budget_s - elapsed)
            blocks = blocks_at(mix, index, target)
            sized = target if blocks == target.num_blocks else replace(target, num_blocks=blocks)
            result = run_slice(
                strategy,
                sized,
                seed_i,
                slice_s,
                shrink_s=budget_s - elapsed,
                memo=memos.setdefault(blocks, {}),
                grace_s=min(OPENING_GRACE_S, budget_s - elapsed - slice_s),
            )
            executions, operations, index = (
                executions + result.executions,
                operations + result.operations,
                index + 1,
            )
            if result.exhausted:
                spent.add(strategy)
            if ctrl_c.is_set():
                # Ctrl-C landed inside this slice. An operation it cut short (a wait that gave
                # up, a ledger half settled) is not the pool's fault, so nothing it found counts.
                break
            if result.finding is not None:
                found_at = elapsed + result.finding.elapsed_s
                if result.finding.num_blocks is not None:  # the history's ladder: its own size
                    sized = replace(target, num_blocks=result.finding.num_blocks)
                path = write_report(
                    build_report(
                        sized,
                        result.finding,
                        found_at,
                        executions,
                        operations,
                        seed,
                        run={
                            "run_blocks": target.num_blocks,
                            "stream": stream,
                            "fuzz_seed": seed,
                            "mix": list(mix),
                            "budget_s": budget_s,
                            "memory_limit": _memory_limit(),
                        },
                    ),
                    report_dir,
                )
                log.warning("fuzz.violation", invariant=result.finding.violation.invariant, report=str(path))
                return FuzzOutcome(executions, operations, time.monotonic() - start, result.finding, path)
    except KeyboardInterrupt:
        ctrl_c.set()
    if ctrl_c.is_set():
        # Either the KeyboardInterrupt came through, or it was raised where Python drops it (a gc
        # callback, a __del__) and the flag ended the loop at the next slice.
        log.info("fuzz.interrupted", executions=executions)
        return FuzzOutcome(executions, operations, time.monotonic() - start, interrupted=True)
    log.info("fuzz.done", executions=executions, operations=operations)
    return FuzzOutcome(executions, operations, time.monotonic() - start)


def _memory_limit() -> int | None:
    """The bound this process runs under (``RLIMIT_DATA``, as ``--memory-limit`` sets it in a
    fuzzing child), for a report's replay to run under the same; None for none."""
    try:
        import resource
    except ImportError:  # no resource module (Windows): no bound was set either
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_DATA)
    return None if soft == resource.RLIM_INFINITY else int(soft)


def _cycle(mix: Sequence[str]) -> list[str]:
    """The strategies that take slices in turn after the mix's first pass: its search strategies,
    and the history while its ladder lasts (each of its later slices runs the next sizes; it
    says when they are spent), since a fixed program runs once."""
    return [s for s in mix if s not in ONCE] + (["history"] if "history" in mix else [])


def _strategy_at(mix: Sequence[str], index: int) -> str | None:
    """Slice ``index``'s strategy: the mix as written, once, then ``_cycle`` in turn (None: the
    mix was fixed programs only, and they have run)."""
    if index < len(mix):
        return mix[index]
    cycle = _cycle(mix)
    return cycle[(index - len(mix)) % len(cycle)] if cycle else None


WIDER_STRATEGIES = frozenset({"pct", "random", "machine", "stress"})
"""Strategies whose slices may run on a larger pool (the delay strategy's motif search goes on
from slice to slice at one size, and the contract runs once)."""
WIDER_EVERY = 3
"""After the mix's first pass, one slice in this many runs on a larger pool (``blocks_at``)."""


def blocks_at(mix: Sequence[str], index: int, target: FuzzTarget) -> int:
    """The pool size of slice ``index``: the run's own (``--blocks``), but after the mix's first
    pass one slice in ``WIDER_EVERY`` of a strategy in ``WIDER_STRATEGIES`` runs on one of the
    target's larger sizes, in turn. A bug that needs a third or fifth block (a bitmap's next
    word, a batch of resets) cannot show on two, and the first pass, where most bugs fall, is
    left as it was. The turn moves by one each pass, so each strategy of the cycle gets it, and
    the larger sizes alternate along the cycle and from one pass to the next."""
    strategy = _strategy_at(mix, index)
    if not target.wider or index < len(mix) or strategy not in WIDER_STRATEGIES:
        return target.num_blocks
    # Counted over the search strategies' slices alone (the history's, last in each pass, never
    # takes the turn): the n-th of them after the first pass.
    turns = _cycle(mix)
    cycle = len([s for s in turns if s != "history"])
    passes, at = divmod(index - len(mix), len(turns))
    n = passes * cycle + at
    if (n + n // cycle) % WIDER_EVERY != 1:
        return target.num_blocks
    return target.wider[(n // cycle + n % cycle) % len(target.wider)]


def _slice_s(mix: Sequence[str], index: int) -> float:
    """Slice ``index``'s length: short for a search slice written ahead of a fixed program (the
    lead), and for the delay strategy's slices after its first (unless it runs alone)."""
    fixed = [i for i, s in enumerate(mix) if s in ONCE]
    if fixed and index < fixed[0]:
        return LEAD_SLICE_S
    if _strategy_at(mix, index) == "delay" and set(mix) != {"delay"}:
        earlier = [_strategy_at(mix, i) for i in range(index)]
        return DELAY_SLICE_S if "delay" in earlier else SLICE_S
    return SLICE_S


@contextlib.contextmanager
def ctrl_c_flag(supervisor: Any = None) -> Iterator[threading.Event]:
    """An Event set by Ctrl-C for the duration, besides the usual KeyboardInterrupt.

    Python raises KeyboardInterrupt in whatever the main thread runs next, and when that is a gc
    callback (Hypothesis installs one) or a ``__del__``, the exception is printed as "ignored"
    and lost. The flag outlives it. Installed only in the main thread, and only over Python's
    default handler, so an application's own SIGINT handling is left alone.
    """
    flag = threading.Event()
    if threading.current_thread() is not threading.main_thread() or (
        signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield flag
        return

    def on_sigint(signum: int, frame: object) -> None:
        if supervisor is not None and not supervisor.is_set():
            signal_from_the_pool(supervisor, "SIGINT")  # or the supervisor's, a moment behind
            return
        flag.set()
        raise KeyboardInterrupt

    def on_unraisable(unraisable: Any) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt) and flag.is_set():
            return  # the one the flag carries on: no "Exception ignored" traceback for it
        previous(unraisable)

    previous = sys.unraisablehook
    signal.signal(signal.SIGINT, on_sigint)
    sys.unraisablehook = on_unraisable
    try:
        with watching(flag):  # a KeyboardInterrupt without the flag is then the pool's own
            yield flag
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        sys.unraisablehook = previous


SIGNAL_GRACE_S = 2.0
"""Seconds a supervised child waits for its supervisor to stop the run after a SIGINT or SIGTERM
reached it before it takes the signal for the pool's own."""


SIGNAL_POLL_S = 0.05
"""How often a signal's judge looks whether the supervisor stopped the run."""


_JUDGE_OUT = threading.Event()
"""Set once a signal's judge is out in this process: one decides for every signal after it
(signal handlers run in the main thread alone, so the check and the set cannot race)."""


def signal_from_the_pool(supervisor: Any, name: str) -> None:
    """A SIGINT or SIGTERM reached a supervised child before its supervisor stopped the run
    (``supervisor``, its stop Event). A Ctrl-C at a terminal or a CI job's kill reaches the whole
    process group, and the supervisor stops the run within moments: then nothing more is done
    here. One the supervisor never gets is the pool's (``os.kill(os.getpid(), ...)``): the
    child ends as a process killed by it ends, a ``crash`` report the supervisor writes. (It was
    a clean run: exit 130, "interrupted", or 0, "no violation found", a blind tester's.)"""

    def judge() -> None:
        # Polled, not waited on: a process that ends inside ``Event.wait`` leaves the Event's
        # condition counting a sleeper that never wakes, and the supervisor's ``set`` then waits
        # for it for ever (a pool that signalled itself at every release started a judge per
        # signal; the first one's exit left the others waiting: the run hung, no report).
        deadline = time.monotonic() + SIGNAL_GRACE_S
        while time.monotonic() < deadline:
            if supervisor.is_set():
                return
            time.sleep(SIGNAL_POLL_S)
        print(
            f"kvstress: {name} reached the fuzzing process, not from kvstress nor from outside it "
            "(the supervisor did not get it): the pool signalled its own process",
            file=sys.stderr,
            flush=True,
        )
        os._exit(128 + int(getattr(signal, name)))

    if _JUDGE_OUT.is_set():
        return  # the judge of an earlier signal decides for this one too
    _JUDGE_OUT.set()
    threading.Thread(target=judge, name="kvstress-signal-judge", daemon=True).start()


def build_report(
    target: FuzzTarget,
    finding: Finding,
    elapsed_s: float,
    executions: int,
    operations: int,
    seed: int,
    run: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The report's fields (``replay`` is filled in when it is written). ``run`` (stream, fuzz
    seed, mix, budget) lets ``replay`` run the whole stream again, for a finding that depends on
    what the process did before (a pool that crashes on its 200th release)."""
    violation = finding.violation
    return {
        "schema": "kvstress.failure/1",
        "invariant": violation.invariant,
        "message": violation.message,
        "pool": target.spec,
        "mode": target.mode,
        "backend": target.backend if target.is_async else None,
        "strategy": finding.strategy,
        "seed": finding.seed,
        "schedule": finding.schedule,
        "elapsed_s": round(elapsed_s, 6),
        "history": [op.to_dict() for op in finding.history],
        "blocks": [block.to_dict() for block in finding.blocks],
        "blocks_at": finding.blocks_at,
        "metrics": {"executions": executions, "operations": operations, "fuzz_seed": seed},
        "versions": versions(),
        "replay": "",
        "program": finding.program,
        "table": finding.table,
        **switch_fields(finding.kind, target.backend if target.is_async else None, finding.switches),
        "scenario": finding.scenario,
        "failed_op": finding.failed_op,
        "reproduction": finding.reproduction,
        "config": {
            "kind": finding.kind,
            "num_blocks": target.num_blocks,
            "block_shape": list(target.block_shape),
            **(run or {}),
            **finding.options,
        },
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
