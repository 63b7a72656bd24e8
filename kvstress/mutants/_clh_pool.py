"""A correct threaded pool on a queue of parked waiters, as Java's AbstractQueuedSynchronizer
runs a ``Semaphore``: the free blocks are the permits.

A waiter that finds no block joins a CLH queue of nodes, marks its predecessor SIGNAL (wake me)
and parks on its own event. A release queues the block and wakes the head's successor; the
waiter that takes a block becomes the head and, when a block may be left, wakes the next
(``_set_head_and_propagate``). A waiter that times out marks its node CANCELLED and passes on
whatever wake-up it got. This is Java 7's protocol, with the PROPAGATE status that JDK-6801020
added: a release that finds the head's status 0 (its wake-up already spent) sets PROPAGATE, so
the waiter it woke, on becoming the head, wakes the next as well (``ClhNoPropagatePool`` is the
bug without it).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from kvstress.mutants._block import Block, seconds
from kvstress.mutants._polling_pool import PollingCasPool

SIGNAL, PROPAGATE, CANCELLED = -1, -3, 1
"""A node's status: its successor is parked and must be woken; a release found the wake-up spent
and the next head must propagate; it timed out. 0: none of these."""


class Node:
    """One waiter in the queue, or the head (the last waiter served, or the first dummy)."""

    __slots__ = ("event", "next", "prev", "status")

    def __init__(self) -> None:
        self.status = 0
        self.prev: Node | None = None
        self.next: Node | None = None
        self.event = threading.Event()  # LockSupport's permit: park waits for it, unpark sets it


class ClhQueuePool(PollingCasPool):
    """Threads. The free ids sit in a deque (``PollingCasPool``'s); the waiters in a CLH queue
    from ``_head`` to ``_tail``. Python has no CAS: ``_atomic`` stands for one, and every write
    of a node's status goes through it (a plain write could land between another thread's
    compare and its set, and undo a CANCELLED).

    Invariants: a parked waiter's predecessor is SIGNAL, so the release or the cancellation that
    makes it the head's successor wakes it; a waiter looks for a block once more after it marked
    SIGNAL and before it parks, so a release between is not lost; a cancelled waiter wakes its
    successor, so a wake-up it took and never used goes on.
    """

    backoff_bound = 0.0  # waiters are woken, never poll

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._atomic = threading.Lock()
        self._head = self._tail = Node()

    def acquire(self, timeout: float | None = None) -> Block | None:
        """A FREE block, returned ACQUIRED with refcount 1 and zeroed; None after ``timeout`` s."""
        limit = seconds(timeout)
        deadline = None if limit is None else time.monotonic() + limit
        block, _ = self._try_take()
        if block is not None:
            return self._claim(block)
        if limit == 0:
            return None
        node = self._enqueue()
        while True:
            pred = node.prev
            assert pred is not None  # only the head has none, and a waiter is not the head
            if pred is self._head:
                block, left = self._try_take()
                if block is not None:
                    self._set_head_and_propagate(node, left)
                    pred.next = None
                    return self._claim(block)
            status = pred.status
            if status == CANCELLED:  # skip it: the node before it is waited on instead
                node.prev = pred.prev
                assert pred.prev is not None
                pred.prev.next = node
                continue
            if status != SIGNAL:
                self._cas_status(pred, status, SIGNAL)
                continue  # look once more before parking
            if deadline is None:
                node.event.wait()
            else:
                left_s = deadline - time.monotonic()
                if left_s <= 0:
                    self._cancel(node)
                    return None
                node.event.wait(left_s)
            node.event.clear()

    # -- the synchronizer ---------------------------------------------------------------------

    def _push(self, block: Block) -> None:
        with self._atomic:
            self._free.append(block.id)
        self._add_count(+1)
        self._release_shared()

    def _try_take(self) -> tuple[Block | None, int]:
        """Java's ``tryAcquireShared``: a block and how many are left then, or (None, -1)."""
        with self._atomic:
            if not self._free:
                return None, -1
            block_id = self._free.popleft()
            left = len(self._free)
        self._add_count(-1)
        return self._blocks[block_id], left

    def _cas_status(self, node: Node, expected: int, new: int) -> bool:
        with self._atomic:
            if node.status != expected:
                return False
            node.status = new
            return True

    def _enqueue(self) -> Node:
        node = Node()
        with self._atomic:
            node.prev = self._tail
            self._tail.next = node
            self._tail = node
        return node

    def _unpark_successor(self, node: Node) -> None:
        """Wake the first waiter after ``node`` that has not timed out."""
        status = node.status
        if status < 0:
            self._cas_status(node, status, 0)
        successor = node.next
        if successor is None or successor.status == CANCELLED:
            successor = None
            walk: Node | None = self._tail
            while walk is not None and walk is not node:  # from the tail: ``next`` may lag
                if walk.status != CANCELLED:
                    successor = walk
                walk = walk.prev
        if successor is not None:
            successor.event.set()

    def _release_shared(self) -> None:
        """Java 7's ``doReleaseShared``: wake the head's successor, or, when its wake-up is
        spent (status 0), mark the head PROPAGATE; again while the head changes under it."""
        while True:
            head = self._head
            if head is not self._tail:
                status = head.status
                if status == SIGNAL:
                    if not self._cas_status(head, SIGNAL, 0):
                        continue
                    self._unpark_successor(head)
                elif status == 0 and not self._cas_status(head, 0, PROPAGATE):
                    continue
            if head is self._head:
                return

    def _set_head_and_propagate(self, node: Node, left: int) -> None:
        old = self._head
        self._head = node
        node.prev = None
        if left > 0 or old.status < 0 or node.status < 0:
            self._release_shared()

    def _cancel(self, node: Node) -> None:
        with self._atomic:
            node.status = CANCELLED
        self._unpark_successor(node)  # a wake-up it took goes to the next in line
