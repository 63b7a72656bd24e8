"""kvstress.audit on threaded pools: each check catches a planted bug and is silent on correct use."""

from __future__ import annotations

import contextlib
import threading
from types import SimpleNamespace
from typing import Any

import pytest
import torch

import kvstress
from kvstress import AuditedBlock, AuditedPool, InvariantViolation, ThreadedBlockPool
from kvstress.audit._memory import is_zero, view_of
from kvstress.mutants import PartialResetPool


def audited(num_blocks: int = 2, **options: int) -> AuditedPool:
    pool = kvstress.audit(ThreadedBlockPool(num_blocks, (2, 4)), **options)
    assert isinstance(pool, AuditedPool)
    return pool


def take(pool: AuditedPool, timeout: float | None = 0) -> AuditedBlock:
    block = pool.acquire(timeout)
    assert block is not None
    return block


def violation_of(excinfo: pytest.ExceptionInfo[InvariantViolation]) -> InvariantViolation:
    return excinfo.value


# -- silent on correct use ------------------------------------------------------------------------


def test_correct_use_is_silent_and_close_passes() -> None:
    """acquire, retain, mark, write, release both references, block(), release_many: no violation."""
    with audited(3) as pool:
        block = take(pool)
        pool.retain(block)
        pool.mark_in_use(block)
        block.data.fill_(7.0)
        assert pool.release(block) is False
        assert pool.release(block) is True
        with pool.block(0) as other:
            other.data.fill_(1.0)
        many = [take(pool), take(pool)]
        assert pool.release_many(many) == [True, True]
        assert pool.free_count() == 3


def test_handle_reads_through_to_the_pool() -> None:
    """The audited handle gives the pool's id, data, state, refcount, and its tenancy number."""
    pool = audited()
    block = take(pool)
    assert block.id == block.inner.id
    assert block.data.data_ptr() == block.inner.data.data_ptr()
    assert block.state is kvstress.BlockState.ACQUIRED and block.refcount == 1
    assert block.generation == 1
    pool.release(block)
    assert block.state is kvstress.BlockState.FREE  # a live view, as the pool's handle
    pool.close()


# -- dirty-read and use after release ----------------------------------------------------------


def test_write_through_a_kept_view_after_release_is_caught_at_the_next_acquire() -> None:
    """A view kept past release and written: the next acquire of that block names a use after release."""
    pool = audited(1)
    block = take(pool)
    view = block.data
    pool.release(block)
    view.fill_(3.0)  # the planted bug
    with pytest.raises(InvariantViolation) as caught:
        pool.acquire(0)
    found = violation_of(caught)
    assert found.invariant == "dirty-read"
    assert "written after its release" in found.message and "use after release" in found.message
    assert [op.name for op in found.history] == ["acquire", "release", "acquire"]
    assert found.blocks[0].holders == ("MainThread",)


def test_write_through_a_kept_view_is_caught_at_close() -> None:
    """A block written after its last release and never acquired again is caught by close()."""
    pool = audited(2)
    block = take(pool)
    view = block.data
    pool.release(block)
    view[0, 0] = 1.0
    with pytest.raises(InvariantViolation, match="written after its release") as caught:
        pool.close()
    assert violation_of(caught).invariant == "dirty-read"


def test_a_pool_that_does_not_reset_is_a_dirty_read_blamed_on_the_pool() -> None:
    """PartialResetPool leaves the last element: dirty-read, not blamed on the caller."""
    pool = kvstress.audit(PartialResetPool(1, (2, 4)))
    block = pool.acquire(0)
    block.data.fill_(5.0)
    pool.release(block)
    with pytest.raises(InvariantViolation, match="the pool did not reset it") as caught:
        pool.acquire(0)
    assert "1 of 8 elements not zero" in violation_of(caught).message


def test_data_through_a_stale_handle_raises_at_the_access() -> None:
    """block.data after the last release is a use after release, raised where it happens."""
    pool = audited()
    block = take(pool)
    pool.release(block)
    with pytest.raises(InvariantViolation, match="stale handle") as caught:
        block.data.fill_(1.0)
    assert violation_of(caught).invariant == "shared-block"


