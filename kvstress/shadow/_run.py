"""``shadow``: run the tiny decoder over a pool's blocks beside a reference, seed after seed.

Each seed draws a workload (``draw_plan``) and runs it twice under kvstress' deterministic
thread scheduler: once with ``RandomScheduler(seed)``, then with ``PCTScheduler(depth=3,
seed)`` whose step estimate is the first run's decision count. The pool's modules are traced
(every line a scheduling point, cooperative ``threading``/``time``), and the sequences add a
point before each step and after each pool call, so another thread can run between a release's
offer and its reset. Everything follows from the seed: a divergence replays from it. The
free-running mode uses real threads instead (cheap, not replayable).
"""

from __future__ import annotations

import inspect
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from kvstress._checks import got, positive_int, positive_number
from kvstress.capacity import ModelCard, load_card
from kvstress.controlled import (
    StepLimitExceeded,
    StuckThread,
    ThreadDeadlock,
    TimeLimitExceeded,
    run_threads,
    spawn,
)
from kvstress.controlled._baton import active_controller
from kvstress.schedulers import PCTScheduler, RandomScheduler, SchedulerBase
from kvstress.shadow._decoder import TinyDecoder
from kvstress.shadow._plan import SequencePlan, blocks_for, draw_plan
from kvstress.shadow._result import ShadowResult
from kvstress.shadow._sequence import ACQUIRE_TIMEOUT, MAX_ATTEMPTS, Execution, audit, root

TOLERANCE = 1e-3
"""The |logit| difference a step must exceed to diverge.

Why it separates: a correct pool hands K/V back bit for bit, so the paged side differs from
the reference only in float32 rounding of reductions over padded blocks (the masked rows add
exact zeros, but change how the sums are blocked). Measured on the tiny card: max 1.4e-6 over
60,447 steps (450 seeds, 900 controlled executions on ThreadedBlockPool, CondvarPool and
PollingCasPool), ~700x below this bound. A pool fault replaces a whole K or V row, whose
entries are of order one (see ``TinyDecoder``), and that moves the next logits by far more:
zeroing any single written row of a 16-token sequence, in either layer, moves them by at
least 0.042 (tests/test_shadow_decoder.py), and the planted mutants' first divergences were
0.24 to 2.1. A drift below the bound would be reported at a later step or not at all, never
falsely; and a NaN logit always diverges.
"""

MODES = ("controlled", "free")
_HANGS = (ThreadDeadlock, StepLimitExceeded, TimeLimitExceeded, StuckThread)


