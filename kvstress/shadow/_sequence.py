"""One shadow execution's sequences: each a thread that decodes paged and reference side by side.

A sequence steps: take a block from the pool when its table is full, run one token through the
decoder over the reference cache and over the paged cache, compare the logits, feed both sides
the reference's greedy token. Blocks are taken on demand from a pool smaller than the total
demand, as a serving engine does: an acquire that times out preempts its sequence (it releases
everything and recomputes from the start, vLLM's recompute preemption), which also ends any
hold-and-wait cycle. So acquirers often wait on an empty pool and take a block the moment it
is released: when a reset racing the offer, or a block handed out twice, bites. Some sequences
fork: the child retains the parent's full blocks (prefix sharing) and copies the partial one
into a block of its own. The first divergence or pool failure stops every sequence.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from kvstress.capacity import ModelCard
from kvstress.shadow._decoder import ReferenceCache, TinyDecoder
from kvstress.shadow._paged import PagedCache
from kvstress.shadow._plan import SequencePlan
from kvstress.shadow._result import BlockBlame, Divergence, PoolFailure

ACQUIRE_TIMEOUT = 0.05
"""Seconds a sequence waits for a block before it is preempted (virtual seconds when controlled)."""

MAX_ATTEMPTS = 4
"""A root sequence preempted this many times gives up (a server would fail the request)."""


@dataclass
class Live:
    """A running sequence: ``inputs`` are fed first, then the reference's greedy tokens, for
    ``steps`` steps from ``length``. ``plan`` is set for a root (it restarts from it)."""

    name: str
    inputs: tuple[int, ...]
    steps: int
    paged: PagedCache
    reference: ReferenceCache
    length: int = 0
    plan: SequencePlan | None = None


class _PoolRaised(Exception):
    """A pool call raised: a crash, not drift."""


@dataclass
class Execution:
    """The state one execution's sequences share. Counters and the first finding change under
    ``lock`` (a real lock: no scheduling point is ever taken while it is held)."""

    model: TinyDecoder
    card: ModelCard
    block_tokens: int
    capacity: int
    tolerance: float
    seed: int
    strategy: str
    start_thread: Callable[[Callable[[], None], str], Any]
    yield_point: Callable[[], None]
    pool: Any = None
    schedule: Callable[[], str | None] = lambda: None
    divergence: Divergence | None = None
    failure: PoolFailure | None = None
    steps_compared: int = 0
    max_abs_diff: float = 0.0
    preemptions: int = 0
    threads: list[Any] = field(default_factory=list)
    lock: Any = field(default_factory=threading.Lock)

    @property
    def stopped(self) -> bool:
        """A divergence or a failure was recorded: every sequence stops at its next step."""
        return self.divergence is not None or self.failure is not None

    def start(self, seq: Live) -> None:
        """Run ``seq`` on a new thread (kept for joining)."""
        self.threads.append(self.start_thread(lambda: run_sequence(self, seq), seq.name))

    def fail(self, invariant: str, message: str) -> None:
        """Record a pool failure unless something was recorded first."""
        with self.lock:
            if not self.stopped:
                self.failure = PoolFailure(self.seed, self.strategy, invariant, message)

    def diverged(self, divergence: Divergence) -> None:
        """Record a divergence unless something was recorded first."""
        with self.lock:
            if not self.stopped:
                self.divergence = divergence


def root(plan: SequencePlan, card: ModelCard, block_tokens: int, capacity: int) -> Live:
    """A sequence that starts empty (again, after a preemption)."""
    return Live(
        name=plan.name,
        inputs=plan.prompt,
        steps=plan.length,
        paged=PagedCache(card, block_tokens, capacity),
        reference=ReferenceCache(card, capacity),
        plan=plan,
    )


def run_sequence(ex: Execution, seq: Live) -> None:
    """Decode and compare step by step, then release everything; restart a preempted root up to
    ``MAX_ATTEMPTS`` times (a preempted fork is dropped: its prefix is gone). Never raises."""
    for _ in range(MAX_ATTEMPTS):
        try:
            finished = _decode(ex, seq)
        except _PoolRaised as error:
            ex.fail("crash", f"{seq.name}: {error}")
            finished = True
        finally:
            _retire(ex, seq)
        if finished or seq.plan is None or ex.stopped:
            return
        with ex.lock:
            ex.preemptions += 1
        seq = root(seq.plan, ex.card, ex.block_tokens, ex.capacity)


def _decode(ex: Execution, seq: Live) -> bool:
    """True when the sequence ran to its end or the run stopped; False when it was preempted."""
    token = seq.inputs[0]
    for step in range(seq.steps):
        if ex.stopped:
            return True
        ex.yield_point()
        position = seq.length
        if seq.paged.needs_block(position):
            block = _acquire(ex)
            if block is None:
                return False
            seq.paged.blocks.append(block)
            ex.yield_point()
        reference = ex.model.step(token, position, seq.reference)
        paged = ex.model.step(token, position, seq.paged)
        seq.length += 1
        if not _compare(ex, seq, step, position, reference, paged):
            return True
        token = seq.inputs[step + 1] if step + 1 < len(seq.inputs) else int(reference.argmax())
        plan = seq.plan
        if plan is not None and plan.fork_at == seq.length:
            _fork(ex, seq, plan, (token + plan.fork_token_shift) % ex.card.vocab_size)
    return True


def _compare(
    ex: Execution, seq: Live, step: int, position: int, reference: torch.Tensor, paged: torch.Tensor
) -> bool:
    diff = float((reference - paged).abs().max())
    with ex.lock:
        ex.steps_compared += 1
        if diff <= ex.tolerance:  # NaN is never <=: a NaN logit diverges
            ex.max_abs_diff = max(ex.max_abs_diff, diff)
            return True
    ex.diverged(
        Divergence(
            seed=ex.seed,
            strategy=ex.strategy,
            sequence=seq.name,
            step=step,
            position=position,
            max_abs_diff=diff,
            reference_token=int(reference.argmax()),
            paged_token=int(paged.argmax()),
            block=_blame(seq.paged),
            schedule=ex.schedule(),
        )
    )
    return False


def _blame(paged: PagedCache) -> BlockBlame | None:
    corruption = paged.first_corruption()
    if corruption is None:
        return None
    block = corruption.block
    state = getattr(block, "state", None)
    refcount = getattr(block, "refcount", None)
    return BlockBlame(
        block_id=int(block.id),
        position=corruption.position,
        slot=corruption.slot,
        layer=corruption.layer,
        kind=corruption.kind,
        max_abs_diff=corruption.max_abs_diff,
        state=getattr(state, "name", str(state)),
        refcount=refcount if isinstance(refcount, int) else None,
    )


def _fork(ex: Execution, parent: Live, plan: SequencePlan, token: int) -> None:
    """Start a child that shares the parent's full blocks and copies its partial one; skipped
    when no block comes for the copy, as a server would."""
    child = Live(
        name=f"{parent.name}.fork",
        inputs=(token,),
        steps=plan.fork_decode,
        paged=PagedCache(ex.card, ex.block_tokens, ex.capacity, written=parent.paged.written.clone()),
        reference=parent.reference.fork(),
        length=parent.length,
    )
    full, partial = divmod(parent.length, ex.block_tokens)
    try:
        for block in parent.paged.blocks[:full]:
            _call("retain", ex.pool.retain, block)
            child.paged.blocks.append(block)
            ex.yield_point()
        if partial:
            copy = _acquire(ex)
            if copy is None:
                _retire(ex, child)
                return
            # Copy-on-write of the partial block, from the block's memory as a server does.
            copy.data[:, :, :partial] = parent.paged.blocks[full].data[:, :, :partial]
            child.paged.blocks.append(copy)
    except _PoolRaised:
        _retire(ex, child)
        raise
    ex.start(child)


def _acquire(ex: Execution) -> Any:
    """A block marked in use, or None when none came within ``ACQUIRE_TIMEOUT`` (preemption)."""
    block = _call("acquire", ex.pool.acquire, ACQUIRE_TIMEOUT)
    if block is not None:
        _call("mark_in_use", ex.pool.mark_in_use, block)
    return block


def _retire(ex: Execution, seq: Live) -> None:
    """Release every block, last first (as vLLM frees)."""
    blocks, seq.paged.blocks = seq.paged.blocks, []
    try:
        for block in reversed(blocks):
            ex.yield_point()
            _call("release", ex.pool.release, block)
    except _PoolRaised as error:
        ex.fail("crash", f"{seq.name}: {error}")


def _call(what: str, method: Callable[..., Any], *args: Any) -> Any:
    try:
        return method(*args)
    except Exception as error:
        raise _PoolRaised(f"the pool raised {type(error).__name__} from {what}: {error}") from error
