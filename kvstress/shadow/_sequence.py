"""One shadow execution's sequences: each a thread that decodes paged and reference side by side.

A sequence steps: take a block from the pool when its table is full, run one token through the
decoder over the reference cache and over the paged cache, compare the logits, feed both sides
the reference's greedy token. Blocks are taken on demand from a pool smaller than the total
demand, as a serving engine does: an acquire that times out preempts its sequence (it releases
everything and recomputes from the start, vLLM's recompute preemption), which also ends any
hold-and-wait cycle. So acquirers often wait on an empty pool and take a block the moment it
is released: when a reset racing the offer, or a block handed out twice, bites. Sequences
fork as their plans say (several times, children too): the child retains the parent's full
blocks (prefix sharing) and copies the partial one into a block of its own, so shared blocks
are retained and released by several threads at once. The first divergence or pool failure
stops every sequence. Once every sequence has ended, ``audit`` checks that the pool can hand
out all its blocks again: a lost refcount update leaks a block without drifting any output.
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
from kvstress.shadow._plan import ForkPlan, SequencePlan, blocks_for
from kvstress.shadow._result import BlockBlame, Divergence, PoolFailure

ACQUIRE_TIMEOUT = 0.05
"""Seconds the youngest sequence waits for a block before it is preempted (virtual seconds when
controlled); each older one waits this much longer than the next younger one (``patience``)."""

MAX_ATTEMPTS = 4
"""A root sequence preempted this many times gives up (a server would fail the request)."""


@dataclass
class Family:
    """One request: a root attempt and every fork of it. A server preempts a request whole, so
    when one member is preempted every member stops at its next step and releases, and the
    shared prefix is released by several threads at once. Set once, under ``Execution.lock``."""

    preempted: bool = False


@dataclass
class Live:
    """A running sequence: ``inputs`` are fed first, then the reference's greedy tokens, for
    ``steps`` steps from ``length``; it forks ``forks`` as its length reaches theirs. ``plan``
    is set for a root (it restarts from it). Older requests are more patient, so on a pool too
    small for all of them the youngest is preempted first and the others progress (as a
    server preempts its newest request), instead of all timing out together; a child shares
    its parent's patience, so a family waiting together times out, and releases, together."""

    name: str
    inputs: tuple[int, ...]
    steps: int
    paged: PagedCache
    reference: ReferenceCache
    length: int = 0
    plan: SequencePlan | None = None
    forks: tuple[ForkPlan, ...] = ()
    patience: float = ACQUIRE_TIMEOUT  # seconds an acquire waits before the sequence is preempted
    copy_on_write: bool = False  # the table's last block is shared: copy it before writing to it
    family: Family = field(default_factory=Family)


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
    num_blocks: int
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
    forks: int = 0  # children started
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


def root(
    plan: SequencePlan, card: ModelCard, block_tokens: int, capacity: int, patience: float = ACQUIRE_TIMEOUT
) -> Live:
    """A sequence that starts empty (again, after a preemption)."""
    return Live(
        name=plan.name,
        inputs=plan.prompt,
        steps=plan.length,
        paged=PagedCache(card, block_tokens, capacity),
        reference=ReferenceCache(card, capacity),
        plan=plan,
        forks=plan.forks,
        patience=patience,
    )


def run_sequence(ex: Execution, seq: Live) -> None:
    """Decode and compare step by step, then release everything; restart a preempted root up to
    ``MAX_ATTEMPTS`` times (a preempted fork is dropped: its prefix is gone). Never raises."""
    for _ in range(MAX_ATTEMPTS):
        finished = False
        try:
            finished = _decode(ex, seq)
        except _PoolRaised as error:
            ex.fail("crash", f"{seq.name}: {error}")
            finished = True
        finally:
            if not finished:
                with ex.lock:
                    seq.family.preempted = True
            _retire(ex, seq)
        if finished or seq.plan is None or ex.stopped:
            return
        with ex.lock:
            ex.preemptions += 1
        seq = root(seq.plan, ex.card, ex.block_tokens, ex.capacity, seq.patience)


def _decode(ex: Execution, seq: Live) -> bool:
    """True when the sequence ran to its end or the run stopped; False when it was preempted."""
    token = seq.inputs[0]
    for step in range(seq.steps):
        if ex.stopped:
            return True
        ex.yield_point()
        if seq.family.preempted:
            return False
        position = seq.length
        needs = seq.paged.needs_block(position) or seq.copy_on_write
        if needs and not _grow(ex, seq, position):
            return False
        reference = ex.model.step(token, position, seq.reference)
        paged = ex.model.step(token, position, seq.paged)
        seq.length += 1
        if not _compare(ex, seq, step, position, reference, paged):
            return True
        token = seq.inputs[step + 1] if step + 1 < len(seq.inputs) else int(reference.argmax())
        group = [(index, fork) for index, fork in enumerate(seq.forks) if fork.at == seq.length]
        if group and not ex.stopped:
            _fork(ex, seq, group, token)
    return True