# -- double release and stale handles ----------------------------------------------------------


def test_double_release_is_refused_before_the_pool_sees_it() -> None:
    """A second release raises double-release, and the pool counts no double release."""
    pool = audited()
    block = take(pool)
    pool.release(block)
    with pytest.raises(InvariantViolation, match="a double release") as caught:
        pool.release(block)
    assert violation_of(caught).invariant == "double-release"
    assert pool.metrics()["double_release_count"] == 0


def test_release_through_a_stale_handle_never_touches_the_next_holder() -> None:
    """A stale release after the block went to someone else is refused; the new tenancy is intact."""
    pool = audited(1)
    old = take(pool)
    pool.release(old)
    new = take(pool)
    with pytest.raises(InvariantViolation, match="another holder's block"):
        pool.release(old)
    assert new.refcount == 1 and new.state is kvstress.BlockState.ACQUIRED
    assert new.generation == 2


@pytest.mark.parametrize("name", ["retain", "mark_in_use"])
def test_retain_or_mark_through_a_stale_handle_is_refused(name: str) -> None:
    """retain or mark_in_use through a stale handle: illegal-transition, the pool untouched."""
    pool = audited(1)
    old = take(pool)
    pool.release(old)
    new = take(pool)
    with pytest.raises(InvariantViolation, match="stale handle") as caught:
        getattr(pool, name)(old)
    assert violation_of(caught).invariant == "illegal-transition"
    assert new.refcount == 1 and new.state is kvstress.BlockState.ACQUIRED


def test_release_many_with_a_stale_handle_releases_nothing() -> None:
    """One stale handle in release_many refuses the whole call; the other blocks stay held."""
    pool = audited(2)
    stale, held = take(pool), take(pool)
    pool.release(stale)
    with pytest.raises(InvariantViolation, match="double release"):
        pool.release_many([held, stale])
    assert held.refcount == 1
    assert pool.release(held) is True


# -- leaks at close ------------------------------------------------------------------------------


def test_close_lists_each_leak_with_its_holder_and_acquire_stack() -> None:
    """A block never released: close() raises lost-block naming the holder and this test's line."""
    pool = audited(3)
    kept = take(pool)
    pool.retain(kept)
    pool.release(kept)
    with pytest.raises(InvariantViolation) as caught:
        pool.close()
    found = violation_of(caught)
    assert found.invariant == "lost-block"
    assert (
        f"block {kept.id} (acquired by MainThread, retained by MainThread, released by MainThread; "
        "1 reference left)" in found.message
    )
    assert "in test_close_lists_each_leak_with_its_holder_and_acquire_stack" in found.message
    assert found.blocks[kept.id].holders == ("MainThread",)


def test_a_leak_names_who_still_holds_it_not_who_gave_theirs_back() -> None:
    """The block table listed every taker of a shared block as a holder, those that had released
    theirs included."""
    import threading

    pool = audited(3)
    kept = take(pool)

    def sharer() -> None:
        pool.retain(kept)
        pool.release(kept)

    thread = threading.Thread(target=sharer, name="w2")
    thread.start()
    thread.join()
    with pytest.raises(InvariantViolation) as caught:
        pool.close()
    found = violation_of(caught)
    assert "(acquired by MainThread, retained by w2, released by w2; 1 reference left)" in found.message
    assert found.blocks[kept.id].holders == ("MainThread",)


def test_with_block_exits_clean_and_an_exception_is_not_masked() -> None:
    """Leaving the with-block by an exception raises that exception, not a leak."""
    with pytest.raises(KeyError), audited() as pool:
        take(pool)
        raise KeyError("the caller's own error")
    assert pool.closed


def test_a_swallowed_violation_fails_close() -> None:
    """A violation caught by an except clause is raised again by close()."""
    pool = audited()
    block = take(pool)
    pool.release(block)
    with contextlib.suppress(Exception):  # what a request handler does
        pool.release(block)
    with pytest.raises(InvariantViolation, match="found earlier") as caught:
        pool.close()
    assert violation_of(caught).invariant == "double-release"


