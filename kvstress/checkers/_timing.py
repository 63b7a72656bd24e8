"""Timing: acquire never gives up early nor returns late, parks instead of spinning, and wakes up.

On real time these checks allow a slack for the OS and the event loop (measured on a loaded
2-core machine: see TimingPolicy); under a virtual clock the slack can be zero and they are exact.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvstress._load import load_factor
from kvstress._violation import InvariantViolation


@dataclass(frozen=True, slots=True)
class TimingPolicy:
    """Tolerances of the timing checks, in seconds unless named otherwise.

    - ``slack``: lateness the OS scheduler or event loop may add on top of a pool's backoff bound,
      on an idle machine; the checks scale it by the load average per core (``slack_now``).
    - ``early_tolerance`` + ``early_ratio`` x timeout: clock granularity allowed before a None
      counts as early (pools may read another clock than the harness).
    - ``default_backoff_bound``: assumed for a pool that declares no ``backoff_bound``.
    - ``busy_cpu_ratio``: CPU seconds per second waited above which a wait is spinning, one
      standard for both flavours. A thread's CPU is measured; an async waiter's cannot be told
      apart from the other tasks on its loop, so each wake-up no release explains is charged
      ``wakeup_cpu_s`` (what a timed wake-up costs: measured here at 7 us on asyncio, 9 us on
      anyio over asyncio, 17 us on anyio over trio). Waits shorter than ``busy_min_wait`` are
      not judged.
    - ``hang_bound``: how long past its own timeout an operation may take before it is a hang.
    - ``settle``: for a pool that finishes a release after it returned (a reset worker offers the
      block), how long beyond its backoff bound and the slack the block may take to reach the
      free queue. A correct one needs a moment; only a block that never arrives waits it out.
    - ``unshown_settle``: the same wait on real time for a pool that has not shown it defers:
      a worker that began an offer needs no more to finish it, and a real bug found on real
      time is reported at once (shrinking it stays fast).
    - ``virtual``: the checks run on a virtual clock (a controlled run): the slack is not
      scaled by the machine's load (nothing on that clock depends on it, and a replay must
      judge alike), and the messages say which clock they read.
    """

    slack: float = 0.25
    early_tolerance: float = 0.001
    early_ratio: float = 0.01
    default_backoff_bound: float = 0.05
    busy_cpu_ratio: float = 0.3
    wakeup_cpu_s: float = 10e-6
    busy_min_wait: float = 0.02
    busy_cpu_allowance: float = 0.02
    hang_bound: float = 5.0
    settle: float = 0.1
    unshown_settle: float = 0.01
    virtual: bool = False

    def slack_now(self) -> float:
        """``slack`` scaled by how far the machine's cores are oversubscribed now (the load
        average per core, at least 1): a loaded machine delays every thread, correct or not.
        On a virtual clock, ``slack`` itself."""
        return self.slack if self.virtual else self.slack * load_factor()

    def hang_now(self) -> float:
        """``hang_bound`` scaled as ``slack_now`` scales the slack: on the wall clock a correct
        pool's call past a fixed bound on a machine loaded far past its cores was a ``hang`` (a
        blind tester's, at load 23 on 2 cores: the stress run's final release, 5 s). On a virtual
        clock, ``hang_bound`` itself."""
        return self.hang_bound if self.virtual else self.hang_bound * load_factor()

    def slack_words(self, slack: float) -> str:
        """How a message names the slack: load-aware on the wall clock, exact on a virtual one."""
        return f"{slack:.3g} s (virtual clock)" if self.virtual else f"{slack:.3g} s (load-aware)"

    def backoff_bound_of(self, pool: object) -> float:
        """The pool's declared ``backoff_bound``, or the default when it declares none."""
        declared = getattr(pool, "backoff_bound", None)
        if isinstance(declared, int | float) and not isinstance(declared, bool) and declared >= 0:
            return float(declared)
        return self.default_backoff_bound


