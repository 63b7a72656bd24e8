"""What the threaded and the async audit share: the checks before and after each pool call.

Each audited call is three steps: ``_begin_*`` (ledger update, with the ledger lock), the pool
call (no lock held), then ``_end_*`` (ledger update and checks). The flavours only differ in how
they make the middle step: a plain call, or an await. Nothing here awaits, so on an event loop a
ledger update can never be interleaved with another task's.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import sys
import weakref
from collections.abc import Sequence
from typing import Any

from kvstress._checks import protocol_gap
from kvstress._format import error_text
from kvstress._violation import InvariantViolation, Operation
from kvstress.audit._block import AuditedBlock
from kvstress.audit._ledger import AuditLedger, Lease, Op
from kvstress.audit._memory import dirty_read, is_zero, released_block_changed, view_of
from kvstress.audit._quiet import QuietCheck
from kvstress.audit._report import block_table, capture_stack, describe_lease, leak_message
from kvstress.pool._state import HELD_STATES

_HANDLE_CALLS = frozenset({"acquire_many", "mark_in_use_many"})

CLOSE_SETTLE_S = 2.0
"""How long ``close()`` waits for a block released through the audit that the pool has not queued
yet (a pool may finish a release after it returned: a reset thread, a task, a stream callback),
before it calls the block lost. Polled from 1 ms up, so a block on its way costs its own delay
only; the clock is the run's virtual one under exploration."""
CLOSE_POLL_S = (0.001, 0.1)  # the first poll interval, doubled up to the last

# Each audit's first violation, numbered in the order found, the latest few only: an explored
# run that fails otherwise (a deadlock once a worker died of the violation) names it instead.
_FOUND: collections.deque[tuple[int, InvariantViolation]] = collections.deque(maxlen=16)
_SERIAL = itertools.count(1)
_last = 0


def violations_mark() -> int:
    """A mark to pass to ``first_violation_since``: the number of the latest violation so far."""
    return _last


def first_violation_since(mark: int) -> InvariantViolation | None:
    """The first violation any audit found after ``mark`` (``violations_mark``), if one did."""
    return next((found for serial, found in list(_FOUND) if serial > mark), None)


_SHOWN: weakref.WeakSet[BaseException] = weakref.WeakSet()


def note_shown(error: BaseException | None) -> None:
    """``error`` (or a violation it was raised from, or one in its exception group) reached the
    user as a test's failure: the
    audit's ``close()`` then does not raise it again (a test's teardown showed every audited
    violation twice, once as the failure and once as an error) and, the test having stopped
    midway, does not call the blocks it still held leaked."""
    seen: set[int] = set()
    todo = [error]
    while todo:
        error = todo.pop()
        if error is None or id(error) in seen:
            continue
        seen.add(id(error))
        if isinstance(error, InvariantViolation):
            _SHOWN.add(error)
        if isinstance(error, BaseExceptionGroup):  # a task group's: each member was shown
            todo.extend(error.exceptions)
        todo.append(error.__cause__ or error.__context__)


def _caught_by_pytest(error: BaseException) -> bool:
    """Whether ``error`` went all the way up to pytest, which shows it: its traceback starts in
    the frame that caught it, and that frame is pytest's (a fixture's teardown that raised it,
    collected with the others' errors), not the code's own (a violation the code swallowed)."""
    tb = error.__traceback__
    if tb is None:
        return False
    module = tb.tb_frame.f_globals.get("__name__")
    return isinstance(module, str) and module.split(".")[0] in ("_pytest", "pluggy")


def _record(found: InvariantViolation) -> None:
    global _last
    serial = next(_SERIAL)
    _FOUND.append((serial, found))
    _last = serial


"""The pool's own calls that take or return block handles: never forwarded unaudited (the audit
has ``acquire_many`` where the pool has it; the others are absent, so callers fall back to the
audited one-block calls)."""