# -- quiet points ------------------------------------------------------------------------------


class DriftingCounterPool(ThreadedBlockPool):
    """A planted pool bug: free_count() over-reports by one once a block has been released."""

    drift = 0

    def release(self, block: kvstress.Block) -> bool:
        returned = super().release(block)
        self.drift = 1
        return returned

    def free_count(self) -> int:
        return super().free_count() + self.drift


def test_counter_against_queue_at_a_quiet_point() -> None:
    """A free counter that disagrees with the queue is counter-mismatch at the next quiet point."""
    pool = kvstress.audit(DriftingCounterPool(2, (2,)))
    block = pool.acquire(0)
    with pytest.raises(InvariantViolation, match="seen at a quiet point") as caught:
        pool.release(block)
    assert violation_of(caught).invariant == "counter-mismatch"


def test_full_queue_check_runs_every_n_calls_silently() -> None:
    """With queue_check_every=1 every quiet point reads the whole queue; a correct pool passes."""
    with audited(4, queue_check_every=1) as pool:
        for _ in range(20):
            block = take(pool)
            pool.mark_in_use(block)
            pool.release(block)


# -- bad input -----------------------------------------------------------------------------------


def test_bad_arguments_raise_value_error_naming_them() -> None:
    """An object without the protocol, a bad option, a foreign handle: ValueError naming it."""
    with pytest.raises(ValueError, match="pool must keep"):
        kvstress.audit(object())
    counted = ThreadedBlockPool(1, (2,))
    counted.free_count = 1  # type: ignore[assignment, method-assign]
    with pytest.raises(ValueError, match=r"whose free_count is 1 \(int\), not a method"):
        kvstress.audit(counted)
    with pytest.raises(ValueError, match="history"):
        kvstress.audit(ThreadedBlockPool(1, (2,)), history=0)
    with pytest.raises(ValueError, match="queue_check_every"):
        kvstress.audit(ThreadedBlockPool(1, (2,)), queue_check_every=0)
    bare = ThreadedBlockPool(1, (2,))
    with pytest.raises(ValueError, match="block must be a block this audited pool"):
        audited().release(bare.acquire(0))  # type: ignore[arg-type]


def test_reads_pass_through() -> None:
    """free_count, free_ids and the pool's own extras read through the proxy."""
    pool = audited(3)
    assert pool.free_count() == 3 and pool.free_ids() == [0, 1, 2]
    assert pool.block_shape == (2, 4)
    assert torch.equal(pool.storage, torch.zeros(3, 2, 4))


# -- the pool's answers ----------------------------------------------------------------------


class FalseAnswerPool(ThreadedBlockPool):
    """A planted pool bug: release returns the block but answers False."""

    def release(self, block: kvstress.Block) -> bool:
        super().release(block)
        return False


class IgnoredRetainPool(ThreadedBlockPool):
    """A planted pool bug: retain takes no reference, so the first release frees a shared block."""

    def retain(self, block: kvstress.Block) -> None:
        pass


class FailingReleasePool(ThreadedBlockPool):
    """A release that raises before it changes anything, once."""

    failed = False

    def release(self, block: kvstress.Block) -> bool:
        if not self.failed:
            self.failed = True
            raise RuntimeError("the first release fails")
        return super().release(block)


def test_last_release_answering_false_is_lost_block() -> None:
    """Every reference released, no release answered True: lost-block, blamed on the pool."""
    pool = kvstress.audit(FalseAnswerPool(2, (2,)))
    block = pool.acquire(0)
    with pytest.raises(InvariantViolation, match="no release answered True") as caught:
        pool.release(block)
    assert violation_of(caught).invariant == "lost-block"


def test_release_freeing_a_retained_block_is_refcount() -> None:
    """A release that answers True while a retained reference remains: refcount."""
    pool = kvstress.audit(IgnoredRetainPool(2, (2,)))
    block = pool.acquire(0)
    pool.retain(block)
    with pytest.raises(InvariantViolation, match="still holds references") as caught:
        pool.release(block)
    assert violation_of(caught).invariant == "refcount"


