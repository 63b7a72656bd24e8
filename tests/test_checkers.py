"""Each checker raises its own invariant id on a planted fault and stays silent on correct data."""

from __future__ import annotations

import pytest
import torch

from kvstress import checkers
from kvstress._violation import INVARIANTS, InvariantViolation
from kvstress.checkers import TimingPolicy
from kvstress.pool._state import BlockState

FREE, ACQ, USE = BlockState.FREE, BlockState.ACQUIRED, BlockState.IN_USE
POLICY = TimingPolicy(slack=0.1)


@pytest.fixture(autouse=True)
def idle_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """The timing checks as on an idle machine, whatever load runs beside the tests."""
    import kvstress.checkers._timing as timing

    monkeypatch.setattr(timing, "load_factor", lambda: 1.0)


def raises(invariant: str) -> pytest.RaisesExc[InvariantViolation]:
    assert invariant in INVARIANTS
    return pytest.raises(InvariantViolation, match=rf"^\[{invariant}\]")


def test_zeroed_block_passes_and_one_stale_element_fails() -> None:
    """check_zeroed is silent on zeros and reports a single non-zero last element."""
    data = torch.zeros(3, 4)
    checkers.check_zeroed(0, data)
    data[-1, -1] = 5.0
    with raises("dirty-read") as info:
        checkers.check_zeroed(7, data)
    assert "block 7" in str(info.value) and "flat index 11" in str(info.value)


def test_canary_intact_passes_and_overwritten_fails() -> None:
    """check_canary is silent when the canary is whole and reports one overwritten element."""
    data = torch.full((2, 2), 3.0)
    checkers.check_canary(1, data, 3.0, "h0")
    data[0, 1] = 9.0
    with raises("shared-block"):
        checkers.check_canary(1, data, 3.0, "h0")


def test_queue_checks() -> None:
    """Duplicates, out-of-range ids and non-FREE queued blocks are queue-corruption."""
    checkers.check_queue([2, 0, 1], 3, {0: FREE, 1: FREE})
    with raises("queue-corruption"):
        checkers.check_queue([1, 1], 3, {})
    with raises("queue-corruption"):
        checkers.check_queue([3], 3, {})
    with raises("queue-corruption"):
        checkers.check_queue([0], 3, {0: BlockState.RELEASING})


def test_held_block_in_queue_is_a_refcount_fault() -> None:
    """A block in the free queue while a holder retains it is reported as refcount."""
    checkers.check_held_not_queued([0, 1], {2: ("h0",)})
    with raises("refcount"):
        checkers.check_held_not_queued([0, 2], {2: ("h0",)})


def test_conservation() -> None:
    """A block neither held nor queued is lost."""
    checkers.check_conservation(3, {0}, [1, 2])
    with raises("lost-block"):
        checkers.check_conservation(3, {0}, [2])


def test_counter() -> None:
    """free_count must equal the queue length and the FREE blocks."""
    checkers.check_counter(2, [0, 1], 2)
    with raises("counter-mismatch"):
        checkers.check_counter(3, [0, 1], 2)
    with raises("counter-mismatch"):
        checkers.check_counter(2, [0, 1], 3)


def test_acquired_block_checks() -> None:
    """acquire must return an in-range id nobody holds, ACQUIRED, refcount 1."""
    checkers.check_acquired(1, 4, ())
    checkers.check_fresh_state(1, ACQ, 1)
    with raises("queue-corruption"):
        checkers.check_acquired(4, 4, ())
    with raises("shared-block"):
        checkers.check_acquired(1, 4, ("h1",))
    with raises("illegal-transition"):
        checkers.check_fresh_state(1, USE, 1)
    with raises("refcount"):
        checkers.check_fresh_state(1, ACQ, 0)


def test_release_result() -> None:
    """release answers True exactly for the last reference."""
    checkers.check_release_result(0, True, True)
    checkers.check_release_result(0, False, False)
    with raises("refcount"):
        checkers.check_release_result(0, True, False)
    with raises("lost-block"):
        checkers.check_release_result(0, False, True)


def test_release_accounting() -> None:
    """Over a batch, one True per ended tenancy: more is double-release, fewer is lost-block."""
    checkers.check_release_accounting({0: 2}, {0: 2})
    with raises("double-release"):
        checkers.check_release_accounting({0: 1}, {0: 2})
    with raises("lost-block"):
        checkers.check_release_accounting({0: 2}, {0: 1})


