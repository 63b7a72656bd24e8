"""The operations the driver performs, each written once as a coroutine, with their checks.

On an async pool an operation runs as a task on the example's event loop; on a threaded pool it
runs on the holder's own thread, where it never suspends (``run_to_completion``). The state the
operations share is declared here and set up by ``PoolDriver``.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import threading
import time
import traceback
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from kvstress import checkers
from kvstress._format import error_text
from kvstress._interrupts import passes_through
from kvstress._violation import InvariantViolation
from kvstress.checkers import TimingPolicy
from kvstress.controlled._coop import excused_seconds
from kvstress.controlled._foreign import outside_threads_watched
from kvstress.controlled._thread_work import run_host
from kvstress.harness._cpu import excused_wall_seconds, thread_cpu_without_gc
from kvstress.harness._history import History
from kvstress.harness._ledger import Ledger
from kvstress.harness._runner import LoopThread, Suspensions, ThreadWorker
from kvstress.linearize._model import may_linger, served_until
from kvstress.pool._state import BlockState

SETTLE_EXCUSED_CAP_S = 2.0
"""Seconds of excused time (see ``_settled``) past its bound that a quiet point waits at most
for a pool to come to rest."""


class Operations:
    """Protocol operations for named holders, each checked as it returns."""

    pool: Any
    num_blocks: int
    timing: TimingPolicy
    backoff_bound: float
    history: History
    ledger: Ledger
    loop: LoopThread | None
    is_async: bool  # the pool's acquire is a coroutine function: operations run as tasks
    sequential: bool  # False while several operations may be in flight
    virtual_time: bool  # the clock is virtual: no GC time to discount, no CPU to measure
    clock: Callable[[], float] | None = None  # the harness clock; None: the loop's, or monotonic
    thread_pause: Callable[[float], None] = staticmethod(time.sleep)  # a threaded pause step
    thread_event: Callable[[], Any] = staticmethod(threading.Event)  # what a threaded "wait" parks on
    _workers: dict[str, ThreadWorker]
    release_calls: int = 0  # releases called so far, by anyone
    deferring: bool = False  # the pool finished a release after it returned (_offer_deferred, _settled)
    _last_stamp: float = float("-inf")

    def _count_release(self) -> None:
        with self.ledger.lock:
            self.release_calls += 1

    async def op_acquire(self, holder: str, timeout: float | None) -> int | None:
        """acquire, then: a valid id nobody holds, ACQUIRED, refcount 1, zeros, timing."""
        # The excused count is read first and last, around the clock's reads (the history's stamps
        # included): where the clock runs on between two reads (a trio run following real time
        # while a thread works), the time excused then covers the time measured, never a
        # microsecond less (a try-once was late, a waiter read as waiting beside a free block).
        excused0 = self._excused_now()
        index = self.history.begin(holder, "acquire", {"timeout": timeout}, self._stamp())
        cpu0, releases0 = self._cpu(), self.release_calls
        start = self._now()
        real0 = time.perf_counter()
        block, suspensions = await self._call(index, "acquire", self.pool.acquire, timeout, count=True)
        # The call's end, before the block's fields are read: a property is the pool's code,
        # where another thread runs and virtual time may jump, and the wake-up check must not
        # count that as time the acquire kept waiting.
        returned = self._stamp()
        elapsed, cpu = self._now() - start, self._cpu_since(cpu0)
        # Lateness is judged without garbage collection or OS stalls (no Python code, the
        # pool's included, runs meanwhile); earliness and CPU per second waited on the plain wall clock.
        excused = self._excused_since(excused0)
        busy = elapsed - excused
        if suspensions is not None:
            # Each release may wake a waiter that then loses the block to another: those
            # wake-ups are earned. Only the ones no release explains can be spinning.
            suspensions = max(0, suspensions - 2 * (self.release_calls - releases0) - 4)
        observed: dict[str, Any] = {"elapsed_s": elapsed}
        if excused > 0:
            observed["excused_s"] = excused  # for the wake-up check of the whole history
        if block is None:
            self.history.end(index, returned, "info", None, observed)
            waited = self._waited(elapsed, real0)
            checkers.check_timeout(timeout, False, waited, busy, self.backoff_bound, self.timing)
            checkers.check_parking(elapsed, cpu, suspensions, self.timing)
            # Only a try-once is judged here: on real time a timed acquire may time out before
            # its task ever runs (a loaded machine, a pool that checkpoints before it looks);
            # a block really lost fails the try-once of the drain that ends every run.
            free = self.num_blocks - len(self.ledger.open)
            if self.sequential and timeout == 0 and free > 0 and not await self._excused_refusal(index):
                raise InvariantViolation(
                    "lost-block",
                    f"acquire(timeout={timeout}) returned None although {free} block(s) are held by "
                    f"nobody and every release has returned{await self._where_unheld(index)}",
                )
            return None
        block_id = self._read(index, block, "id")
        clash = self.ledger.take(holder, block_id, block) if isinstance(block_id, int) else ()
        observed["state"], observed["refcount"] = self._state(block).name, self._refcount(block)
        self.history.end(index, returned, "ok", block_id, observed)
        checkers.check_acquired(block_id, self.num_blocks, clash.holders if clash else ())
        checkers.check_zeroed(block_id, self._read(index, block, "data"))
        checkers.check_fresh_state(block_id, BlockState[observed["state"]], observed["refcount"])
        checkers.check_timeout(timeout, True, elapsed, busy, self.backoff_bound, self.timing)
        checkers.check_parking(elapsed, cpu, suspensions, self.timing)
        return int(block_id)

    async def op_mark(self, holder: str, block_id: int) -> None:
        """mark_in_use, then: IN_USE."""
        handle = self.ledger.handles[block_id]
        index = self.history.begin(holder, "mark_in_use", {"block": block_id}, self._stamp())
        await self._call(index, "mark_in_use", self.pool.mark_in_use, handle)
        self.history.end(index, self._stamp(), "ok")
        self.ledger.open[block_id].marked = True
        checkers.check_state(block_id, self._state(handle), BlockState.IN_USE, "mark_in_use")

    async def op_write(self, holder: str, block_id: int) -> None:
        """Write a fresh canary over the whole block."""
        canary = self.ledger.next_canary()
        index = self.history.begin(holder, "write", {"block": block_id, "canary": canary}, self._stamp())
        self._read(index, self.ledger.handles[block_id], "data").fill_(canary)
        self.ledger.open[block_id].canary = canary
        self.history.end(index, self._stamp(), "ok")

    async def op_verify(self, holder: str, block_id: int) -> None:
        """The canary is intact."""
        tenancy = self.ledger.open[block_id]
        if tenancy.canary is None:
            return
        index = self.history.begin(holder, "verify", {"block": block_id}, self._stamp())
        data = self._read(index, self.ledger.handles[block_id], "data")
        self.history.end(index, self._stamp(), "ok")
        checkers.check_canary(block_id, data, tenancy.canary, holder)

    async def op_share(self, holder: str, block_id: int, to_holder: str) -> None:
        """retain, then (alone) refcount + 1."""
        handle = self.ledger.handles[block_id]
        index = self.history.begin(holder, "retain", {"block": block_id, "for": to_holder}, self._stamp())
        await self._call(index, "retain", self.pool.retain, handle)
        self.history.end(index, self._stamp(), "ok")
        # Read before the ledger hands the reference over: reading may run the pool's code (a
        # property), where another thread can run, and the peer must not release it before.
        refcount = self._refcount(handle)
        tenancy = self.ledger.share(block_id, to_holder)
        if self.sequential:
            checkers.check_refcount(block_id, refcount, tenancy.total_refs, "retain")
        else:
            # Others may release their references meanwhile, but not the two this retain is
            # about: the caller's own and the one just handed over (not in the ledger yet).
            checkers.check_refcount_at_least(block_id, refcount, 2, f"a retain by {holder}")
        # Only now may the peer run with its reference (and release it): the checks above read
        # a refcount that its release would lower.
        self._handed(to_holder).set()

    async def op_release(self, holder: str, block_id: int) -> bool:
        """Verify the canary, release; alone: True exactly for the last reference, refcount - 1."""
        await self.op_verify(holder, block_id)
        return await self._release_verified(holder, block_id)

    async def op_release_in_cancelled_scope(self, holder: str, block_id: int) -> None:
        """(async, a pool that speaks anyio or trio) release from inside a cancel scope already
        cancelled, as a trio or anyio cleanup path without a shield calls it: every checkpoint
        there raises the cancellation at once. A release that completes without awaiting takes
        effect; one cancelled at an await before it changed anything leaves the reference with
        its holder; one that changed the block and then awaited leaves it half-released, which
        the quiet check reports (``lost-block``)."""
        await self.op_verify(holder, block_id)
        with anyio.CancelScope() as scope:
            scope.cancel()
            await self._release_verified(holder, block_id)

    async def _release_verified(self, holder: str, block_id: int) -> bool:
        handle = self.ledger.handles[block_id]
        tenancy = self.ledger.open[block_id]
        last = self.ledger.give_up(holder, block_id)
        self._count_release()
        index = self.history.begin(holder, "release", {"block": block_id}, self._stamp())
        returned = await self._release_call(
            index,
            block_id,
            handle,
            # A double release racing this one was the release: this one is the double, refused
            # by raising (op_racing_release). Had neither put the block back, the quiet check
            # finds it lost.
            refused=lambda: self._raced(block_id),
            cancelled=lambda: self._settle_cancelled_release(holder, tenancy, handle, last, index),
        )
        if returned is _REFUSED:
            return False
        self._judge_release(block_id, handle, returned, last)
        return bool(returned)

    def _judge_release(self, block_id: int, handle: Any, returned: object, last: bool) -> None:
        """Alone (sequential), a release answers True exactly for the last reference, and one
        that is not the last leaves the refcount at the references still held."""
        if self.sequential:
            checkers.check_release_result(block_id, returned, last)
            if not last:
                remaining = self.ledger.open[block_id].total_refs
                checkers.check_refcount(block_id, self._refcount(handle), remaining, "release")

    async def _release_call(
        self,
        index: int,
        block_id: int,
        handle: Any,
        *,
        refused: Callable[[], bool],
        cancelled: Callable[[], None] | None = None,
    ) -> object:
        """Release ``handle`` for history operation ``index``, counted among the releases of
        ``block_id`` in flight; the pool's answer, or ``_REFUSED`` when it raised an exception
        that ``refused()`` takes for refusing a double release. ``cancelled`` settles the ledger
        when the call is cancelled."""
        with self.ledger.lock:
            self.ledger.releasing[block_id] += 1
        try:
            try:
                returned = await self._call(index, "release", self.pool.release, handle)
            except InvariantViolation as crash:
                if not (_refusal(crash) and refused()):
                    raise
                return _REFUSED
            except Exception:
                raise
            except BaseException:  # cancelled: settle the ledger by what the pool shows
                if cancelled is not None:
                    cancelled()
                raise
            self.history.end(index, self._stamp(), "ok", returned, self._offer_deferred(returned, handle))
            if returned is True:
                with self.ledger.lock:
                    self.ledger.returned[block_id] += 1
            return returned
        finally:
            self._release_over(block_id, handle)

    def _settle_cancelled_release(
        self, holder: str, tenancy: Any, handle: Any, last: bool, index: int
    ) -> None:
        """A release cancelled before it took effect leaves the reference with its holder; one
        cancelled after took it. A block left half-released (RELEASING, neither held nor
        queued) is what the quiet check then reports.

        Untouched means the block still looks as this tenancy left it (held, in the state it
        was marked to) and no one else's tenancy of it has begun: a pool may offer the block
        before the cancellation lands (at an await after the offer), and a peer that took it
        meanwhile holds a block that looks held by one reference too. Then the pool's refcount
        says which: the references the ledger still counts, plus this one if it stayed. While
        other sharers' releases of the block are in flight, the pool may or may not have counted
        theirs yet, so the answer waits until the last of them returns (``_release_over``)."""
        block_id = tenancy.block_id
        with self.ledger.lock:
            others = self.ledger.releasing[block_id] - 1
            if others > 0 and self._untouched(tenancy, handle):
                self.ledger.doubtful.setdefault(block_id, []).append((holder, tenancy, index))
                return
        if self._stayed(holder, tenancy, handle, index):
            return
        with self.ledger.lock:
            if not last and self.ledger.open.get(block_id) is tenancy:
                return  # its reference went, and others still hold theirs: no True was due
            # The tenancy has ended, and this release took effect: its answer is lost, not its
            # effect. The last to be called or not, the pool may have taken it last (releases
            # that overlapped; one that waits out its own shielded part when cancelled: a blind
            # user's correct pool, reported as lost-block), or another may have: a True missing
            # once no other release of the block is in flight is this one's.
            if self.ledger.releasing[block_id] > 1:
                self.ledger.doubtful.setdefault(block_id, []).append((holder, tenancy, index))
            elif self.ledger.returned[block_id] < self.ledger.ended[block_id]:
                self.ledger.returned[block_id] += 1

    def _untouched(self, tenancy: Any, handle: Any) -> bool:
        with contextlib.suppress(Exception):
            expected = BlockState.IN_USE if tenancy.marked else BlockState.ACQUIRED
            current = self.ledger.open.get(tenancy.block_id)
            return self._state(handle) is expected and current in (None, tenancy)
        return False

    def _stayed(self, holder: str, tenancy: Any, handle: Any, index: int) -> bool:
        """Whether a cancelled release (history operation ``index``) left its reference with
        ``holder`` (no release of the block in flight but its own): if so, the ledger takes the
        reference back, and the history says so (``kept``: the linearizability model then
        takes the release for one that changed nothing, not one that may have freed the block)."""
        with self.ledger.lock, contextlib.suppress(Exception):
            current = self.ledger.open.get(tenancy.block_id)
            counted = current.total_refs if current is tenancy else 0
            if self._untouched(tenancy, handle) and self._refcount(handle) > counted:
                self.ledger.undo_give_up(holder, tenancy)
                self.history.note(index, kept=True)
                return True
        return False

    def _release_over(self, block_id: int, handle: Any) -> None:
        """A release call of ``block_id`` returned (or raised): once none is in flight, settle the
        cancelled ones that waited on the others (``_settle_cancelled_release``)."""
        with self.ledger.lock:
            self.ledger.releasing[block_id] -= 1
            if self.ledger.releasing[block_id] > 0:
                return
            waiting = self.ledger.doubtful.pop(block_id, [])
        for holder, tenancy, index in waiting:
            if self._stayed(holder, tenancy, handle, index):
                continue
            with self.ledger.lock:
                # Every other release has answered: a True missing is this one's, lost.
                if self.ledger.returned[block_id] < self.ledger.ended[block_id]:
                    self.ledger.returned[block_id] += 1

    def _offer_deferred(self, returned: object, handle: Any) -> dict[str, Any]:
        """What a release that answered True shows of its block: still RELEASING means the pool
        finishes the release later, from a reset worker (a thread, a task, a stream callback).
        Such a release put the block back at some time after its return, and the
        linearizability model and the wake-up check treat it so. Read before the release's end
        is stamped, so a block seen offered was offered within the call."""
        if returned is True and self._state(handle) is BlockState.RELEASING:
            self.deferring = True
            self._on_its_way(handle)
            return {"deferred": True}
        return {}

    def _on_its_way(self, handle: Any) -> None:
        """Tell the controlled run this release ran in (an asyncio loop's, a trio run's), if any,
        that its block is on its way back for up to ``settle`` (the time the checks give such an
        offer) while the block reads RELEASING: a thread of the pool's own that zeroes it may
        sleep meanwhile (a 1 ms ``time.sleep`` to batch), asleep in the kernel with the block in
        hand, and the idle run moved virtual time to a waiter's timeout without it (correct
        pools' ``lost-wakeup`` and ``lost-block``, a blind user's, on asyncio and on trio)."""
        host = run_host("expect_offer")
        if host is None:
            return

        def pending() -> bool:
            with contextlib.suppress(Exception):
                return bool(handle.state == BlockState.RELEASING)
            return False

        host.expect_offer(pending, self.timing.settle)

    def _away(self, free_ids: list[int]) -> set[int]:
        """Blocks nobody holds that are not in the free queue ``free_ids``."""
        return checkers.on_its_way_back(self.num_blocks, self.ledger.open, free_ids)

    async def _read_free(self, index: int) -> tuple[int, list[int]]:
        free_count = await self._call(index, "free_count", self.pool.free_count)
        return free_count, id_list(await self._call(index, "free_ids", self.pool.free_ids))

    async def _settled(self, index: int) -> tuple[int, list[int]]:
        """``free_count()`` and ``free_ids()`` at a quiet point.

        A pool may finish a release after it returned (a reset worker zeroes the block and
        offers it a moment later): then, and only then, a quiet point can find a block on its
        way back, or the counter a step behind. So where the first reading is not at rest, the
        pool is read again until it is, for its backoff bound plus slack plus
        ``timing.settle``; a pool that came to rest meanwhile is one that defers
        (``deferring``), and one that never does is reported from the last reading. A pool at
        rest at once is read once, as always; the wait costs only runs that are about to fail.
        """
        free_count, free_ids = await self._read_free(index)
        if not self._away(free_ids) and free_count == len(free_ids):
            return free_count, free_ids
        # On real time a pool that has not shown it defers gets a moment only (unshown_settle).
        shown = self.deferring or self.virtual_time
        bound = self._settle_bound() if shown else self.timing.unshown_settle
        deadline = self._now() + bound
        # Time no code of the pool could run for (an OS stall; on a virtual clock, real time it
        # followed while a thread of the pool's own waited for a core) does not count against it,
        # up to a cap: a pool that keeps work out in a thread all the time (a compactor sorting
        # in an executor every 2 ms) had every second of the wait excused, and a block it lost
        # was waited for until the run's time limit, a "hang" (a blind user's).
        hard = deadline + max(SETTLE_EXCUSED_CAP_S, 4 * bound)
        excused0 = self._excused_now()
        pause = 1e-4
        while self._now() - self._excused_since(excused0) < deadline and self._now() < hard:
            await self._sleep(pause)
            pause = min(2 * pause, 0.01)
            free_count, free_ids = await self._read_free(index)
            if not self._away(free_ids) and free_count == len(free_ids):
                self.deferring = True
                break
        return free_count, free_ids

    async def _excused_refusal(self, index: int) -> bool:
        """A try-once that answered None while the ledger counts a block free: excused when some
        block nobody holds was not queued yet and all of them arrive within the settle bound
        (the pool finishes releases after they return). Blocks all queued at once mean the
        refusal had no excuse; blocks that never arrive are lost either way."""
        _, free_ids = await self._read_free(index)
        if not self._away(free_ids):
            return False
        _, free_ids = await self._settled(index)
        return not self._away(free_ids)

    async def _where_unheld(self, index: int) -> str:
        """Where the blocks nobody holds are, for a refused try-once's message: those missing
        from the free queue, with the state their handles show (one left RELEASING by a release
        cancelled halfway read as "every release has returned", a blind user's)."""
        try:
            _, free_ids = await self._read_free(index)
            away = sorted(self._away(free_ids))
            states = []
            for block_id in away:
                handle = self.ledger.handles.get(block_id)
                states.append((block_id, "never handed out" if handle is None else self._state(handle).name))
            shown = _runs(states)
        except Exception:  # the message must not fail the violation it belongs to
            return ""
        if not away:
            return f"; the free queue holds {free_ids}"
        cut = [
            op for op in self.history.snapshot() if op.name == "release" and op.outcome in ("info", "raised")
        ]
        hint = "; a release was cancelled or raised earlier" if cut else ""
        return f"; not in the free queue: {', '.join(shown)}{hint}"

    def gave_up_served(self) -> bool:
        """Whether the pool may still be serving an acquire that returned without a block,
        cancelled or timed out: a worker or a task of its own that waits for a block on the
        caller's behalf until the caller's deadline, takes one, finds the caller gone and gives
        it back within ``timing.settle`` (the linearizability model's ``may_linger`` and
        ``served_until``). A FIFO pool keeps a block it released for such a waiter, and a
        try-once meanwhile is refused with blocks in the queue: the run's end waits that out
        before it reads the pool at rest (``finish``)."""
        now = self._now()
        for op in self.history.snapshot():
            if may_linger(op):
                until = served_until(op, self.timing.settle)
                if until is None or now <= until:
                    return True
        return False

    def _settle_bound(self) -> float:
        return self.backoff_bound + self.timing.slack_now() + self.timing.settle

    async def op_close(self) -> None:
        """The pool's optional ``close()`` (a plain call, or a coroutine), once the run is done
        with the pool: a pool that starts a thread of its own stops it there. A fuzzing run
        makes thousands of pools, and threads left parked by each ran the process out of them
        ("can't start new thread", reported against the factory). What ``close`` raises is a
        ``crash``."""
        close = getattr(self.pool, "close", None)
        if not callable(close) or not _takes_no_arguments(close):
            return  # none, or a close() of another kind (one that takes a block, say)
        try:
            done = close()
            if inspect.isawaitable(done):
                await done
        except Exception as error:
            raise InvariantViolation("crash", f"the pool's close() raised {error_text(error)}") from error

    async def op_settle(self) -> None:
        """Let a pool that finishes releases after they return (``deferring``) come to rest,
        bounded, so that what is read next is its settled state. Nothing, and nothing in the
        history, for any other pool (a try-once it refuses settles it then: _excused_refusal)."""
        if not self.deferring:
            return
        index = self.history.begin("harness", "settle", {}, self._stamp())
        _, free_ids = await self._settled(index)
        self.history.end(index, self._stamp(), "ok", {"free_ids": free_ids})

    async def op_double_release(self, holder: str, block_id: int) -> None:
        """Release a block nobody holds: False (or an exception), and the queue and counter
        unchanged."""
        handle = self.ledger.handles[block_id]
        await self.op_settle()
        before = (self.pool.free_count(), id_list(self.pool.free_ids()))
        self._count_release()
        index = self.history.begin(holder, "release", {"block": block_id, "double": True}, self._stamp())
        try:
            returned = await self._call(index, "release", self.pool.release, handle)
        except InvariantViolation as crash:
            if not _refusal(crash):
                raise
            # Refused by raising, as threading.BoundedSemaphore refuses one release too many and
            # vLLM's allocators a double free: as good as False, if nothing changed.
            returned = False
        else:
            self.history.end(index, self._stamp(), "ok", returned)
        after = (self.pool.free_count(), id_list(self.pool.free_ids()))
        checkers.check_double_release(block_id, returned, before, after)

    def _raced(self, block_id: int) -> bool:
        """A double release racing the holder's own (``op_racing_release``) has begun on it."""
        return any(
            op.name == "release" and op.args.get("racing") and op.args.get("block") == block_id
            for op in self.history.snapshot()
        )

    async def op_racing_release(self, holder: str, block_id: int, peer: str) -> None:
        """Release ``peer``'s handle of a block whose release by ``peer`` is under way: a double
        release racing the real one, marked ``double`` and ``racing`` in the history. The pool
        cannot tell two calls through one handle apart, and either may be the one that puts the
        block back: the linearizability model takes a refused release of a FREE block as a no-op,
        so exactly one True of the two is right, and two (the block offered twice) or none (the
        block lost) is a finding."""
        handle = self.ledger.handles[block_id]
        self._count_release()
        args = {"block": block_id, "double": True, "racing": peer}
        index = self.history.begin(holder, "release", args, self._stamp())
        # refused by raising, as op_double_release allows
        await self._release_call(index, block_id, handle, refused=lambda: True)

    async def op_misuse(self, holder: str, block_id: int, operation: str) -> None:
        """retain or mark_in_use on a block nobody holds must raise."""
        handle = self.ledger.handles[block_id]
        state = self._state(handle)
        index = self.history.begin(holder, operation, {"block": block_id, "misuse": True}, self._stamp())
        raised, _ = await self._refusable(index, operation, handle)
        if not raised:
            checkers.check_misuse_raised(block_id, operation, False, state)

    async def _refusable(self, index: int, operation: str, handle: object) -> tuple[bool, object]:
        """Call ``operation`` through ``handle`` where the pool should refuse it, ending history
        entry ``index``: (whether it raised, what it returned)."""
        try:
            returned = getattr(self.pool, operation)(handle)
            if inspect.isawaitable(returned):
                returned = await returned
        except Exception as exc:
            self.history.end(index, self._stamp(), "raised", error_text(exc))
            return True, None
        self.history.end(index, self._stamp(), "ok", returned)
        return False, returned

    async def op_stale_use(self, holder: str, block_id: int, operation: str, first: bool = False) -> None:
        """retain, mark_in_use or release through the handle of the block's previous tenancy
        (with ``first``, of its first), while the block is held again through another: refused,
        and nothing changes (the quiet check after it reads the holder's refcount and state).
        Not judged for a pool that gives every tenancy the same handle: it cannot tell the two
        holders apart."""
        stale = (self.ledger.first if first else self.ledger.previous).get(block_id)
        if stale is None or block_id not in self.ledger.open or stale is self.ledger.handles.get(block_id):
            return
        before = (self.pool.free_count(), id_list(self.pool.free_ids()))
        index = self.history.begin(holder, operation, {"block": block_id, "stale": True}, self._stamp())
        raised, returned = await self._refusable(index, operation, stale)
        after = (self.pool.free_count(), id_list(self.pool.free_ids()))
        checkers.check_stale_refused(block_id, operation, raised, returned, before, after)

    async def op_check_quiet(self) -> None:
        """Queue, counter, conservation, states and refcounts of held blocks."""
        index = self.history.begin("harness", "check", {}, self._stamp())
        free_count, free_ids = await self._settled(index)
        self.history.end(index, self._stamp(), "ok", {"free_count": free_count, "free_ids": free_ids})
        states = {b: self._state(h) for b, h in self.ledger.handles.items()}
        held = {b: t.holders for b, t in self.ledger.open.items()}
        checkers.check_queue(free_ids, self.num_blocks, states)
        checkers.check_held_not_queued(free_ids, held)
        checkers.check_conservation(self.num_blocks, held, free_ids)
        free_states = sum(states.get(b, BlockState.FREE) is BlockState.FREE for b in range(self.num_blocks))
        checkers.check_counter(free_count, free_ids, free_states)
        for block_id, tenancy in self.ledger.open.items():
            expected = BlockState.IN_USE if tenancy.marked else BlockState.ACQUIRED
            checkers.check_state(block_id, states[block_id], expected, f"{tenancy.holders} took it")
            handle = self.ledger.handles[block_id]
            checkers.check_refcount(
                block_id, self._refcount(handle), tenancy.total_refs, "the last operation"
            )
        for block_id, handle in self.ledger.handles.items():
            if block_id not in held and self._refcount(handle) < 0:
                checkers.check_refcount(block_id, self._refcount(handle), 0, "its last release")
        checkers.check_release_accounting(self.ledger.ended, self.ledger.answered())

    # -- calling the pool -----------------------------------------------------------------------

    async def _call(
        self, index: int, what: str, method: Callable[..., Any], *args: Any, count: bool = False
    ) -> Any:
        """Call a pool method (awaiting it if it is a coroutine); an exception is a crash."""
        suspensions = None
        awaiting = False
        try:
            result = method(*args)
            awaiting = True
            if inspect.iscoroutine(result):
                waiter = Suspensions(result)
                result = await waiter
                suspensions = waiter.count
            elif isinstance(result, Awaitable):
                result = await result
        except Exception as exc:
            call = f"{what}({', '.join(map(_shown, args))})"
            raise self._raised(index, exc, f"{call} raised {error_text(exc)}") from exc
        except BaseException as exc:
            # A GeneratorExit while awaiting is the harness closing this coroutine.
            if passes_through(exc) or (awaiting and isinstance(exc, GeneratorExit)):
                # cancelled: it may or may not have taken effect
                self.history.end(index, self._stamp(), "info", "cancelled")
                raise
            call = f"{what}({', '.join(map(_shown, args))})"
            ended = f"{call} raised {error_text(exc)}: a pool must not end the process"
            raise self._raised(index, exc, ended) from exc
        return (result, suspensions) if count else result

    def _raised(self, index: int, exc: BaseException, message: str) -> InvariantViolation:
        """End operation ``index`` as raised (with its traceback); the ``crash`` to raise."""
        self.history.end(
            index,
            self._stamp(),
            "raised",
            error_text(exc),
            {"traceback": traceback.format_exc(limit=8)},
        )
        return InvariantViolation("crash", message)

    def _read(self, index: int, block: Any, attribute: str) -> Any:
        try:
            return getattr(block, attribute)
        except Exception as exc:
            raise InvariantViolation("crash", f"reading block.{attribute} raised {error_text(exc)}") from exc

    def _state(self, block: Any) -> BlockState:
        raw = block.state
        try:
            return BlockState(int(raw))
        except (TypeError, ValueError):
            raise InvariantViolation("crash", f"block.state is {raw!r}, not a BlockState") from None

    def _refcount(self, block: Any) -> int:
        raw = block.refcount
        if not isinstance(raw, int):
            raise InvariantViolation("crash", f"block.refcount is {raw!r}, not an int")
        return raw

    def _waited(self, elapsed: float, real0: float) -> float:
        """How long a call that gave up waited, for its earliness: ``elapsed`` on the run's clock,
        or the real time since ``real0`` where that is longer and the run watches a thread it
        does not control (a timeout kept there passes in real time, while virtual time may
        stand still: ``outside_threads_watched``)."""
        if self.virtual_time and outside_threads_watched():
            return max(elapsed, time.perf_counter() - real0)
        return elapsed

    def _now(self) -> float:
        if self.clock is not None:
            return self.clock()
        return anyio.current_time() if self.is_async else time.monotonic()

    def _stamp(self) -> float:
        """The history's clock. On a virtual clock, made strictly increasing: one thread or task
        runs at a time there, so two operations at the same virtual instant still have a real
        order, and the linearizability checker must see it."""
        now = self._now()
        if self.virtual_time:
            now = self._last_stamp = max(now, math.nextafter(self._last_stamp, math.inf))
        return now

    def _excused_now(self) -> float:
        """Seconds so far that an operation on this thread is not blamed for: on real time,
        ``excused_wall_seconds`` (collections, OS stalls); on a virtual clock, the jumps this
        controlled thread sat through runnable while a sleeper's timer fired (no heartbeat
        thread may start under a scheduler)."""
        return excused_seconds() if self.virtual_time else excused_wall_seconds()

    def _excused_since(self, excused0: float) -> float:
        """Wall seconds since ``excused0`` in which no Python code could run (collections, OS
        stalls): a slow answer is not blamed for them."""
        return self._excused_now() - excused0

    def _cpu(self) -> float | None:
        return None if self.is_async or self.virtual_time else thread_cpu_without_gc()

    def _cpu_since(self, cpu0: float | None) -> float | None:
        return None if cpu0 is None else thread_cpu_without_gc() - cpu0

    async def _pause(self, n: int) -> None:
        for _ in range(n):
            if self.is_async:
                await anyio.sleep(0)
            else:
                self.thread_pause(0)

    def _handed(self, holder: str) -> Any:
        """The event a share to ``holder`` sets (what a "wait" step of ``holder`` parks on)."""
        events: dict[str, Any] = self.__dict__.setdefault("_handed_events", {})
        event = events.get(holder)
        if event is None:
            event = events.setdefault(holder, anyio.Event() if self.is_async else self.thread_event())
        return event

    async def wait_handed(self, holder: str, seconds: float) -> None:
        """Park until a peer shares a block with ``holder``, at most ``seconds``."""
        event = self._handed(holder)
        if self.is_async:
            with anyio.move_on_after(seconds):
                await event.wait()
        else:
            event.wait(seconds)

    async def _sleep(self, seconds: float) -> None:
        if self.is_async:
            await anyio.sleep(seconds)
        else:
            self.thread_pause(seconds)

    def _bound(self, timeout: float | None) -> float:
        return (timeout or 0.0) + self.backoff_bound + self.timing.slack + self.timing.hang_now()

    def _step_cost(self, step: tuple[str, Any]) -> float:
        kind, arg = step
        if kind == "acquire_many":
            arg = arg[1]
        elif kind != "acquire":
            return 0.01
        return float(arg or 0.0) + self.backoff_bound + self.timing.slack

    def _worker(self, holder: str) -> ThreadWorker:
        worker = self._workers.get(holder)
        if worker is None:
            worker = self._workers[holder] = ThreadWorker(holder)
        return worker


_REFUSED = object()  # a release the pool refused by raising (_release_call)


def _refusal(crash: InvariantViolation) -> bool:
    """A pool call that raised may refuse a double release so (any ``Exception``, as
    ``threading.BoundedSemaphore`` refuses one release too many), but not by running out of
    memory: a ``MemoryError`` is the pool failing, whichever call it lands in."""
    cause = crash.__cause__
    return isinstance(cause, Exception) and not isinstance(cause, MemoryError)


def _takes_no_arguments(function: Callable[..., Any]) -> bool:
    """Whether ``function()`` binds: a ``close(timeout)`` with no default is not the protocol's."""
    try:
        inspect.signature(function).bind()
    except TypeError:
        return False
    except ValueError:  # no signature to read (a builtin): call it as the protocol says
        return True
    return True


def _shown(arg: Any) -> str:
    """An argument of a pool call as a message shows it: a block handle as its block
    (``block 1``, as the history and the table name it), anything else as its repr."""
    block_id = getattr(arg, "id", None)
    if isinstance(block_id, int) and not isinstance(block_id, bool) and hasattr(arg, "refcount"):
        return f"block {block_id}"
    return repr(arg)


def _runs(states: list[tuple[int, str]]) -> list[str]:
    """``block 3 (RELEASING)`` for each of ``states`` (sorted by block id), a run of consecutive
    blocks in one state said once (``blocks 0-63 (never handed out)``: a pool of 64 would list
    each)."""
    shown: list[str] = []
    i = 0
    while i < len(states):
        j = i
        while j + 1 < len(states) and states[j + 1] == (states[j][0] + 1, states[i][1]):
            j += 1
        first, state = states[i]
        last = states[j][0]
        shown.append(f"block {first} ({state})" if first == last else f"blocks {first}-{last} ({state})")
        i = j + 1
    return shown


def id_list(answer: Any) -> list[Any]:
    """What ``free_ids()`` answered, as a list; a ``crash`` where it is no iterable of ids (None
    went up as kvstress's own TypeError: exit 3, "a bug in kvstress", a blind tester's)."""
    try:
        return list(answer)
    except TypeError:
        raise InvariantViolation(
            "crash", f"free_ids() returned {answer!r}, not an iterable of block ids"
        ) from None