def test_a_release_that_raised_untouched_leaves_the_reference_with_its_holder() -> None:
    """The pool raised before releasing: the error goes on, and the retry is no double release."""
    pool = kvstress.audit(FailingReleasePool(2, (2,)))
    block = pool.acquire(0)
    with pytest.raises(RuntimeError, match="the first release fails"):
        pool.release(block)
    assert pool.release(block) is True
    assert [op.outcome for op in pool.history()] == ["ok", "raised", "ok"]
    pool.close()


class RacingCallPool(ThreadedBlockPool):
    """A correct pool with a hook: ``during`` runs inside its retain or mark_in_use, before the
    call takes effect (``first=True``) or after; the test releases the block there, as another
    thread's release would land while the call is in flight."""

    during: tuple[str, bool, Any] = ("", True, None)

    def _hooked(self, name: str, block: kvstress.Block, call: Any) -> None:
        hooked, first, action = self.during
        if name == hooked and first:
            action()
        call(block)
        if name == hooked and not first:
            action()

    def retain(self, block: kvstress.Block) -> None:
        self._hooked("retain", block, super().retain)

    def mark_in_use(self, block: kvstress.Block) -> None:
        self._hooked("mark_in_use", block, super().mark_in_use)


@pytest.mark.parametrize("name", ["retain", "mark_in_use"])
def test_a_call_that_lands_after_the_last_release_freed_the_block_is_the_callers_race(name: str) -> None:
    """A holder's retain (or mark) begun while the block was held, reaching the pool just after
    another holder's last release freed it: the pool refuses it, and the audit names the caller's
    race (illegal-transition, raised from the pool's error) instead of passing the error on."""
    pool = RacingCallPool(2, (2,))
    audit = kvstress.audit(pool)
    block = take(audit)  # type: ignore[arg-type]
    pool.during = (name, True, lambda: audit.release(block))
    with pytest.raises(InvariantViolation, match="raced the release of its last reference") as caught:
        getattr(audit, name)(block)
    assert violation_of(caught).invariant == "illegal-transition"
    assert caught.value.__cause__ is not None  # the pool's own refusal, kept
    with pytest.raises(InvariantViolation, match="found earlier"):
        audit.close()


def test_a_retain_that_lands_before_the_last_release_is_no_lost_block() -> None:
    """The other order: the retain reaches the pool first, so the pool rightly keeps the block
    when the last counted reference goes (its release answers False). The finding is the
    caller's race, not a lost block blamed on the pool."""
    pool = RacingCallPool(2, (2,))
    audit = kvstress.audit(pool)
    block = take(audit)  # type: ignore[arg-type]
    answers: list[bool] = []
    pool.during = ("retain", False, lambda: answers.append(audit.release(block)))
    with pytest.raises(InvariantViolation, match="raced the release of its last reference") as caught:
        audit.retain(block)
    assert violation_of(caught).invariant == "illegal-transition" and answers == [False]


def test_a_retain_in_flight_while_the_block_is_still_shared_is_silent() -> None:
    """A retain in flight while another reference is released (not the last): no finding."""
    pool = RacingCallPool(2, (2,))
    audit = kvstress.audit(pool)
    block = take(audit)  # type: ignore[arg-type]
    audit.retain(block)
    answers: list[bool] = []
    pool.during = ("retain", True, lambda: answers.append(audit.release(block)))
    audit.retain(block)
    pool.during = ("", True, None)
    assert answers == [False]
    assert audit.release(block) is False and audit.release(block) is True
    audit.close()


class RepeatingAcquirePool(ThreadedBlockPool):
    """A planted pool bug: acquire hands out the block it handed out last, still held."""

    last: kvstress.Block | None = None

    def acquire(self, timeout: float | None = None) -> kvstress.Block | None:
        if self.last is None:
            self.last = super().acquire(timeout)
        return self.last


def test_acquire_handing_out_a_held_block_is_shared_block() -> None:
    """acquire returns a block somebody still holds: shared-block, naming the holder."""
    pool = kvstress.audit(RepeatingAcquirePool(2, (2,)))
    pool.acquire(0)
    with pytest.raises(InvariantViolation, match="which is still held") as caught:
        pool.acquire(0)
    assert violation_of(caught).invariant == "shared-block"