def test_double_release() -> None:
    """A double release must answer False and change nothing."""
    checkers.check_double_release(0, False, (1, [0]), (1, [0]))
    with raises("double-release"):
        checkers.check_double_release(0, True, (1, [0]), (1, [0]))
    with raises("double-release"):
        checkers.check_double_release(0, False, (1, [0]), (2, [0, 0]))


def test_misuse_must_raise() -> None:
    """retain or mark_in_use on a block nobody holds must raise."""
    checkers.check_misuse_raised(0, "retain", True, FREE)
    with raises("illegal-transition"):
        checkers.check_misuse_raised(0, "retain", False, FREE)


def test_timeout_early_and_late() -> None:
    """None before the timeout is early, and a None at all for a timeout of None (no limit); any
    answer past deadline + bound + slack is late."""
    checkers.check_timeout(0.05, False, 0.0501, 0.0501, 0.0, POLICY)
    checkers.check_timeout(0.05, True, 0.001, 0.001, 0.0, POLICY)
    checkers.check_timeout(None, True, 30.0, 30.0, 0.0, POLICY)
    with raises("timeout-early"):
        checkers.check_timeout(None, False, 0.0, 0.0, 0.0, POLICY)
    checkers.check_timeout(0, False, 0.0, 0.0, 0.0, POLICY)
    with raises("timeout-early"):
        checkers.check_timeout(0.05, False, 0.005, 0.005, 0.0, POLICY)
    with raises("timeout-late"):
        checkers.check_timeout(0.05, False, 0.2, 0.2, 0.0, POLICY)
    checkers.check_timeout(0.05, False, 0.2, 0.2, 0.1, POLICY)  # the pool declared a 0.1 s backoff


def test_a_batch_s_timing_finding_names_the_batch_call() -> None:
    """A late or early acquire_many is named as called (a blind user's late batch was headed
    ``acquire(timeout=0.002) returned after ...``, its table showing ``acquire_many(2, 0.002)``)."""
    with pytest.raises(InvariantViolation, match=r"acquire_many\(2, timeout=0.002\) returned after"):
        checkers.check_timeout(0.002, False, 0.2, 0.2, 0.0, POLICY, batch=2)
    with pytest.raises(InvariantViolation, match=r"acquire_many\(3, timeout=0.05\) returned None after"):
        checkers.check_timeout(0.05, False, 0.005, 0.005, 0.0, POLICY, batch=3)
    with pytest.raises(InvariantViolation, match=r"^\[timeout-late\] acquire\(timeout=0.05\)"):
        checkers.check_timeout(0.05, False, 0.2, 0.2, 0.0, POLICY)


def test_garbage_collection_excuses_lateness_but_never_earliness() -> None:
    """A wait stretched by GC is not late; a wait that GC time would shorten is not early."""
    checkers.check_timeout(0.05, False, 0.9, 0.06, 0.0, POLICY)  # 0.84 s of it was GC
    checkers.check_timeout(0.05, False, 0.05, 0.001, 0.0, POLICY)  # early only after taking GC out


def test_parking() -> None:
    """Much CPU, or many loop wake-ups, per second waited is busy-wait; short waits are not judged."""
    checkers.check_parking(0.1, 0.001, None, POLICY)
    checkers.check_parking(0.1, None, 3, POLICY)
    checkers.check_parking(0.001, 0.001, 1000, POLICY)
    with raises("busy-wait"):
        checkers.check_parking(0.1, 0.09, None, POLICY)
    # A call's own work (a stack read from disk for leak detection) is not waiting ...
    checkers.check_parking(0.042, 0.0163, None, POLICY)
    # ... but a spin burns a core for as long as it waits.
    with raises("busy-wait"):
        checkers.check_parking(0.05, 0.05, None, POLICY)
    with raises("busy-wait"):
        checkers.check_parking(0.1, None, 5000, POLICY)