def _grow(ex: Execution, seq: Live, position: int) -> bool:
    """Give ``position`` a block of the sequence's own: a new one past the table, or a copy of
    the shared last block (copy-on-write: its written slots are copied, then the shared
    reference is released). False when no block came in time (preemption)."""
    block = _acquire(ex, seq.patience)
    if block is None:
        return False
    if seq.copy_on_write:
        shared = seq.paged.blocks[-1]
        slot = position % ex.block_tokens
        # Copied from the block's memory, as a server does: its sharers never write these slots.
        block.data[:, :, :slot] = shared.data[:, :, :slot]
        seq.paged.blocks[-1] = block
        seq.copy_on_write = False
        ex.yield_point()
        _call("release", ex.pool.release, shared)
    else:
        seq.paged.blocks.append(block)
    ex.yield_point()
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


def _fork(ex: Execution, parent: Live, group: list[tuple[int, ForkPlan]], token: int) -> None:
    """Fork every child of ``group`` (the parent's forks due at its current length), then start
    them together, as a server starts the samples of one request: so they run, wait, end and
    release the shared prefix at about the same time."""
    children: list[Live] = []
    try:
        for index, plan in group:
            shifted = (token + plan.token_shift) % ex.card.vocab_size
            children.append(_child(ex, parent, plan, f"{parent.name}.{index}", shifted))
    except _PoolRaised:
        for child in children:
            _retire(ex, child)
        raise
    with ex.lock:
        ex.forks += len(children)
    for child in children:
        ex.start(child)


def _child(ex: Execution, parent: Live, plan: ForkPlan, name: str, token: int) -> Live:
    """A child that retains every block of the parent's table (prefix sharing); a partial last
    block it copies on its first write (``copy_on_write``), in its own thread, as vLLM does."""
    child = Live(
        name=name,
        inputs=(token,),
        steps=plan.decode,
        paged=PagedCache(ex.card, ex.block_tokens, ex.capacity, written=parent.paged.written.clone()),
        reference=parent.reference.fork(),
        length=parent.length,
        forks=plan.forks,
        patience=parent.patience,
        family=parent.family,
        copy_on_write=parent.length % ex.block_tokens != 0,
    )
    try:
        for block in parent.paged.blocks[: blocks_for(parent.length, ex.block_tokens)]:
            _call("retain", ex.pool.retain, block)
            child.paged.blocks.append(block)
            ex.yield_point()
    except _PoolRaised:
        _retire(ex, child)
        raise
    return child


def _acquire(ex: Execution, timeout: float) -> Any:
    """A block marked in use, or None when none came within ``timeout`` seconds (preemption)."""
    block = _call("acquire", ex.pool.acquire, timeout)
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


def audit(ex: Execution) -> None:
    """Once every sequence has ended (and released everything): the pool must hand out each of
    its ``num_blocks`` blocks again, to one holder each, and then no more. A block it cannot
    hand out is lost (a refcount left above zero, say: a lost update between a retain and a
    release); a block handed out twice is shared (its id was queued twice, say: two releasers
    both saw the last reference go). Skipped when the run already stopped. Never raises."""
    if ex.stopped:
        return
    taken: list[Any] = []
    try:
        for _ in range(ex.num_blocks + 1):
            block = _call("acquire", ex.pool.acquire, ACQUIRE_TIMEOUT)
            if block is None:
                break
            taken.append(block)
        ids = sorted(int(block.id) for block in taken)
        if len(taken) < ex.num_blocks:
            ex.fail(
                "lost-block",
                f"after every sequence released its blocks, the pool handed out only {len(taken)} of "
                f"its {ex.num_blocks} blocks (ids {ids}); the next acquire timed out after "
                f"{ACQUIRE_TIMEOUT} s",
            )
        elif len(taken) > ex.num_blocks or len(set(ids)) < len(ids):
            ex.fail(
                "shared-block",
                f"after every sequence released its blocks, the pool handed out blocks {ids} to "
                f"{len(taken)} holders, though it has {ex.num_blocks}",
            )
        for block in taken:
            _call("release", ex.pool.release, block)
    except _PoolRaised as error:
        ex.fail("crash", f"audit: {error}")
