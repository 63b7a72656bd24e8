"""Pools whose free structure does size arithmetic: correct at every size, or broken only at some.

Each is ``CondvarPool`` with its free deque swapped for a structure of the same few calls
(``popleft``, ``append``, iteration, truth): a bitmap of 64-bit words, lowest free block first,
or a ring of slots read at ``head % n`` and written at ``tail % n``. On a pool of two (every
search's default size) the broken ones pass anything: ``BitmapTailMaskPool`` loses a whole
last word at 64 blocks, ``Ring8BitPool`` reads a stale slot once its 8-bit counters wrap where
the pool's size does not divide 256 (the ``history`` slice's ladder of sizes).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from kvstress.mutants import Block, CondvarPool

WORD = 64


class _Bitmap:
    """The free blocks as bits set in 64-bit words; ``popleft`` takes the lowest."""

    def __init__(self, blocks: Sequence[Block], mask_tail: Any) -> None:
        self._blocks = list(blocks)
        n = len(self._blocks)
        self._words = [(1 << WORD) - 1] * -(-n // WORD)
        mask_tail(self._words, n)

    def popleft(self) -> Block:
        for w, word in enumerate(self._words):
            if word:
                bit = (word & -word).bit_length() - 1
                self._words[w] = word & ~(1 << bit)
                return self._blocks[w * WORD + bit]
        raise IndexError("pop from an empty bitmap")

    def append(self, block: Block) -> None:
        self._words[block.id // WORD] |= 1 << (block.id % WORD)

    def __iter__(self) -> Iterator[Block]:
        for w, word in enumerate(self._words):
            for bit in range(WORD):
                if word >> bit & 1:
                    yield self._blocks[w * WORD + bit]

    def __len__(self) -> int:
        return sum(word.bit_count() for word in self._words)

    def __bool__(self) -> bool:
        return any(self._words)


def _mask_tail(words: list[int], n: int) -> None:
    """No bit past the last block: the last word keeps its ``n % 64`` low bits (all, when full)."""
    if n % WORD:
        words[-1] &= (1 << (n % WORD)) - 1


def _mask_tail_always(words: list[int], n: int) -> None:
    """BUG: the last word keeps its ``n % 64`` low bits even when it is full (none, then)."""
    words[-1] &= (1 << (n % WORD)) - 1


class BitmapPool(CondvarPool):
    """Correct: the free blocks kept as a bitmap, lowest first."""

    mask_tail = staticmethod(_mask_tail)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._free = _Bitmap(self._blocks, self.mask_tail)  # type: ignore[assignment]


class BitmapTailMaskPool(BitmapPool):
    """BUG: with a multiple of 64 blocks, the last word's blocks are never free."""

    mask_tail = staticmethod(_mask_tail_always)


class _Ring:
    """The free blocks in a ring of slots: taken at ``head % n``, given at ``tail % n``; the
    counters grow without bound, or wrap at ``wrap`` (a C struct's field)."""

    def __init__(self, blocks: Sequence[Block], wrap: int | None) -> None:
        self._slots = list(blocks)
        self._head, self._tail = 0, len(self._slots)
        self._wrap = wrap
        if wrap is not None:
            self._tail %= wrap

    def _next(self, counter: int) -> int:
        return counter + 1 if self._wrap is None else (counter + 1) % self._wrap

    def __len__(self) -> int:
        count = self._tail - self._head
        return count if self._wrap is None else count % self._wrap

    def popleft(self) -> Block:
        if not len(self):
            raise IndexError("pop from an empty ring")
        block = self._slots[self._head % len(self._slots)]
        self._head = self._next(self._head)
        return block

    def append(self, block: Block) -> None:
        self._slots[self._tail % len(self._slots)] = block
        self._tail = self._next(self._tail)

    def __iter__(self) -> Iterator[Block]:
        for k in range(len(self)):
            yield self._slots[(self._head + k) % len(self._slots)]

    def __bool__(self) -> bool:
        return bool(len(self))


class RingPool(CondvarPool):
    """Correct: the free blocks in a ring with counters that grow without bound."""

    wrap: int | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._free = _Ring(self._blocks, self.wrap)  # type: ignore[assignment]


class Ring8BitPool(RingPool):
    """BUG: the ring's counters are 8 bits: past 256 takes, ``head % n`` jumps back unless the
    pool's size divides 256, and a slot already taken is read again."""

    wrap = 256


class PowerOfTwoPool(CondvarPool):
    """Correct, and refuses a size that is not a power of two (a ring indexed by a mask): the
    ladder leaves such sizes out, no finding."""

    def __init__(self, num_blocks: int, *args: Any, **kwargs: Any) -> None:
        if num_blocks < 1 or num_blocks & (num_blocks - 1):
            raise ValueError(f"num_blocks must be a power of two, got {num_blocks}")
        super().__init__(num_blocks, *args, **kwargs)