def shadow(
    factory: Callable[..., Any],
    *,
    card: str | ModelCard = "tiny",
    sequences: int = 4,
    steps: int = 12,
    block_tokens: int = 4,
    num_blocks: int | None = None,
    seed: int = 0,
    forks: bool = True,
    max_seeds: int | None = None,
    budget_s: float | None = None,
    mode: str = "controlled",
    tolerance: float = TOLERANCE,
) -> ShadowResult:
    """Try seeds ``seed, seed + 1, ...`` until a divergence or a pool failure, ``max_seeds`` seeds,
    or ``budget_s`` seconds (checked between executions); with neither bound, one seed.

    ``factory`` builds a thread-flavoured pool with the protocol's constructor; it is built
    with the card's block shape ``(2, layers, block_tokens, kv_heads, head_dim)``, float32, on
    the CPU, once per execution. ``sequences`` decode up to ``block_tokens + steps`` tokens each
    (prompt of 1 to ``block_tokens``, then ``steps // 2`` to ``steps`` greedy steps); with
    ``forks``, each draws a fork tree (``draw_plan``: several forks, at different lengths or
    several at once, children forking, a parent ending while its children hold the prefix)
    whose children retain the prefix blocks, so shared blocks are retained and released by
    several threads at once. ``num_blocks`` defaults to the fewest that hold one longest
    sequence, so sequences contend and blocks are recycled between them at every turn. After
    each execution the pool must hand out all its blocks again (else ``lost-block``).

    Raises ValueError naming a bad argument, an async pool, or a factory that cannot build one.
    """
    model_card = card if isinstance(card, ModelCard) else load_card(card)
    positive_int("block_tokens", block_tokens)
    positive_int("steps", steps)
    if num_blocks is None:
        num_blocks = blocks_for(block_tokens + steps, block_tokens)
    _check(sequences, steps, block_tokens, num_blocks, seed, max_seeds, budget_s, mode, tolerance)
    shape = model_card.block_shape(block_tokens)
    _refuse_async(factory, num_blocks, shape)
    capacity = block_tokens + steps
    model = TinyDecoder(model_card, max_positions=capacity)
    setup = _Setup(factory, model, model_card, num_blocks, block_tokens, tolerance)
    limit = 1 if max_seeds is None and budget_s is None else max_seeds
    started = time.monotonic()
    executions = steps_compared = 0
    max_diff, seeds, finding = 0.0, 0, None
    while finding is None and (limit is None or seeds < limit):
        if seeds and budget_s is not None and time.monotonic() - started >= budget_s:
            break
        current = seed + seeds
        plans = draw_plan(
            current, sequences=sequences, steps=steps, block_tokens=block_tokens,
            vocab=model_card.vocab_size, forks=forks,
        )  # fmt: skip
        seeds += 1
        for ex in _executions(setup, plans, current, mode):
            executions += 1
            steps_compared += ex.steps_compared
            max_diff = max(max_diff, ex.max_abs_diff)
            if ex.stopped:
                finding = ex
                break
    return ShadowResult(
        pool=getattr(factory, "__qualname__", repr(factory)),
        model=model_card.name,
        mode=mode,
        first_seed=seed,
        seeds=seeds,
        executions=executions,
        steps_compared=steps_compared,
        max_abs_diff=max_diff,
        tolerance=tolerance,
        elapsed_s=time.monotonic() - started,
        divergence=finding.divergence if finding else None,
        failure=finding.failure if finding else None,
    )


@dataclass(frozen=True)
class _Setup:
    """What every execution of one ``shadow`` call shares."""

    factory: Callable[..., Any]
    model: TinyDecoder
    card: ModelCard
    num_blocks: int
    block_tokens: int
    tolerance: float

    def execution(self, seed: int, **kw: Any) -> Execution:
        return Execution(
            model=self.model,
            card=self.card,
            block_tokens=self.block_tokens,
            capacity=self.model.max_positions,
            num_blocks=self.num_blocks,
            tolerance=self.tolerance,
            seed=seed,
            **kw,
        )

    def build(self, ex: Execution) -> bool:
        """Build the pool into ``ex``; a factory error is a crash."""
        shape = self.card.block_shape(self.block_tokens)
        try:
            ex.pool = self.factory(self.num_blocks, shape, dtype=torch.float32, device=None)
        except Exception as error:
            ex.fail("crash", f"the pool factory raised {type(error).__name__}: {error}")
            return False
        return True


def _executions(setup: _Setup, plans: tuple[SequencePlan, ...], seed: int, mode: str) -> Iterator[Execution]:
    """The executions of one seed, lazily: the caller stops at the first that finds something."""
    if mode == "free":
        yield _free(setup, plans, seed)
        return
    first = RandomScheduler(seed=seed)
    yield _controlled(setup, plans, seed, first)
    yield _controlled(setup, plans, seed, PCTScheduler(depth=3, seed=seed, k=len(first.schedule().tasks)))


def _controlled(
    setup: _Setup, plans: tuple[SequencePlan, ...], seed: int, scheduler: SchedulerBase
) -> Execution:
    ex = setup.execution(
        seed,
        strategy=scheduler.name,
        start_thread=lambda target, name: spawn(target, name=name),
        yield_point=_yield_point,
        schedule=lambda: scheduler.schedule().encode(),
    )

    def main() -> None:
        if setup.build(ex):  # inside the run: the pool's locks are the cooperative ones
            _start_all(ex, plans)
            index = 0
            while index < len(ex.threads):  # forks add threads while we wait
                ex.threads[index].join()
                index += 1
            audit(ex)

    try:
        run_threads(main, scheduler, modules=(setup.factory,), max_time=_time_bound(plans))
    except _HANGS as error:
        ex.fail("hang", f"{type(error).__name__}: {' '.join(str(error).splitlines())}")
    except Exception as error:
        ex.fail("crash", f"the execution raised {type(error).__name__}: {error}")
    return ex


