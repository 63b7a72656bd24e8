"""Mutants of ``ClhQueuePool`` (threads, AQS-style queue of parked waiters): each plants one bug;
``# BUG`` marks it.

``expected`` names the invariant ids a good harness may report for the bug: the one it causes
first, and the ones its consequences show as when a check meets them first.
"""

from __future__ import annotations

from kvstress.mutants._clh_pool import ClhQueuePool, Node

_LOST = ("lost-wakeup", "hang", "timeout-late")


class ClhNoPropagatePool(ClhQueuePool):
    """Java 6's shared release, before JDK-6801020: a release wakes the head's successor only
    when the head's status is set, and a new head propagates only when it saw a block left.
    Two releases in a row, two waiters: the first wakes waiter 1, who takes the last block it
    sees; the second finds the head's status spent and wakes nobody; waiter 1 becomes the head
    and, having seen none left, wakes nobody: waiter 2 sleeps beside a free block."""

    expected = _LOST

    def _release_shared(self) -> None:
        head = self._head
        if head.status != 0:  # BUG: a spent wake-up is not marked PROPAGATE
            self._unpark_successor(head)

    def _set_head_and_propagate(self, node: Node, left: int) -> None:
        self._head = node
        node.prev = None
        if left > 0 and node.status != 0:  # BUG: only when it saw a block left
            self._unpark_successor(node)
