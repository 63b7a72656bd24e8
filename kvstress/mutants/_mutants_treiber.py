"""Mutants of ``TreiberPool`` (threads, a lock-free stack of free blocks): each plants one bug;
``# BUG`` marks it.

``expected`` names the invariant ids a good harness may report for the bug: the one it causes
first, and the ones its consequences show as when a check meets them first.
"""

from __future__ import annotations

from kvstress.mutants._block import Block
from kvstress.mutants._treiber_pool import TreiberPool

_CORRUPT = ("queue-corruption", "shared-block", "crash", "counter-mismatch", "lost-block", "dirty-read")


class TreiberPointerCasPool(TreiberPool):
    """The head's CAS compares the block id and not the stamp: a pop paused after it read the
    head and its link, while others pop that block and the one below and push the first back,
    swaps the head to the link it read, a block now held (ABA on a Treiber stack)."""

    expected = _CORRUPT

    def _cas_top(self, seen: tuple[int, int], head: int) -> bool:
        with self._head_lock:
            if self._top[0] != seen[0]:  # BUG: the stamp is not compared
                return False
            self._top = (head, self._top[1] + 1)
            return True


class TreiberLinkAfterPublishPool(TreiberPool):
    """Push publishes the block as the head first and links it to the old head after: a pop in
    between reads the block's stale link, from its last time on the stack."""

    expected = _CORRUPT

    def _push(self, block: Block) -> None:
        while True:
            top = self._top
            if self._cas_top(top, block.id):
                self._below[block.id] = top[0]  # BUG: linked after it is published
                self._add_count(+1)
                return