def stops_a_call(error: BaseException) -> bool:
    """Whether ``error`` stopped a call from outside the protocol: a ``BaseException`` that is
    no cancellation (a controlled run's thread aborted after a diverged replay or a finding,
    a coroutine closed with its dropped loop, Ctrl-C, ``SystemExit``). A cancellation is the
    protocol's own (a cancel-safe pool undoes what the call did) and an ``Exception`` the pool's
    answer: both are judged as usual."""
    if isinstance(error, Exception | asyncio.CancelledError):
        return False
    trio = sys.modules.get("trio")
    return trio is None or not isinstance(error, trio.Cancelled)


def _held_before(pool: Any, num_blocks: int) -> set[int]:
    """The blocks not in the pool's free queue as the audit begins (none where the queue cannot
    be read): held by code that ran before it, not by a caller of the audit."""
    try:
        free = set(pool.free_ids())
    except Exception:
        return set()
    return {block for block in range(num_blocks) if block not in free}


class AuditCore:
    """The ledger, the checks, and the first violation found (``close()`` raises it again)."""

    def __init__(self, pool: Any, *, history: int, stack_limit: int, queue_check_every: int | None) -> None:
        gap = protocol_gap(pool)
        if gap is not None:
            raise ValueError(f"pool must keep the kvstress pool protocol; {pool!r}{gap}")
        if not isinstance(history, int) or history < 1:
            raise ValueError(f"history must be a positive int, got {history!r}")
        if not isinstance(stack_limit, int) or stack_limit < 0:
            raise ValueError(f"stack_limit must be an int >= 0, got {stack_limit!r}")
        self.pool = pool
        self.num_blocks: int = pool.num_blocks
        self._ledger = AuditLedger(self.num_blocks, history)
        self._ledger.outside = _held_before(pool, self.num_blocks)
        self._stack_limit = stack_limit
        self._quiet = QuietCheck(self, queue_check_every)
        self._first: InvariantViolation | None = None
        self._found: weakref.WeakSet[InvariantViolation] = weakref.WeakSet()  # every one raised
        self._closed = False
        self.cut_short: str | None = None
        """Set when a call was stopped midway by no error of the pool's (``stops_a_call``): the
        pool may be left mid-operation (a block taken off the queue, a release half done), so
        what reads it at rest (quiet points; at close, the released blocks' memory and whether
        they are back) judges nothing after it. Blocks a caller never released are still leaks."""

    def _holder(self) -> str:
        """Who is calling: the thread's name, or the task's."""
        raise NotImplementedError

    # -- acquire --------------------------------------------------------------------------------

    def _begin_acquire(self, timeout: Any) -> tuple[Op, str]:
        __tracebackhide__ = True
        if self._closed:
            self.check_open("acquire")
        holder = self._holder()
        with self._ledger.lock:
            return self._ledger.begin(holder, "acquire", {"timeout": timeout}), holder

    def _end_acquire(self, op: Op, holder: str, inner: Any) -> AuditedBlock | None:
        """Record what acquire returned; check it is nobody's block and that its memory is zero."""
        __tracebackhide__ = True
        ledger = self._ledger
        if inner is None:
            with ledger.lock:
                ledger.end(op, "info", None)
                quiet = None if ledger.in_flight else self._quiet.due()
            if quiet is not None:
                self._quiet.run(quiet)
            return None
        block_id = inner.id
        # The frames skipped: _end_acquire and the flavour's acquire.
        stack = capture_stack(self._stack_limit, 2) if self._stack_limit else ()
        with ledger.lock:
            lease, clash, previous = ledger.take(block_id, inner, holder, stack)
            ledger.end(op, "ok", block_id)
            quiet = None if ledger.in_flight else self._quiet.due()
        block = self._handed("acquire", holder, inner, lease, clash, previous)
        if quiet is not None:
            self._quiet.run(quiet)
        return block

    def _handed(
        self, call: str, holder: str, inner: Any, lease: Lease, clash: Lease | None, previous: Lease | None
    ) -> AuditedBlock:
        """A block ``call`` handed out, checked: nobody else's, and all zero."""
        __tracebackhide__ = True
        if clash is not None:
            raise self.violation(
                "shared-block",
                f"the pool's {call} handed {holder} block {inner.id}, which is still held: "
                f"{describe_lease(clash)} (a pool bug)",
            )
        # No holder can write before this returns, and the previous one released it: any
        # non-zero element was left by the pool, or written through a released handle.
        lease.view = view = view_of(inner)  # kept to the release: its memory stays allocated
        if is_zero(view) is False:
            raise self.violation(*dirty_read(inner, holder, previous))
        return AuditedBlock(self, lease)

    def _begin_acquire_many(self, n: Any, timeout: Any) -> tuple[Op, str]:
        __tracebackhide__ = True
        if self._closed:
            self.check_open("acquire_many")
        holder = self._holder()
        with self._ledger.lock:
            return self._ledger.begin(holder, "acquire_many", {"n": n, "timeout": timeout}), holder

    def _end_acquire_many(self, op: Op, holder: str, inners: Any) -> list[AuditedBlock] | None:
        """Record what acquire_many returned: None, or ``n`` blocks, each checked as ``acquire``
        checks its block (nobody's, all zero)."""
        __tracebackhide__ = True
        ledger = self._ledger
        if inners is None:
            with ledger.lock:
                ledger.end(op, "info", None)
            return None
        inners = list(inners)
        n = op[3]["n"]
        stack = capture_stack(self._stack_limit, 2) if self._stack_limit else ()
        with ledger.lock:
            taken = [(inner, *ledger.take(inner.id, inner, holder, stack)) for inner in inners]
            ledger.end(op, "ok", [inner.id for inner in inners])
        if len(inners) != n:
            raise self.violation(
                "lost-block",
                f"the pool's acquire_many({n}) handed {holder} {len(inners)} blocks (a pool bug)",
            )
        return [self._handed("acquire_many", holder, *checked) for checked in taken]

    def _failed(self, op: Op, error: BaseException) -> None:
        """A pool call raised (or was cancelled): record it; the error goes on to the caller."""
        __tracebackhide__ = True
        outcome = "raised" if isinstance(error, Exception) else "info"
        if self.cut_short is None and stops_a_call(error):
            self.cut_short = f"{op[1]}'s {op[2]} was stopped midway by {type(error).__name__}"
        with self._ledger.lock:
            self._ledger.end(op, outcome, error_text(error))

    # -- release --------------------------------------------------------------------------------

    def _begin_release(self, block: object, name: str = "release") -> tuple[Lease, Op]:
        """Give up the reference (a holder gives it up when it *calls* release); refuse a stale
        handle before the pool sees it, so the block's next holder is never touched."""
        __tracebackhide__ = True
        if self._closed:
            self.check_open(name)
        lease = self._lease_of(block)
        holder = self._holder()
        with self._ledger.lock:
            op = self._ledger.begin(holder, name, {"block": lease.block_id})
            if lease.refs > 0:
                self._ledger.give_up(lease, holder, op)
                return lease, op
            self._ledger.end(op, "raised", "refused: stale handle")
        raise self._stale(lease, holder, name)

    def _end_release(self, lease: Lease, op: Op, returned: Any) -> None:
        """Check the pool's answer against the lease; note whether the memory reads as reset."""
        __tracebackhide__ = True
        ledger = self._ledger
        problem: tuple[str, str] | None = None
        with ledger.lock:
            ledger.end(op, "ok", returned)
            lease.releasing -= 1
            if returned is True:
                lease.answered_true += 1
            if returned is not True or lease.answered_true != 1 or lease.refs:  # else: as expected
                problem = self._release_answer(lease, returned)
            if returned is True and lease.refs == 0 and lease.block_id not in ledger.open:
                # Under the lock and before any next lease is opened: nobody may write into the
                # block now, so what this reads is what the pool left.
                lease.zero_at_release = is_zero(lease.view)
            if lease.refs == 0 and lease.releasing == 0:
                lease.view = None  # a tiered pool may now give the memory back
            quiet = None if ledger.in_flight else self._quiet.due()
        if problem is not None:
            raise self.violation(*problem)
        if quiet is not None:
            self._quiet.run(quiet)

    def _release_answer(self, lease: Lease, returned: Any) -> tuple[str, str] | None:
        """A release answers True once per lease, for its last reference (ledger lock held)."""
        __tracebackhide__ = True
        if returned is True:
            if lease.answered_true == 1 and lease.refs == 0:
                return None
        elif lease.refs or lease.releasing or lease.answered_true or lease.answer_lost:
            return None
        block = f"block {lease.block_id}"
        if returned is True and lease.answered_true > 1:
            return ("double-release", f"releases of {block} answered True twice in one tenancy (a pool bug)")
        if returned is True and lease.refs > 0:
            return (
                "refcount",
                f"release of {block} answered True although {describe_lease(lease)} still "
                "holds references: the pool freed a block still in use (a pool bug)",
            )
        if (
            lease.refs == 0
            and lease.releasing == 0
            and lease.answered_true == 0
            and not lease.answer_lost
            and not lease.retaining
            and not lease.retain_raced
        ):  # a retain that raced the last release took the reference the pool kept: its finding
            return (
                "lost-block",
                f"every reference to {block} was released, but no release answered True: the pool "
                "did not return it (a pool bug)",
            )
        return None

    def _begin_many(self, blocks: Sequence[object]) -> list[tuple[Lease, Op]]:
        __tracebackhide__ = True
        begun: list[tuple[Lease, Op]] = []
        try:
            for block in blocks:
                begun.append(self._begin_release(block, "release_many"))
        except BaseException:  # a stale handle: the others keep their references
            with self._ledger.lock:
                for lease, op in begun:
                    self._ledger.end(op, "info", "not called: another handle was stale")
                    lease.releasing -= 1
                    self._ledger.undo_give_up(lease)
            raise
        return begun

    def _release_raised(self, lease: Lease, op: Op, error: BaseException) -> None:
        """A release that raised or was cancelled: if the pool shows it never took effect (the
        block still held, with a reference for it), the holder keeps that reference."""
        __tracebackhide__ = True
        try:
            untouched = lease.inner.state in HELD_STATES and lease.inner.refcount > lease.refs
        except Exception:
            untouched = False
        self._failed(op, error)
        with self._ledger.lock:
            lease.releasing -= 1
            lease.answer_lost = True
            # Not if the block went to a new tenancy meanwhile: then the release took effect.
            if untouched and self._ledger.open.get(lease.block_id, lease) is lease:
                self._ledger.undo_give_up(lease)

    # -- retain and mark_in_use ---------------------------------------------------------------

    def _begin_use(self, block: object, name: str) -> tuple[Lease, Op]:
        """Before retain or mark_in_use: the handle must hold a reference."""
        __tracebackhide__ = True
        if self._closed:
            self.check_open(name)
        lease = self._lease_of(block)
        holder = self._holder()
        with self._ledger.lock:
            op = self._ledger.begin(holder, name, {"block": lease.block_id})
            if lease.refs > 0:
                if name == "retain":
                    lease.retaining += 1
                return lease, op
            self._ledger.end(op, "raised", "refused: stale handle")
        raise self._stale(lease, holder, name)

    def _end_use(self, lease: Lease, op: Op, name: str) -> None:
        __tracebackhide__ = True
        holder = op[1]  # who called: recorded as the call began
        ledger = self._ledger
        with ledger.lock:
            ledger.end(op, "ok")
            ended = lease.refs <= 0
            if name == "retain":
                lease.retaining -= 1
                lease.retain_raced = lease.retain_raced or ended
                if ended:
                    # The pool took the retain: the block may be held by that reference, which
                    # the caller's race kept from the ledger. Held outside the audit until the
                    # queue has it again, so a quiet point does not blame the pool for it.
                    ledger.outside.add(lease.block_id)
            if not ended and name == "retain":
                lease.refs += 1
                lease.sharers += (holder,)
            elif not ended:
                lease.marked = True
            quiet = None if ledger.in_flight else self._quiet.due()
        if ended:
            raise self._raced_release(lease, holder, name)
        if quiet is not None:
            self._quiet.run(quiet)

    def _use_raised(self, lease: Lease, op: Op, name: str, error: BaseException) -> None:
        """A retain or mark_in_use that raised: when the lease ended while it ran, the pool
        refused a block its last reference had just freed, and the caller's race is the finding
        (raised from the pool's error). Otherwise the error goes on to the caller."""
        __tracebackhide__ = True
        self._failed(op, error)
        with self._ledger.lock:
            if name == "retain":
                lease.retaining -= 1
            ended = lease.refs <= 0
        if ended and isinstance(error, Exception):
            raise self._raced_release(lease, op[1], name) from error

    def _raced_release(self, lease: Lease, holder: str, name: str) -> InvariantViolation:
        return self.violation(
            "illegal-transition",
            f"{holder}'s {name} of block {lease.block_id} raced the release of its last reference "
            f"by {lease.ended_by}: {holder} called it without holding a reference (a caller bug)",
        )

    # -- shared -------------------------------------------------------------------------------

    def check_open(self, name: str) -> None:
        """Refuse a protocol call once ``close()`` has run: the audit's verdict is given, and a
        call the audit no longer checks must not pass for an audited one. The hot paths test
        ``self._closed`` before calling this, to spare a call per operation."""
        __tracebackhide__ = True
        if self._closed:
            raise ValueError(
                f"{name} called on a closed audit: close() has run; to go on, audit the pool "
                "again with kvstress.audit(pool)"
            )

    def _lease_of(self, block: object) -> Lease:
        __tracebackhide__ = True
        if isinstance(block, AuditedBlock) and block._audit is self:
            return block._lease
        raise ValueError(f"block must be a block this audited pool's acquire returned, got {block!r}")

    def _stale(self, lease: Lease, holder: str, name: str) -> InvariantViolation:
        now = self._ledger.open.get(lease.block_id)
        where = "nobody holds it now" if now is None else f"it is now {describe_lease(now)}"
        what = (
            f"{holder} called {name} on block {lease.block_id} through a stale handle: tenancy "
            f"{lease.number}, whose last reference {lease.ended_by} released (operation "
            f"{lease.ended_op}); {where}"
        )
        if name.startswith("release"):
            kind = (
                "a double release"
                if now is None
                else "a release that would have freed another holder's block"
            )
            return self.violation("double-release", f"{what}. This is {kind} (a caller bug)")
        return self.violation("illegal-transition", f"{what}. {name} needs a held block (a caller bug)")

    def stale_data(self, lease: Lease) -> None:
        """Raise for a read of ``data`` through a handle whose lease has ended."""
        __tracebackhide__ = True
        now = self._ledger.open.get(lease.block_id)
        where = "nobody holds it now" if now is None else f"it is now {describe_lease(now)}"
        raise self.violation(
            "shared-block",
            f"block {lease.block_id}'s data was used through a stale handle (tenancy {lease.number}, "
            f"whose last reference {lease.ended_by} released); {where}: a use after release "
            "(a caller bug)",
        )

    def violation(self, invariant: str, message: str) -> InvariantViolation:
        """A violation with the history and the block table; the first is kept for ``close()``."""
        ledger = self._ledger
        with ledger.lock:
            handles = {b: lease.inner for b, lease in ledger.latest.items()}
            held = dict(ledger.open)
        found = InvariantViolation(
            invariant,
            message,
            ledger.snapshot(),
            block_table(self.pool, self.num_blocks, handles, held),
        )
        if self._first is None:
            self._first = found
            _record(found)
        self._found.add(found)
        return found

    def close(self) -> None:
        """End the audit: raise the first violation found (even one the caller swallowed), then
        check that every block came back, listing each leak with its holder and acquire stack,
        that no released block was written since, and the pool's queue and counter."""
        __tracebackhide__ = True
        if self._close_checks():
            self._wait_back()

    def _wait_back(self) -> None:
        """Wait for the blocks released through the audit that the pool has not queued yet, up
        to ``CLOSE_SETTLE_S``, then raise ``lost-block`` for those still missing (the flavour
        says how it waits; one that cannot wait here checks nothing)."""
        __tracebackhide__ = True

    def _close_checks(self) -> bool:
        """``close``'s checks that need no wait; True when nothing was in flight (the pool can
        then be read at rest: ``not_back``)."""
        __tracebackhide__ = True
        if self._closed:
            return False
        self._closed = True
        first = self._first
        if any(found in _SHOWN or _caught_by_pytest(found) for found in list(self._found)):
            # One of this audit's violations failed the test already (the first, or a later one
            # the code raised after swallowing the first: the same finding, shown twice before),
            # or went up to pytest from another fixture's teardown, which reports it.
            return False
        if first is not None:
            raise InvariantViolation(
                first.invariant,
                f"{first.message} (found earlier, at the faulty call)",
                first.history,
                first.blocks,
            )
        with self._ledger.lock:
            leaked = list(self._ledger.open.values())
            released = [x for b, x in self._ledger.latest.items() if b not in self._ledger.open]
            quiet = self._ledger.in_flight == 0
            seq = self._ledger.begun
        if leaked:
            raise self.violation("lost-block", leak_message(leaked))
        if self.cut_short is not None:
            return False  # the pool may be mid-operation: not at rest (``cut_short``)
        for lease in released:
            changed = released_block_changed(lease)
            if changed is not None:
                raise self.violation("dirty-read", changed)
        if quiet:
            self._quiet.full(seq)
        return quiet

    def not_back(self) -> list[int]:
        """At close, nothing in flight: the blocks nobody holds that are not in the pool's free
        queue (released, and on their way back or lost)."""
        with self._ledger.lock:
            held = set(self._ledger.open) | set(self._ledger.outside)
        try:
            queued = set(self.pool.free_ids())
        except Exception:  # a pool that cannot be read now: the quiet checks said so already
            return []
        return [block for block in range(self.num_blocks) if block not in held and block not in queued]

    def never_back(self, missing: list[int], waited: float) -> InvariantViolation:
        """The violation for blocks released through the audit and not back ``waited`` s later."""
        with self._ledger.lock:
            leases = [self._ledger.latest.get(block) for block in missing]
        said = []
        for block, lease in zip(missing, leases, strict=True):
            state = "unknown"
            if lease is not None:
                with contextlib.suppress(Exception):
                    raw = lease.inner.state
                    state = str(getattr(raw, "name", raw))
            by = f", released by {lease.ended_by}" if lease is not None and lease.ended_by else ""
            said.append(f"block {block} ({state}{by})")
        return self.violation(
            "lost-block",
            f"{', '.join(said)}: nobody holds it, and it is still not in the pool's free queue "
            f"{waited:g} s after the audit closed: the pool never offered it back, or handed it to a "
            "waiter that dropped it (a pool bug, seen at close; a pool may finish a release after "
            "it returned, and the audit waited for it)",
        )

    def _close_quietly(self) -> None:
        """Close after an exception went by: nothing more is raised over it."""
        self._closed = True

    def history(self) -> tuple[Operation, ...]:
        """The latest operations made through the audit (``history`` of them), those still in
        flight included, in the order they began; times in seconds since the audit began."""
        return self._ledger.snapshot()

    @property
    def closed(self) -> bool:
        """Whether ``close()`` has run."""
        return self._closed

    def __getattr__(self, name: str) -> Any:
        # Anything beyond the protocol (metrics, dump, block_shape...) is the pool's own; calls
        # made through it are not audited.
        __tracebackhide__ = True
        if name.startswith("__") or name == "pool" or name in _HANDLE_CALLS:
            raise AttributeError(name)
        return getattr(self.pool, name)
