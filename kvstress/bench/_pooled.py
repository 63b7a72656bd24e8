"""The pooled path: each request takes its blocks from one ThreadedBlockPool, under an overload policy."""

from __future__ import annotations

import time

from kvstress.bench._config import OverloadPolicy, WorkloadConfig
from kvstress.bench._kv import block_fills, kv_value, write_tokens
from kvstress.bench._load import Request
from kvstress.bench._result import Outcome, RequestResult, Tally
from kvstress.pool import Block, ThreadedBlockPool


class PooledPath:
    """Serves a request block by block from ``pool``: acquire, mark in use, write, hold, release all.

    Invariant: every block an attempt took is released when the attempt ends, whatever the
    outcome, so the pool is whole again once the last request has been served.
    """

    name = "pooled"

    def __init__(self, pool: ThreadedBlockPool, config: WorkloadConfig) -> None:
        self._pool = pool
        self._policy = config.policy
        self._timeout = config.queue_timeout_s
        self._max_attempts = config.max_attempts
        self._sink = config.sink_blocks
        self._window = config.window_blocks
        self._block_tokens = config.block_tokens

    def serve(self, request: Request, origin: float) -> RequestResult:
        """Serve one request (timed from ``origin``, a ``time.perf_counter`` reading)."""
        start = time.perf_counter()
        tally = Tally()
        outcome = Outcome.GAVE_UP
        while tally.attempts < self._max_attempts:
            tally.attempts += 1
            ended = self._attempt(request, tally)
            if ended is not None:
                outcome = ended
                break
        return tally.result(request, outcome, start - origin, time.perf_counter() - origin)

    def _attempt(self, request: Request, tally: Tally) -> Outcome | None:
        """One try at the whole request; None when a queue wait timed out (preempted: try again)."""
        held: list[tuple[Block, int]] = []
        written = 0
        try:
            for tokens in block_fills(request.tokens, self._block_tokens):
                began = time.perf_counter()
                block = self._next_block(held, tally)
                tally.acquire_s += time.perf_counter() - began
                if block is None and self._policy is OverloadPolicy.REJECT:
                    tally.written = written
                    return Outcome.REJECTED
                if block is None:
                    tally.redone += written
                    return None
                self._pool.mark_in_use(block)
                write_tokens(block.data, tokens, kv_value(request.index))
                held.append((block, tokens))
                written += tokens
            tally.written = written
            time.sleep(request.hold_s)
            return Outcome.COMPLETED
        finally:
            for block, _ in held:
                self._pool.release(block)

    def _next_block(self, held: list[tuple[Block, int]], tally: Tally) -> Block | None:
        """A free block now, or what the policy makes of an empty pool (None: give up)."""
        block = self._pool.acquire(0)
        if block is not None:
            return block
        tally.waits += 1
        if self._policy is OverloadPolicy.REJECT:
            return None
        if self._policy is OverloadPolicy.TRUNCATE:
            block = self._truncate(held, tally)
            if block is not None:
                return block
        block = self._pool.acquire(self._timeout)
        if block is None:
            tally.timeouts += 1
        return block

    def _truncate(self, held: list[tuple[Block, int]], tally: Tally) -> Block | None:
        """Give back the oldest block between the sinks and the window until one can be taken.

        Every block given back is counted (truncation changes what the model attends to, so it
        is never silent). None when nothing is left to cut and the pool is still empty.
        """
        while len(held) > self._sink + self._window:
            block, tokens = held.pop(self._sink)
            self._pool.release(block)
            tally.truncations += 1
            tally.truncated += tokens
            taken = self._pool.acquire(0)
            if taken is not None:
                return taken
        return None