def test_memory_check_counts_negative_zero_and_strided_blocks_as_zero() -> None:
    """-0.0 is zero though its bytes are not; a strided view is checked by torch; None is unread."""
    assert zero(torch.tensor([-0.0, 0.0])) is True
    assert zero(torch.zeros(4, 4)[:, 1]) is True
    assert zero(torch.eye(4)[:, 1]) is False
    assert zero(torch.tensor([0, 0, 1], dtype=torch.int8)) is False
    assert is_zero(None) is None


def test_our_pool_s_blocks_are_read_at_their_host_address_and_torch_decides_the_rest() -> None:
    """On our own pools the audit compares the block's bytes where they lie, with no tensor
    view; -0.0 bytes are not zero bytes, so torch decides (zero), and a real value is found."""
    pool = ThreadedBlockPool(2, (2, 4))
    block = pool.acquire(0)
    assert block is not None
    view = view_of(block)
    assert view is not None and view[0] is block  # the handle, not a tensor view
    assert is_zero(view) is True
    block.data.fill_(-0.0)
    assert is_zero(view) is True
    block.data[1, 3] = 2.0
    assert is_zero(view) is False
    assert is_zero(view_of(pool.acquire(0))) is True  # the other block: another address


def test_memory_that_cannot_be_read_is_no_finding() -> None:
    """A meta tensor (no memory) and an empty block give no verdict rather than an error."""
    assert zero(torch.zeros(4, device="meta")) is None
    assert zero(torch.zeros(0)) is True


def zero(data: torch.Tensor) -> bool | None:
    """What the audit's memory check says of ``data``, as a block's memory."""
    return is_zero(view_of(SimpleNamespace(data=data)))


def test_block_raises_pool_exhausted_and_close_is_idempotent() -> None:
    """block() on an exhausted pool raises PoolExhausted (nothing leaked); a second close() is a no-op."""
    pool = audited(1)
    held = take(pool)
    with pytest.raises(kvstress.PoolExhausted), pool.block(0):
        pass
    pool.release(held)
    pool.close()
    pool.close()
    assert pool.closed


def test_every_protocol_call_after_close_raises_value_error() -> None:
    """After close(), each protocol call raises ValueError naming it, and the pool is untouched."""
    pool = audited(2)
    held = take(pool)
    pool.release(held)
    pool.close()
    calls = {
        "acquire": lambda: pool.acquire(0),
        "release": lambda: pool.release(held),
        "release_many": lambda: pool.release_many([]),
        "retain": lambda: pool.retain(held),
        "mark_in_use": lambda: pool.mark_in_use(held),
        "free_count": pool.free_count,
        "free_ids": pool.free_ids,
    }
    for name, call in calls.items():
        with pytest.raises(ValueError, match=rf"^{name} called on a closed audit"):
            call()
    with pytest.raises(ValueError, match=r"^acquire called on a closed audit"), pool.block(0):
        pass
    assert pool.pool.free_count() == 2


def test_calls_after_leaving_with_by_an_exception_raise_value_error() -> None:
    """Leaving ``with`` by an exception closes the audit too: a later acquire is refused."""
    with contextlib.suppress(KeyError), audited() as pool:
        raise KeyError("the caller's own error")
    with pytest.raises(ValueError, match="acquire called on a closed audit"):
        pool.acquire(0)


# -- a pool audited while some of its blocks are held --------------------------------------------


def test_blocks_held_before_the_audit_began_are_held_outside_it() -> None:
    """A server's pool audited with a block already held (a prefix cache warmed at startup): no
    finding for it at a quiet point or at close, and its return outside the audit is seen."""
    raw = ThreadedBlockPool(4, (2, 4))
    warm = raw.acquire(0)
    assert warm is not None
    raw.mark_in_use(warm)
    pool = kvstress.audit(raw, queue_check_every=1)  # a full check at every quiet point
    block = take(pool)
    pool.release(block)
    raw.release(warm)  # given back outside the audit
    for _ in range(4):
        pool.release(take(pool))
    pool.close()