def check_timeout(
    timeout: float | None,
    got_block: bool,
    elapsed: float,
    elapsed_running: float,
    backoff_bound: float,
    policy: TimingPolicy,
    batch: int | None = None,
) -> None:
    """A None comes no earlier than the timeout (on the wall clock, ``elapsed``), and never for
    a timeout of None (no limit); no answer comes later than deadline + bound + slack (counting
    only time Python code could run, ``elapsed_running``: the wall time less garbage
    collection). ``batch``: the n of an ``acquire_many`` (the messages name the call made)."""
    call = "acquire(timeout=" if batch is None else f"acquire_many({batch}, timeout="
    if timeout is None:
        if not got_block:  # no limit: there is no time to be up
            raise InvariantViolation(
                "timeout-early",
                f"{call}None) returned None after {elapsed:.6f} s"
                f"{' of virtual time' if policy.virtual else ''}: with no timeout it must wait for a "
                "block (a timeout of None taken for 0, as `if not timeout:` does)",
            )
        return
    if not got_block and elapsed < timeout - policy.early_tolerance - policy.early_ratio * timeout:
        raise InvariantViolation(
            "timeout-early",
            f"{call}{timeout:g}) returned None after {elapsed:.6f} s"
            f"{' of virtual time' if policy.virtual else ''}, before its timeout",
        )
    slack = policy.slack_now()
    limit = timeout + backoff_bound + slack
    if elapsed_running > limit:
        left_out = "time it sat ready but unscheduled" if policy.virtual else "garbage collection"
        raise InvariantViolation(
            "timeout-late",
            f"{call}{timeout:g}) returned after {elapsed_running:.6f} s ({left_out} "
            f"left out), past its deadline plus backoff bound {backoff_bound:g} s and slack "
            f"{policy.slack_words(slack)}",
        )


def check_parking(elapsed: float, cpu_s: float | None, suspensions: int | None, policy: TimingPolicy) -> None:
    """A waiting acquire parks: little CPU per second waited, few loop wake-ups per second."""
    if elapsed < policy.busy_min_wait:
        return
    if cpu_s is not None and (cpu_s - policy.busy_cpu_allowance) / elapsed > policy.busy_cpu_ratio:
        raise InvariantViolation(
            "busy-wait",
            f"a waiting acquire burned {cpu_s:.4f} CPU s in {elapsed:.4f} s "
            f"({cpu_s / elapsed:.0%} of a core; threshold {policy.busy_cpu_ratio:.0%} after "
            f"{policy.busy_cpu_allowance:g} CPU s for the call's own work)",
        )
    if suspensions is not None and suspensions * policy.wakeup_cpu_s / elapsed > policy.busy_cpu_ratio:
        limit = policy.busy_cpu_ratio / policy.wakeup_cpu_s
        raise InvariantViolation(
            "busy-wait",
            f"a waiting acquire woke the event loop {suspensions} times in {elapsed:.4f} s "
            f"({suspensions / elapsed:.0f}/s; at {policy.wakeup_cpu_s * 1e6:g} us a wake-up that is "
            f"{suspensions * policy.wakeup_cpu_s / elapsed:.0%} of a core, threshold "
            f"{policy.busy_cpu_ratio:.0%}: {limit:,.0f}/s)",
        )


def check_woken(
    got_block: bool,
    waited_after_free: float,
    backoff_bound: float,
    policy: TimingPolicy,
    call: str = "a waiter",
    n: int = 1,
) -> None:
    """A waiter gets a block that became free within the backoff bound plus slack. ``call``
    names the waiting call (``b1: acquire_many(3, timeout=1)``), ``n`` the blocks it waits for
    (a batch waits for its ``n``: "a block" misread one batch's finding)."""
    slack = policy.slack_now()
    limit = backoff_bound + slack
    freed, got, they = ("a block", "its block", "it")
    if n != 1:
        freed, got, they = f"the {n} blocks it waited for", "them", "they"
    if not got_block:
        raise InvariantViolation(
            "lost-wakeup",
            f"{call} timed out {waited_after_free:.4f} s after {freed} became free "
            f"(allowed: backoff bound {backoff_bound:g} s + slack {policy.slack_words(slack)})",
        )
    if waited_after_free > limit:
        raise InvariantViolation(
            "lost-wakeup",
            f"{call} got {got} {waited_after_free:.4f} s after {they} became free "
            f"(allowed: backoff bound {backoff_bound:g} s + slack {policy.slack_words(slack)})",
        )
