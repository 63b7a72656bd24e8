"""Bookkeeping shared by the threaded and the async pool: states, refcounts, the free queue, its counter.

The core holds no lock and reads no clock: the threaded pool calls it under its lock, the async
pool from its one event loop, and both pass the time in. Metadata is compact and built up front
for every block (a byte of state, an int refcount, an int generation, a slot in the free ring);
nothing per block is a Python object until the block is handed out.

Invariants, between two calls:
- the free ring holds exactly the blocks whose state is FREE, each once;
- ``free_count`` (an independent counter, as the seed's AtomicInteger) equals the ring's length;
- a block's refcount is >= 1 when it is ACQUIRED or IN_USE, and 0 otherwise;
- a block's generation grows at each acquire: it is the pool's count of acquires (a batch counts
  once) when the block was taken, so a handle from an earlier tenancy is stale.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from enum import Enum

from kvstress._errors import InvalidTransition
from kvstress.pool._leaks import LeakTracker
from kvstress.pool._metrics import WaitSamples
from kvstress.pool._state import BlockState

_FREE = int(BlockState.FREE)
_ACQUIRED = int(BlockState.ACQUIRED)
_IN_USE = int(BlockState.IN_USE)
_RELEASING = int(BlockState.RELEASING)


_ACQUIRED_BYTE = bytes([_ACQUIRED])
_IN_USE_BYTE = bytes([_IN_USE])
_RELEASING_BYTE = bytes([_RELEASING])
_HELD_BYTES = bytes([_ACQUIRED, _IN_USE])
_ONE = array("i", [1])


def as_run(block_ids: Sequence[int]) -> Sequence[int]:
    """The ids as a ``range`` where they are consecutive and ascending (a batch freed together
    comes back so), else as they are. A ``range`` is how the core says "a run": the batch calls
    then change its blocks by slices, one operation per array instead of one per block."""
    if type(block_ids) is range or not block_ids:
        return block_ids
    first, count = block_ids[0], len(block_ids)
    if block_ids[-1] - first == count - 1 and block_ids == list(range(first, first + count)):
        return range(first, first + count)
    return block_ids


def _as_generations(gens: Sequence[int]) -> array[int]:
    """``gens`` as an array, to compare with a slice of the generations (a batch's one
    generation repeated, without a conversion per element)."""
    if gens and gens.count(gens[0]) == len(gens):
        return array("Q", [gens[0]]) * len(gens)
    return array("Q", gens)


class ReleaseStep(Enum):
    """What one release did: dropped a shared reference, started the return, or nothing (double)."""

    SHARED = "shared"
    LAST = "last"
    DOUBLE = "double"


_SHARED, _LAST, _DOUBLE = ReleaseStep.SHARED, ReleaseStep.LAST, ReleaseStep.DOUBLE


class PoolCore:
    """The state of every block of one pool. See the module docstring for the invariants."""

    __slots__ = (
        "_head",
        "_ids",
        "_ring",
        "_ring_len",
        "_state",
        "double_releases",
        "free_count",
        "generations",
        "held",
        "leaks",
        "num_blocks",
        "refcount",
        "tenancies",
        "timeouts",
        "waits",
    )

    def __init__(self, num_blocks: int, leaks: LeakTracker) -> None:
        self.num_blocks = num_blocks
        self._state = bytearray(num_blocks)  # all FREE
        self.refcount = array("i", bytes(4 * num_blocks))
        self.generations = array("Q", bytes(8 * num_blocks))  # 64 bits: never wraps
        self.tenancies = 0  # acquires so far (a batch counts once): the next generation
        self._ring = array("q", range(num_blocks))
        self._ids = array("q", range(num_blocks))  # every id in order: a run's ids are a slice
        self._head = 0
        self._ring_len = num_blocks
        self.free_count = num_blocks
        self.held = 0
        self.double_releases = 0
        self.timeouts = 0
        self.leaks = leaks
        self.waits = WaitSamples()

    # -- the hot path ---------------------------------------------------------------------

    def take(self, now: float, holder: object) -> int:
        """Pop the next free block and hand it out (ACQUIRED, refcount 1); -1 when none is free."""
        if not self._ring_len:
            return -1
        head = self._head
        block_id = self._ring[head]
        self._head = head + 1 if head + 1 < self.num_blocks else 0
        self._ring_len -= 1
        if self._state[block_id] != _FREE:
            raise self._refused(block_id, _FREE, _ACQUIRED, "acquire")
        self._state[block_id] = _ACQUIRED
        self.free_count -= 1
        self.refcount[block_id] = 1
        self.tenancies += 1
        self.generations[block_id] = self.tenancies
        self.held += 1
        self.leaks.on_acquire(block_id, now, holder)
        return block_id

    def take_many(self, n: int, now: float, holder: object) -> Sequence[int] | None:
        """Hand out ``n`` free blocks at once, each as ``take`` would; None, with nothing changed,
        when fewer than ``n`` are free (all or nothing). The counters move once for the batch.
        The ids come as a ``range`` where they are a run (see ``as_run``), else as a list."""
        if self.free_count < n:
            return None
        block_ids = self._pop_free(n)
        tenancy = self.tenancies + 1
        state = self._state
        if type(block_ids) is range and state.count(_FREE, block_ids.start, block_ids.stop) == n:
            first, end = block_ids.start, block_ids.stop
            state[first:end] = _ACQUIRED_BYTE * n
            self.refcount[first:end] = _ONE * n
            self.generations[first:end] = array("Q", [tenancy]) * n
        else:
            refcount, generations = self.refcount, self.generations
            for block_id in block_ids:
                if state[block_id] != _FREE:
                    raise self._refused(block_id, _FREE, _ACQUIRED, "acquire_many")
                state[block_id] = _ACQUIRED
                refcount[block_id] = 1
                generations[block_id] = tenancy
        self.tenancies = tenancy
        self.free_count -= n
        self.held += n
        self.leaks.on_acquire_many(block_ids, now, holder)
        return block_ids

    def _pop_free(self, n: int) -> Sequence[int]:
        """The next ``n`` ids of the free queue, removed from it (at most two slices of the ring):
        a ``range`` where they are a run, a list otherwise."""
        head, size, ring = self._head, self.num_blocks, self._ring
        end = head + n
        if end <= size:
            taken = ring[head:end]
            first = taken[0] if n else 0
            if n and first + n <= size and taken == self._ids[first : first + n]:
                block_ids: Sequence[int] = range(first, first + n)
            else:
                block_ids = taken.tolist()
        else:
            block_ids = ring[head:].tolist() + ring[: end - size].tolist()
        self._head = end if end < size else end - size
        self._ring_len -= n
        return block_ids

    def mark_in_use(self, block_id: int, generation: int) -> None:
        """ACQUIRED -> IN_USE, by the current tenant only."""
        if generation != self.generations[block_id]:
            self._check_tenant(block_id, generation, "mark_in_use")
        if self._state[block_id] != _ACQUIRED:
            raise self._refused(block_id, _ACQUIRED, _IN_USE, "mark_in_use")
        self._state[block_id] = _IN_USE

    def mark_in_use_many(self, block_ids: Sequence[int], gens: Sequence[int]) -> None:
        """``mark_in_use`` for each block (of generation ``gens[i]``), all or nothing: where any
        block is not ACQUIRED by that tenant, or is listed twice, raises as ``mark_in_use`` would
        (the first such block) and changes no state."""
        count = len(block_ids)
        if not count:
            return
        state, run = self._state, as_run(block_ids)
        if type(run) is range:  # the hot path: a run (no id twice), all ACQUIRED, one tenancy
            first, end = run.start, run.stop
            if state.count(_ACQUIRED, first, end) == count and self.generations[first:end] == _as_generations(
                gens
            ):
                state[first:end] = _IN_USE_BYTE * count
                return
        seen: set[int] = set()
        for block_id, generation in zip(block_ids, gens, strict=True):
            self._check_tenant(block_id, generation, "mark_in_use_many")
            if state[block_id] != _ACQUIRED:
                raise self._refused(block_id, _ACQUIRED, _IN_USE, "mark_in_use_many")
            if block_id in seen:
                raise InvalidTransition(
                    block_id,
                    self.state_name(block_id),
                    "mark_in_use_many (ACQUIRED -> IN_USE)",
                    "listed twice: its second mark would find it IN_USE",
                )
            seen.add(block_id)
        for block_id in block_ids:  # all checked: now, and only now, change them
            state[block_id] = _IN_USE

    def retain(self, block_id: int, generation: int) -> None:
        """One more reference to a held block (prefix sharing)."""
        self._check_tenant(block_id, generation, "retain")
        state = self._state[block_id]
        if state not in (_ACQUIRED, _IN_USE) or self.refcount[block_id] < 1:
            raise InvalidTransition(
                block_id, self.state_name(block_id), "retain", "only a held block can be shared"
            )
        self.refcount[block_id] += 1

    def begin_release(self, block_id: int, generation: int, now: float) -> ReleaseStep:
        """Drop one reference; the last one moves the block to RELEASING (reset comes next)."""
        state = self._state[block_id]
        refcount = self.refcount[block_id]
        if (
            generation != self.generations[block_id]
            or (state != _ACQUIRED and state != _IN_USE)
            or refcount < 1
        ):
            self.double_releases += 1
            return _DOUBLE
        if refcount > 1:
            self.refcount[block_id] = refcount - 1
            return _SHARED
        self.refcount[block_id] = 0
        self._state[block_id] = _RELEASING
        self.held -= 1
        self.leaks.on_release(block_id, now)
        return _LAST

    def finish_release(self, block_id: int) -> None:
        """RELEASING -> FREE and offer: call only after the block's memory is reset."""
        if self._state[block_id] != _RELEASING:
            raise self._refused(block_id, _RELEASING, _FREE, "offer")
        self._state[block_id] = _FREE
        tail = self._head + self._ring_len
        self._ring[tail if tail < self.num_blocks else tail - self.num_blocks] = block_id
        self._ring_len += 1
        self.free_count += 1

    def begin_release_many(
        self, block_ids: Sequence[int], gens: Sequence[int], now: float
    ) -> list[ReleaseStep]:
        """``begin_release`` for each block (of generation ``gens[i]``) in order, in one pass: the
        steps, and the leak tracker told once about every block whose last reference went."""
        run = as_run(block_ids)
        if type(run) is range and self._release_run(run, gens):
            self.held -= len(run)
            self.leaks.on_release_many(run, now)
            return [_LAST] * len(run)
        state, refcount, generations = self._state, self.refcount, self.generations
        steps: list[ReleaseStep] = []
        last: list[int] = []
        for block_id, generation in zip(block_ids, gens, strict=True):
            current, refs = state[block_id], refcount[block_id]
            if (
                generation != generations[block_id]
                or (current != _ACQUIRED and current != _IN_USE)
                or refs < 1
            ):
                self.double_releases += 1
                steps.append(_DOUBLE)
            elif refs > 1:
                refcount[block_id] = refs - 1
                steps.append(_SHARED)
            else:
                refcount[block_id] = 0
                state[block_id] = _RELEASING
                last.append(block_id)
                steps.append(_LAST)
        self.held -= len(last)
        self.leaks.on_release_many(last, now)
        return steps

    def finish_release_many(self, block_ids: Sequence[int]) -> None:
        """``finish_release`` for a batch, queued in order (one slice of the ring where it fits)."""
        state, count, size = self._state, len(block_ids), self.num_blocks
        run = as_run(block_ids)
        if type(run) is range and state.count(_RELEASING, run.start, run.stop) == count:
            state[run.start : run.stop] = bytes(count)  # all FREE at once
            ids = self._ids[run.start : run.stop]
        else:
            ids = array("q", block_ids)
            for block_id in block_ids:
                if state[block_id] != _RELEASING:
                    raise self._refused(block_id, _RELEASING, _FREE, "offer")
                state[block_id] = _FREE
        tail = self._head + self._ring_len
        tail = tail if tail < size else tail - size
        if tail + count <= size:
            self._ring[tail : tail + count] = ids
        else:
            split = size - tail
            self._ring[tail:] = ids[:split]
            self._ring[: count - split] = ids[split:]
        self._ring_len += count
        self.free_count += count

    # -- batches over a run of consecutive ids: one slice operation per array --------------

    def _release_run(self, run: range, gens: Sequence[int]) -> bool:
        """Move consecutive held blocks of the given tenancies, each at its last reference, to
        RELEASING by slices; False, changing nothing, where any of that is not so."""
        count, first, end = len(run), run.start, run.stop
        if (
            len(gens) != count
            or self._state[first:end].strip(_HELD_BYTES)  # a block neither ACQUIRED nor IN_USE
            or self.refcount[first:end] != _ONE * count
            or self.generations[first:end] != _as_generations(gens)
        ):
            return False
        self._state[first:end] = _RELEASING_BYTE * count
        self.refcount[first:end] = array("i", bytes(4 * count))
        return True

    # -- reading --------------------------------------------------------------------------

    @property
    def states(self) -> bytearray:
        """Every block's state as a byte (a BlockState value); the same object for the core's
        life, changed only by the core, under the pool's lock or on its loop."""
        return self._state

    def state(self, block_id: int) -> BlockState:
        """The block's state now."""
        return BlockState(self._state[block_id])

    def state_name(self, block_id: int) -> str:
        """The block's state as a name, for messages."""
        return BlockState(self._state[block_id]).name

    def generation(self, block_id: int) -> int:
        """The block's tenancy: the pool's acquire count when it was last handed out."""
        return self.generations[block_id]

    def free_ids(self) -> list[int]:
        """The free ring's ids in queue order (a snapshot)."""
        n, head, ring = self.num_blocks, self._head, self._ring
        return [ring[(head + k) % n] for k in range(self._ring_len)]

    # -- internals ------------------------------------------------------------------------

    def _cas(self, block_id: int, expected: int, new: int, attempted: str) -> None:
        """Compare-and-set the state; atomic because the caller holds the pool's lock or loop."""
        if self._state[block_id] != expected:
            raise self._refused(block_id, expected, new, attempted)
        self._state[block_id] = new

    def _refused(self, block_id: int, expected: int, new: int, attempted: str) -> InvalidTransition:
        """The error for a compare-and-set that found the block in another state."""
        return InvalidTransition(
            block_id,
            self.state_name(block_id),
            f"{attempted} ({BlockState(expected).name} -> {BlockState(new).name})",
        )

    def _check_tenant(self, block_id: int, generation: int, attempted: str) -> None:
        if generation != self.generations[block_id]:
            raise InvalidTransition(
                block_id,
                self.state_name(block_id),
                attempted,
                "stale handle: the block was released (and perhaps taken again) since",
            )
