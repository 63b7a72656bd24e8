"""What the threaded and the async pool share: construction, validation, reads, metrics, dumps."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from itertools import repeat
from operator import attrgetter
from typing import Any, ClassVar

import torch

from kvstress._checks import (
    check_block_shape,
    check_dtype,
    check_num_blocks,
    check_positive_or_none,
    positive_int,
    resolve_device,
)
from kvstress._log import get_logger
from kvstress.pool._block import Block, BlockBatch
from kvstress.pool._core import PoolCore, ReleaseStep
from kvstress.pool._leaks import LeakDetection, LeakSuspect, LeakTracker
from kvstress.pool._state import BlockState
from kvstress.pool._storage import BlockStorage, make_storage

log = get_logger("kvstress.pool")

_ACQUIRED, _IN_USE = int(BlockState.ACQUIRED), int(BlockState.IN_USE)
# C-level reads of a batch of handles (one pass each, no Python frame per block)
_core_of, _id_of, _generation_of = attrgetter("_core"), attrgetter("id"), attrgetter("generation")


@dataclass(frozen=True, slots=True)
class BlockInfo:
    """One block as a dump shows it."""

    id: int
    state: BlockState
    refcount: int
    holder: str | None
    in_free_queue: bool
    held_for_s: float | None


class PoolBase:
    """Construction and the read side of a pool; the flavours add acquire and release.

    ``backoff_bound`` (seconds): how much later than its deadline, or than a block becoming
    free, a waiting acquire may return, beyond the time the OS or event loop takes to run it.
    Our pools wake waiters by notification, so they declare 0.0; the checkers add a slack.
    """

    backoff_bound: ClassVar[float] = 0.0

    def __init__(
        self,
        num_blocks: int,
        block_shape: tuple[int, ...] | list[int],
        *,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
        leak_threshold: float | None = None,
        leak_detection: LeakDetection = LeakDetection.SIMPLE,
        leak_sample_rate: int = 128,
    ) -> None:
        self.num_blocks = check_num_blocks(num_blocks)
        self.block_shape = check_block_shape(block_shape)
        self.dtype = check_dtype(dtype)
        self.device = resolve_device(device)
        if not isinstance(leak_detection, LeakDetection):
            raise ValueError(f"leak_detection must be a LeakDetection, got {leak_detection!r}")
        tracker = LeakTracker(
            leak_detection,
            positive_int("leak_sample_rate", leak_sample_rate),
            check_positive_or_none("leak_threshold", leak_threshold),
            self.num_blocks,
        )
        self._storage = self._make_storage()
        self._core = self._make_core(tracker)
        self._states = self._core.states  # the core's state bytes (one object for the pool's life)
        self._lock: AbstractContextManager[Any] = nullcontext()
        self._setup()

    def _make_storage(self) -> BlockStorage:
        """The block memory (a subclass may allocate it otherwise: a tiered pool, in segments)."""
        return make_storage(self.num_blocks, self.block_shape, self.dtype, self.device)

    def _make_core(self, tracker: LeakTracker) -> PoolCore:
        """The bookkeeping (a subclass may order its free queue otherwise)."""
        return PoolCore(self.num_blocks, tracker)

    # -- the protocol's read side -----------------------------------------------------------

    def free_count(self) -> int:
        """The pool's own O(1) counter of free blocks."""
        return self._core.free_count

    def free_ids(self) -> list[int]:
        """The ids in the free queue, in queue order (a snapshot)."""
        with self._lock:
            return self._core.free_ids()

    def mark_in_use(self, block: Block) -> None:
        """ACQUIRED -> IN_USE: the holder starts writing K/V. Raises InvalidTransition otherwise."""
        core = self._core
        if type(block) is not Block or block._core is not core:  # the hot path skips a call
            self._unwrap(block)  # raises
        block_id, states = block.id, self._states
        with self._lock:
            # The core's compare-and-set, inlined (a batch marks each of its blocks: this is
            # per block); where either check fails the core's own call raises, saying which.
            if states[block_id] != _ACQUIRED or core.generations[block_id] != block.generation:
                core.mark_in_use(block_id, block.generation)
            states[block_id] = _IN_USE

    def mark_in_use_many(self, blocks: Sequence[Block]) -> None:
        """``mark_in_use`` for each block (a table's fresh blocks), in one lock section.

        All or nothing: where any block is not ACQUIRED and held through that handle, or is
        listed twice, raises InvalidTransition (as ``mark_in_use``) and marks none. An optional
        member of the protocol: ours only.
        """
        block_ids, gens = self._unwrap_many(blocks)  # misuse raises before any change
        with self._lock:
            self._core.mark_in_use_many(block_ids, gens)

    def retain(self, block: Block) -> None:
        """Share a held block: refcount += 1. Raises InvalidTransition on a block not held."""
        block_id, generation = self._unwrap(block)
        with self._lock:
            self._core.retain(block_id, generation)

    # -- observability ----------------------------------------------------------------------

    def metrics(self) -> dict[str, float | int]:
        """The seed's five metrics and a few counters, as a flat dict."""
        core = self._core
        with self._lock:
            return {
                "free_count": core.free_count,
                "acquired_count": core.held,
                "acquire_wait_p50_s": core.waits.percentile(50),
                "acquire_wait_p99_s": core.waits.percentile(99),
                "double_release_count": core.double_releases,
                "leak_suspect_count": core.leaks.suspect_count,
                "leak_returned_count": core.leaks.returned_count,
                "acquire_timeout_count": core.timeouts,
            }

    def check_leaks(self) -> list[LeakSuspect]:
        """Report blocks held past ``leak_threshold`` (each once); also done on every acquire."""
        with self._lock:
            return self._core.leaks.scan(self._now())

    def dump(self) -> list[BlockInfo]:
        """Every block: state, refcount, holder, whether it is in the free queue."""
        with self._lock:
            core, now = self._core, self._now()
            queued = set(core.free_ids())
            infos = []
            for block_id in range(self.num_blocks):
                since = core.leaks.acquired_at(block_id)
                infos.append(
                    BlockInfo(
                        block_id,
                        core.state(block_id),
                        core.refcount[block_id],
                        core.leaks.holder_of(block_id),
                        block_id in queued,
                        None if since is None else now - since,
                    )
                )
            return infos

    @property
    def storage(self) -> torch.Tensor:
        """The whole block memory, ``[num_blocks, *block_shape]`` (for benchmarks and dumps)."""
        return self._storage.tensor

    # -- for the flavours -------------------------------------------------------------------

    def _setup(self) -> None:
        """Make the flavour's own synchronisation (a lock, a waiter queue)."""

    def _now(self) -> float:
        raise NotImplementedError

    def _offered(self, block_ids: Sequence[int]) -> None:
        """Called once released blocks are reset and back in the queue (with the lock held, or
        on the loop): a subclass's bookkeeping (a tiered pool settles their segments here)."""

    def _notify(self, count: int = 1) -> None:
        """Wake up to ``count`` waiting acquirers, if any wait (with the lock held, or on the loop)."""
        raise NotImplementedError

    def _handed_out(self, block_id: int, now: float) -> Block:
        """The handle for a block the core just handed out (leak suspects are checked on every
        acquire); a subclass may first make the block's memory exist (a tiered pool)."""
        if self._core.leaks.threshold is not None:
            self._core.leaks.scan(now)
        return self._handle(block_id)

    def _handed_out_many(self, block_ids: Sequence[int], now: float) -> BlockBatch:
        """``_handed_out`` for a batch the core just handed out: one leak scan, one stream wait
        per distinct reset event, one handle per block."""
        core, storage = self._core, self._storage
        if core.leaks.threshold is not None:
            core.leaks.scan(now)
        if storage.orders_streams:  # CUDA: the taker's stream waits for the resets
            storage.hand_out_many(block_ids)
        count = len(block_ids)  # the core gave the whole batch one tenancy: one generation
        generation = core.generations[block_ids[0]] if count else 0
        cores, storages, generations = repeat(core, count), repeat(storage, count), repeat(generation, count)
        handles = list(map(Block, cores, storages, block_ids, generations))
        return BlockBatch(core, handles, block_ids, generation)

    def _handle(self, block_id: int) -> Block:
        storage = self._storage
        if storage.orders_streams:  # CUDA: the taker's stream waits for the reset
            storage.hand_out(block_id)
        core = self._core
        return Block(core, storage, block_id, core.generations[block_id])

    def _unwrap(self, block: object) -> tuple[int, int]:
        if type(block) is Block and block._core is self._core:  # the hot path: one exact check
            return block.id, block.generation
        if not isinstance(block, Block) or not block.belongs_to(self._core):
            raise ValueError(f"block must be a Block handed out by this pool, got {block!r}")
        return block.id, block.generation

    def _unwrap_many(self, blocks: Sequence[Block]) -> tuple[Sequence[int], Sequence[int]]:
        """The ids and the generations of the blocks; raises, as ``_unwrap``, before anything
        changes."""
        core, count = self._core, len(blocks)
        if type(blocks) is BlockBatch:  # a batch as acquire_many gave it: its kept ids
            kept = blocks.kept(core)
            if kept is not None:
                return kept
        # the hot path, by C-level passes: every handle exactly a Block of this pool
        if list(map(type, blocks)).count(Block) == count and list(map(_core_of, blocks)).count(core) == count:
            return list(map(_id_of, blocks)), list(map(_generation_of, blocks))
        pairs = [self._unwrap(block) for block in blocks]
        return [i for i, _ in pairs], [g for _, g in pairs]

    def _returned(self, block_ids: Sequence[int], steps: list[ReleaseStep]) -> Sequence[int]:
        """The blocks a batched release returned (``block_ids`` itself when it returned them
        all); each double release is logged."""
        if steps.count(ReleaseStep.LAST) == len(steps):
            return block_ids
        last = []
        for block_id, step in zip(block_ids, steps, strict=True):
            if step is ReleaseStep.LAST:
                last.append(block_id)
            elif step is ReleaseStep.DOUBLE:
                self._log_double_release(block_id)
        return last

    def _log_double_release(self, block_id: int) -> None:
        log.warning(
            "double_release",
            block=block_id,
            state=self._core.state_name(block_id),
            count=self._core.double_releases,
        )

    def __repr__(self) -> str:
        return (
            f"<{type(self).__name__} {self.num_blocks} x {list(self.block_shape)} {self.dtype} "
            f"on {self.device}, {self._core.free_count} free>"
        )
