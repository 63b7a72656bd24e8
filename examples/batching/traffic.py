"""A fixed burst of traffic against the batching loop, on an audited pool.

Clients arrive, time out and disconnect at given engine steps: each reacts when the step that
concerns it ends. On plain asyncio every reaction runs between two steps, in the loop's FIFO
order, whatever the machine's speed (nothing here waits on a timer). Under kvstress_explore
a reaction may run in the middle of the next step, between two of its awaits: the orders where
the planted bugs bite.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from engine import Engine

import kvstress


@dataclass(frozen=True)
class Client:
    """One client: at which step it sends, what, and when it gives up (in steps, None: never)."""

    start: int
    prompt_blocks: int
    max_steps: int
    prefix: str | None = None
    timeout: int | None = None
    disconnect: int | None = None  # the step at which its connection drops (its task is cancelled)


TRAFFIC = (
    Client(0, 2, 6),
    Client(0, 2, 6),
    Client(0, 2, 5, timeout=3),
    Client(0, 2, 4, prefix="system", disconnect=3),
    Client(3, 2, 2, prefix="system"),
    Client(1, 3, 2, timeout=4),
    Client(2, 1, 3, timeout=6),
    Client(10, 2, 6, prefix="chat", disconnect=14),
    Client(14, 2, 2, prefix="chat"),
)
BLOCKS = 9


async def serve(engine_type: type[Engine] = Engine, traffic: tuple[Client, ...] = TRAFFIC) -> list[str]:
    """Run ``traffic`` through a fresh ``engine_type`` on an audited pool; each client's outcome.

    Raises what the engine or a client raised, or ``kvstress.InvariantViolation`` from the
    audit (a double release, a stale handle, a leak found at close).
    """
    async with kvstress.audit(kvstress.AsyncBlockPool(BLOCKS, (4,))) as pool:
        engine = engine_type(pool, max_steps=20_000)
        clients = [
            asyncio.create_task(_client(engine, client), name=f"client-{index}")
            for index, client in enumerate(traffic)
        ]
        drops = [
            asyncio.create_task(_drop(engine, task, client.disconnect), name=f"drop-{index}")
            for index, (task, client) in enumerate(zip(clients, traffic, strict=True))
            if client.disconnect is not None
        ]
        runner = asyncio.create_task(engine.run(), name="engine")
        await _first_failure([*clients, *drops, runner], clients)
        engine.stop()
        await runner
        return ["disconnected" if task.cancelled() else task.result() for task in clients]


async def _drop(engine: Engine, client: asyncio.Task[str], step: int) -> None:
    """The client's connection drops once the engine has run ``step`` steps."""
    await engine.until(step)
    client.cancel()


async def _client(engine: Engine, client: Client) -> str:
    await engine.until(client.start)
    timeout = client.timeout
    try:
        request = await engine.generate(
            client.prompt_blocks, client.max_steps, prefix=client.prefix, timeout=timeout
        )
    except TimeoutError:
        return "timed out"
    return f"{request.steps_done} steps"


async def _first_failure(tasks: list[asyncio.Task[object]], clients: list[asyncio.Task[str]]) -> None:
    """Wait for every client; raise at once what any task raised (cancelling the rest)."""
    pending = set(tasks)
    while any(not task.done() for task in clients):
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if not task.cancelled() and task.exception() is not None:
                for other in pending:
                    other.cancel()
                raise task.exception()  # type: ignore[misc]