def test_woken() -> None:
    """A waiter must get a freed block within bound + slack."""
    checkers.check_woken(True, 0.01, 0.0, POLICY)
    with raises("lost-wakeup"):
        checkers.check_woken(False, 0.5, 0.0, POLICY)
    with raises("lost-wakeup"):
        checkers.check_woken(True, 0.5, 0.0, POLICY)
    # A batch waiter's finding names its call and what it waited for ("a waiter timed out ...
    # after a block became free" misread a batch's, a blind user's).
    call = "b1: acquire_many(3, timeout=1)"
    batch = r"b1: acquire_many\(3, timeout=1\)"
    with pytest.raises(InvariantViolation, match=batch + " timed out .* after the 3 blocks"):
        checkers.check_woken(False, 0.5, 0.0, POLICY, call, 3)
    with pytest.raises(InvariantViolation, match=batch + " got them .* after they became free"):
        checkers.check_woken(True, 0.5, 0.0, POLICY, call, 3)


def test_backoff_bound_is_read_from_the_pool_or_defaulted() -> None:
    """A declared backoff_bound is used; a missing or bad one falls back to the default."""

    class Declares:
        backoff_bound = 0.2

    assert POLICY.backoff_bound_of(Declares()) == 0.2
    assert POLICY.backoff_bound_of(object()) == POLICY.default_backoff_bound


def test_violation_needs_a_known_id() -> None:
    """InvariantViolation refuses an id outside the stable list, and is an AssertionError."""
    with pytest.raises(ValueError, match="invariant must be one of"):
        InvariantViolation("nonsense", "x")
    assert isinstance(InvariantViolation("hang", "x"), AssertionError)


def test_async_waits_are_judged_by_the_same_cpu_standard_as_threads() -> None:
    """An async waiter polling every 1 ms (1,000 wake-ups a second, about 1% of a core) is
    parked, as a thread doing the same is; one polling every 10 us burns a core's worth."""
    checkers.check_parking(1.0, None, 1_000, POLICY)
    checkers.check_parking(1.0, 0.01, None, POLICY)
    with raises("busy-wait"):
        checkers.check_parking(1.0, None, 100_000, POLICY)


def test_the_slack_scales_with_the_load(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the cores oversubscribed twice over, an acquire 0.4 s late (slack 0.25 s idle) is
    the machine's delay, not the pool's; idle, it is late."""
    import kvstress.checkers._timing as timing

    policy = TimingPolicy(slack=0.25)
    with raises("timeout-late"):
        checkers.check_timeout(0.7, False, 1.1, 1.1, 0.0, policy)
    monkeypatch.setattr(timing, "load_factor", lambda: 2.0)
    checkers.check_timeout(0.7, False, 1.1, 1.1, 0.0, policy)


def test_a_virtual_policy_neither_scales_its_slack_nor_calls_it_load_aware(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a virtual clock the slack is exact whatever the load (a replay judges alike), and the
    message names the clock."""
    import kvstress.checkers._timing as timing

    monkeypatch.setattr(timing, "load_factor", lambda: 8.0)
    virtual = TimingPolicy(slack=1e-6, virtual=True)
    assert virtual.slack_now() == 1e-6 and TimingPolicy(slack=0.1).slack_now() == pytest.approx(0.8)
    with pytest.raises(InvariantViolation, match="virtual clock") as caught:
        checkers.check_timeout(0.01, False, 0.02 + 1e-5, 0.02 + 1e-5, 0.0, virtual)
    assert "load-aware" not in str(caught.value)
    with pytest.raises(InvariantViolation, match="of virtual time, before its timeout"):
        checkers.check_timeout(0.01, False, 0.0, 0.0, 0.0, virtual)


def test_the_hang_bound_on_the_wall_clock_grows_with_the_load(monkeypatch: pytest.MonkeyPatch) -> None:
    """As the slack does: a correct pool's call past a fixed 5 s at load 23 on 2 cores was a
    ``hang`` (a blind tester's, the stress run's final release). Exact on a virtual clock."""
    import kvstress.checkers._timing as timing

    monkeypatch.setattr(timing, "load_factor", lambda: 11.5)
    assert TimingPolicy(hang_bound=5.0).hang_now() == pytest.approx(57.5)
    assert TimingPolicy(hang_bound=5.0, virtual=True).hang_now() == 5.0
    monkeypatch.setattr(timing, "load_factor", lambda: 1.0)
    assert TimingPolicy(hang_bound=5.0).hang_now() == 5.0
