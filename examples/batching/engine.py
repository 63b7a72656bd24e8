"""A small continuous-batching loop on a kvstress block pool: the code under test of this example.

Requests wait in a queue. At every step the engine admits waiting requests whose prompt fits in
the pool (sharing a cached prefix block when one is held), then runs one decode step of every
running request at once; every ``block_every`` steps a request needs one more block, and when the
pool has none the most recently admitted request is preempted (its blocks freed, its request
requeued at the front, recomputed on readmission). Clients wait for their request with a timeout
(counted in engine steps, the engine's clock) and drop it when they time out or disconnect
(their task is cancelled).

Who frees a request's blocks, exactly once:

- a waiting request holds none; the admission that gives it blocks frees them again if the
  request was aborted or preempted while it waited on the pool;
- a running request outside its step is freed by whoever ends it: ``abort`` or ``_preempt``;
- a running request inside its step (``in_step``) is freed by that step's ``finally``:
  ``abort`` only marks it.

Each block has one reference per request that lists it in its table: a request that shares a
cached prefix block ``retain``s it before any await, so the holder's release cannot free it
under the sharer.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
from collections import deque
from dataclasses import dataclass, field
from typing import Any


class Status(enum.Enum):
    """Where a request is: its transitions are WAITING -> RUNNING -> FINISHED, RUNNING -> WAITING
    (preempted), and WAITING or RUNNING -> ABORTED."""

    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"
    ABORTED = "aborted"


@dataclass(eq=False)
class Request:
    """One generation: ``prompt_blocks`` blocks of prompt, then ``max_steps`` decode steps.

    Invariant: a WAITING request's ``table`` is empty; a RUNNING one's holds
    ``prompt_blocks + steps_done // block_every`` blocks, its first the prefix block when
    ``prefix`` names one.
    """

    rid: int
    prompt_blocks: int
    max_steps: int
    prefix: str | None = None
    status: Status = Status.WAITING
    table: list[Any] = field(default_factory=list)
    steps_done: int = 0
    in_step: bool = False  # the engine is inside an await on this request's behalf
    preemptions: int = 0
    done: asyncio.Event = field(default_factory=asyncio.Event)


class Engine:
    """The batching loop over ``pool`` (a kvstress async pool, or ``kvstress.audit`` of one)."""

    def __init__(self, pool: Any, *, block_every: int = 2, max_steps: int = 1000) -> None:
        self.pool = pool
        self.block_every = block_every
        self.max_steps = max_steps
        self.step = 0  # steps run so far: the engine's clock
        self._tick = asyncio.Event()  # set (and replaced) at the end of every step
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []  # in admission order: the last is preempted first
        self.prefixes: dict[str, Any] = {}  # prefix -> its block, while some request holds it
        self._ids = itertools.count()
        self._stopping = False

    # -- the client side -----------------------------------------------------------------------

    async def generate(
        self, prompt_blocks: int, max_steps: int, *, prefix: str | None = None, timeout: float | None = None
    ) -> Request:
        """Submit a request and wait until it finishes; TimeoutError after ``timeout`` steps.

        A timeout or a cancellation (the client disconnected) aborts the request.
        """
        request = Request(next(self._ids), prompt_blocks, max_steps, prefix)
        self.waiting.append(request)
        deadline = None if timeout is None else self.step + timeout
        try:
            while not request.done.is_set():
                if deadline is not None and self.step >= deadline:
                    raise TimeoutError(f"request {request.rid} not done within {timeout} steps")
                await self._tick.wait()
        finally:
            if not request.done.is_set():
                await self.abort(request)
        return request

    async def abort(self, request: Request) -> None:
        """Drop ``request``: its client is gone. A request inside its step is freed by the step."""
        if request.status in (Status.FINISHED, Status.ABORTED):
            return
        self._forget(request)
        request.status = Status.ABORTED
        if not request.in_step:
            await self._free(request)

    async def until(self, step: int) -> None:
        """Return once the engine has run ``step`` steps."""
        while self.step < step:
            await self._tick.wait()

    def stop(self) -> None:
        """Let ``run`` return once no request waits or runs."""
        self._stopping = True

    # -- the loop ------------------------------------------------------------------------------

    async def run(self) -> None:
        """Admit, decode, tick; until ``stop`` and idle. RuntimeError after ``max_steps`` steps."""
        while not (self._stopping and not self.waiting and not self.running):
            if self.step >= self.max_steps:
                raise RuntimeError(f"the engine ran {self.max_steps} steps and its traffic never ended")
            await self._admit()
            await asyncio.gather(*(self._decode(request) for request in list(self.running)))
            self.step += 1
            tick, self._tick = self._tick, asyncio.Event()
            tick.set()
            await self._forward()

    async def _forward(self) -> None:
        """The next forward pass on the device: launched, then awaited (zero time here)."""
        await asyncio.sleep(0)
        await asyncio.sleep(0)

    async def _admit(self) -> None:
        for request in list(self.waiting):
            if request.status is not Status.WAITING:
                continue  # aborted while an earlier request was being admitted
            request.in_step = True
            try:
                blocks = await self._allocate(request)
            finally:
                request.in_step = False
            if request.status is Status.ABORTED:
                continue  # _allocate gave its blocks back
            if blocks is None:
                return  # the pool is short: admit in order, so the rest waits too
            self.waiting.remove(request)
            request.table, request.status = blocks, Status.RUNNING
            self.running.append(request)

    async def _allocate(self, request: Request) -> list[Any] | None:
        """The request's blocks (None when the pool is short or the request was aborted)."""
        blocks: list[Any] = []
        shared = self._share_prefix(request)
        if shared is not None:
            blocks.append(shared)
        needed = request.prompt_blocks + request.steps_done // self.block_every
        while len(blocks) < needed:
            block = await self.pool.acquire(timeout=0)
            if block is not None:
                blocks.append(block)
            if request.status is Status.ABORTED:
                await self._abandon(request, blocks)
                return None
            if block is None:
                await self._release(request, blocks)
                return None
            block.data.fill_(request.rid + 1)  # the prompt's KV
        if request.prefix is not None and shared is None:
            self.prefixes[request.prefix] = blocks[0]
        return blocks

    def _share_prefix(self, request: Request) -> Any | None:
        """The cached block of the request's prefix, with a reference taken for the request."""
        shared = self.prefixes.get(request.prefix) if request.prefix is not None else None
        if shared is not None:
            self.pool.retain(shared)  # before any await: the holder may release it meanwhile
        return shared

    async def _abandon(self, request: Request, blocks: list[Any]) -> None:
        """The request was aborted while its blocks were being gathered: give them back."""
        await self._release(request, blocks)

    async def _decode(self, request: Request) -> None:
        if request.status is not Status.RUNNING:
            return  # preempted or aborted by an earlier request of this step
        request.in_step = True
        try:
            grows = request.steps_done and request.steps_done % self.block_every == 0
            if grows and not await self._grow(request):
                return
            request.table[-1].data.add_(1)  # this step's KV
            request.steps_done += 1
            if request.steps_done == request.max_steps:
                request.status = Status.FINISHED
                self.running.remove(request)
                await asyncio.sleep(0)  # the last chunk goes out to the client
        finally:
            request.in_step = False
            if request.status in (Status.FINISHED, Status.ABORTED):
                await self._free(request)
            if request.status is Status.FINISHED:
                request.done.set()

    async def _grow(self, request: Request) -> bool:
        """One more block for ``request``, preempting the youngest request while the pool has none.

        False when ``request`` itself was preempted or aborted: it has no step to run.
        """
        while True:
            block = await self.pool.acquire(timeout=0)
            if block is not None:
                return await self._claim(request, block)
            if request.status is not Status.RUNNING:
                return False
            victim = self.running[-1]
            await self._preempt(victim)
            if victim is request:
                return False

    async def _claim(self, request: Request, block: Any) -> bool:
        """Append a block the pool just gave, unless the request stopped running meanwhile."""
        if request.status is not Status.RUNNING:
            await self.pool.release(block)  # preempted or aborted while we waited: not its block
            return False
        request.table.append(block)
        return True

    async def _preempt(self, victim: Request) -> None:
        self.running.remove(victim)
        victim.status = Status.WAITING
        victim.preemptions += 1
        self.waiting.appendleft(victim)
        await self._free(victim)

    # -- freeing -------------------------------------------------------------------------------

    def _forget(self, request: Request) -> None:
        if request in self.waiting:
            self.waiting.remove(request)
        if request in self.running:
            self.running.remove(request)

    async def _free(self, request: Request) -> None:
        """Release the request's table (taken first, so nobody frees it twice)."""
        table, request.table = request.table, []
        await self._release(request, table)

    async def _release(self, request: Request, blocks: list[Any]) -> None:
        for block in blocks:
            last = await self.pool.release(block)
            if last and request.prefix is not None and self.prefixes.get(request.prefix) is block:
                del self.prefixes[request.prefix]  # back in the pool: no longer a cached prefix