class OneMoreFree(ThreadedBlockPool):
    """Its free counter reads one more than its queue holds."""

    def free_count(self) -> int:
        return super().free_count() + 1


def test_a_drifting_counter_is_still_found_beside_blocks_held_before_the_audit() -> None:
    raw = OneMoreFree(4, (2, 4))
    assert raw.acquire(0) is not None
    pool = kvstress.audit(raw)
    with pytest.raises(InvariantViolation) as caught:
        pool.release(take(pool))
    assert violation_of(caught).invariant == "counter-mismatch"


def test_a_write_after_release_names_no_innocent_holder() -> None:
    """A keeps a view and releases; B takes and releases the block without writing; A writes
    through its old view. The audit sees the write only at close, after B's release: it said
    the block was written "by B". It names B's tenancy as one possibility among earlier ones."""
    pool = audited(1)
    kept: dict[str, torch.Tensor] = {}

    def a_takes() -> None:
        block = take(pool)
        kept["view"] = block.data
        pool.release(block)

    def b_takes() -> None:
        pool.release(take(pool))

    for name, step in (("holder-A", a_takes), ("holder-B", b_takes)):
        thread = threading.Thread(target=step, name=name)
        thread.start()
        thread.join()
    kept["view"].fill_(7.0)
    with pytest.raises(InvariantViolation) as caught:
        pool.close()
    message = violation_of(caught).message
    assert "by holder-B" not in message
    assert "last tenancy's (holder-B) or of an earlier one" in message and "cannot say whose" in message


class Stopped(BaseException):
    """Stands for what stops a call from outside the protocol (a controlled run's aborted thread)."""


class HalfReleasePool(ThreadedBlockPool):
    """Its first release is stopped after the block left its holder and before it is queued:
    ``error`` says by what (the pool's own error, or something from outside)."""

    def __init__(self, error: type[BaseException]) -> None:
        super().__init__(2, (2,))
        self.error: type[BaseException] | None = error

    def _offer(self, block_id: int) -> None:
        if self.error is not None:
            error, self.error = self.error, None
            raise error("stopped")
        super()._offer(block_id)


def test_a_call_stopped_midway_from_outside_leaves_nothing_to_judge_at_rest() -> None:
    """A controlled run stopped by a diverged replay aborts its threads mid-call: the pool is
    left mid-release (its block neither held nor queued), and the audit's next quiet point
    blamed the pool ("a pool bug, seen at a quiet point", a blind user's suite); at close, a
    block never offered back is one too."""
    pool = kvstress.audit(HalfReleasePool(Stopped))
    block = take(pool)
    with pytest.raises(Stopped):
        pool.release(block)
    assert pool.cut_short == "MainThread's release was stopped midway by Stopped"
    pool.release(take(pool))  # a quiet point: not judged
    pool.close()


def test_a_release_that_raises_midway_is_still_the_pools_lost_block() -> None:
    """The same half-done release, raised by the pool itself: its error, judged as before."""
    pool = kvstress.audit(HalfReleasePool(RuntimeError))
    block = take(pool)
    with pytest.raises(RuntimeError):
        pool.release(block)
    assert pool.cut_short is None
    pool.release(take(pool))
    with pytest.raises(InvariantViolation, match="the pool never offered it back") as caught:
        pool.close()
    assert violation_of(caught).invariant == "lost-block"


def test_a_block_never_released_is_still_a_leak_after_a_call_was_stopped_midway() -> None:
    """A daemon thread of a controlled run is unwound at its end wherever it is: the pool is not
    judged at rest after that, but a block its caller never gave back is still a leak."""
    pool = kvstress.audit(HalfReleasePool(Stopped))
    kept = take(pool)
    with pytest.raises(Stopped):
        pool.release(take(pool))
    assert pool.cut_short is not None and kept is not None
    with pytest.raises(InvariantViolation, match="MainThread") as caught:
        pool.close()
    assert violation_of(caught).invariant == "lost-block"