def _yield_point() -> None:
    controller = active_controller()
    if controller is not None:
        controller.yield_point()


def _free(setup: _Setup, plans: tuple[SequencePlan, ...], seed: int) -> Execution:
    def start(target: Callable[[], None], name: str) -> threading.Thread:
        thread = threading.Thread(target=target, name=f"kvstress-shadow-{name}", daemon=True)
        thread.start()
        return thread

    ex = setup.execution(
        seed,
        strategy="free",
        start_thread=start,
        yield_point=lambda: time.sleep(0),
    )
    if setup.build(ex):
        _start_all(ex, plans)
        deadline = time.monotonic() + _time_bound(plans) + 30.0
        index = 0
        while index < len(ex.threads):
            ex.threads[index].join(max(0.0, deadline - time.monotonic()))
            if ex.threads[index].is_alive():
                ex.fail("hang", f"sequence {ex.threads[index].name} did not finish in time")
                break
            index += 1
        audit(ex)
    return ex


def _time_bound(plans: tuple[SequencePlan, ...]) -> float:
    """Seconds no execution needs: every acquire of every attempt timing out, one after another,
    plus a minute. Past it, something ignored its timeout: a hang."""
    acquires = sum(plan.tokens for plan in plans)  # at most one per token (a fork's copy included)
    return ACQUIRE_TIMEOUT * len(plans) * MAX_ATTEMPTS * acquires + 60.0


def _start_all(ex: Execution, plans: tuple[SequencePlan, ...]) -> None:
    for index, plan in enumerate(plans):  # the first is the oldest request: the most patient
        patience = ACQUIRE_TIMEOUT * (len(plans) - index)
        ex.start(root(plan, ex.card, ex.block_tokens, ex.capacity, patience))


def _refuse_async(factory: Callable[..., Any], num_blocks: int, shape: tuple[int, ...]) -> None:
    if not callable(factory):
        raise ValueError(f"factory must be a pool class or factory, got {got(factory)}")
    try:
        probe = factory(num_blocks, shape, dtype=torch.float32, device=None)
    except Exception as error:
        raise ValueError(
            f"factory {getattr(factory, '__qualname__', factory)!r} cannot build a pool "
            f"({num_blocks}, {shape}, dtype=torch.float32): {type(error).__name__}: {error}"
        ) from None
    if inspect.iscoroutinefunction(getattr(probe, "acquire", None)):
        raise ValueError(
            f"factory must build a thread-flavoured pool (a plain acquire), got an async "
            f"{type(probe).__name__}: shadow mode drives threads only"
        )


def _check(
    sequences: int,
    steps: int,
    block_tokens: int,
    num_blocks: int,
    seed: int,
    max_seeds: int | None,
    budget_s: float | None,
    mode: str,
    tolerance: float,
) -> None:
    for name, value in (("sequences", sequences), ("steps", steps), ("block_tokens", block_tokens)):
        positive_int(name, value)
    positive_int("num_blocks", num_blocks)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise ValueError(f"seed must be an int in [0, 2**63), got {got(seed)}")
    if max_seeds is not None:
        positive_int("max_seeds", max_seeds)
    if budget_s is not None:
        positive_number("budget_s", budget_s)
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {got(mode)}")
    positive_number("tolerance", tolerance)
    longest = blocks_for(block_tokens + steps, block_tokens)
    if num_blocks < longest:
        raise ValueError(
            f"num_blocks must be >= {longest} (one sequence of up to block_tokens + steps = "
            f"{block_tokens + steps} tokens), got {num_blocks}"
        )
