"""The Hypothesis state machine that drives any pool through the protocol, checking every step.

Rules act for named holders on references (``Ref``) held in a bundle, so a failing run prints a
program of ``state.acquire(...)`` / ``state.release(ref=blocks_0)`` lines that replays exactly.
The same machine serves threaded and async pools: the driver runs an async pool on an anyio
event loop (asyncio or trio) that lives for the whole example.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    MultipleResults,
    RuleBasedStateMachine,
    consumes,
    invariant,
    multiple,
    precondition,
    rule,
)

from kvstress._checks import check_block_shape, check_num_blocks
from kvstress._violation import InvariantViolation
from kvstress.checkers import TimingPolicy
from kvstress.harness._driver import PoolDriver, is_async_factory
from kvstress.machines._program import MachineTestCase, ProgramRecorder, recorded
from kvstress.machines._strategies import batches, holders, timeouts


@dataclass(frozen=True)
class Ref:
    """One reference to one tenancy of a block, held by ``holder``; block -1 when none came.

    Every acquiring rule adds a Ref, whatever the pool answered, so the rules Hypothesis can
    draw never depend on the pool's timing: a nondeterministic pool cannot make the machine's
    own data draws flaky.
    """

    holder: str
    block: int
    tenancy: int


NO_BLOCK_TENANCY = -1


@dataclass(frozen=True)
class MachineOptions:
    """How the machine builds and drives the pool."""

    num_blocks: int = 3
    block_shape: tuple[int, ...] = (2, 4)
    dtype: torch.dtype = torch.float32
    device: str | None = None
    backend: str = "asyncio"
    backend_options: dict[str, Any] = field(default_factory=dict)
    timing: TimingPolicy = field(default_factory=TimingPolicy)
    batches: bool = True


class PoolMachine(RuleBasedStateMachine):
    """Drives ``factory``'s pool against the harness's ledger; see kvstress.pool_machine."""

    factory: ClassVar[Callable[..., Any]]
    options: ClassVar[MachineOptions] = MachineOptions()

    blocks = Bundle("blocks")
    retired = Bundle("retired")
    TestCase = MachineTestCase()  # type: ignore[assignment]  # flaky: a violation with its program

    def __init__(self) -> None:
        super().__init__()
        self.violation: InvariantViolation | None = None
        self.recorder = ProgramRecorder(type(self).__name__)
        o = self.options
        self.driver = PoolDriver(
            type(self).factory,
            num_blocks=o.num_blocks,
            block_shape=o.block_shape,
            dtype=o.dtype,
            device=o.device,
            backend=o.backend,
            backend_options=dict(o.backend_options),
            timing=o.timing,
        )

    # -- rules ---------------------------------------------------------------------------------
    # After a violation every rule is a no-op and teardown raises it: the steps Hypothesis draws
    # then never depend on when a nondeterministic pool happened to fail.

    @rule(target=blocks, holder=holders, timeout=timeouts)
    @recorded("blocks")
    def acquire(self, holder: str, timeout: float) -> Ref:
        return self._ref(holder, self._do(lambda: self.driver.acquire(holder, timeout)))

    # Plain Task.cancel() goes through anyio's shields; it exists on asyncio only, so these two
    # rules are drawn only there (the precondition is fixed for the whole run: no data
    # dependence on the pool's answers).
    @precondition(lambda self: self.driver.cancels_tasks)
    @rule(target=blocks, holder=holders, timeout=timeouts, turns=st.integers(1, 3))
    @recorded("blocks")
    def acquire_cancelled_by_task_cancel(self, holder: str, timeout: float, turns: int) -> Ref:
        return self._ref(holder, self._do(lambda: self.driver.acquire_task_cancelled(holder, timeout, turns)))

    # acquire_many is an optional protocol member: these rules are drawn only for pools that
    # have it (fixed for the run). Each adds n Refs whatever the pool answered.
    @precondition(lambda self: self.driver.has_acquire_many)
    @rule(target=blocks, holder=holders, n=st.integers(0, 3), timeout=timeouts)
    def acquire_many(self, holder: str, n: int, timeout: float) -> MultipleResults[Ref]:
        n = min(n, self.driver.num_blocks)
        return self._refs(holder, n, self._do(lambda: self.driver.acquire_many(holder, n, timeout)))

    @precondition(lambda self: self.driver.has_acquire_many and self.driver.cancels_tasks)
    @rule(target=blocks, holder=holders, n=st.integers(1, 3), timeout=timeouts, turns=st.integers(1, 3))
    def acquire_many_cancelled_by_task_cancel(
        self, holder: str, n: int, timeout: float, turns: int
    ) -> MultipleResults[Ref]:
        n = min(n, self.driver.num_blocks)
        got = self._do(lambda: self.driver.acquire_many_task_cancelled(holder, n, timeout, turns))
        return self._refs(holder, n, got)

    @precondition(lambda self: self.driver.has_acquire_many)
    @rule(target=blocks, ref=consumes(blocks), waiter=holders, cancel=st.booleans())
    def batch_waiter_woken_by_release(self, ref: Ref, waiter: str, cancel: bool) -> MultipleResults[Ref]:
        # The waiter asks for every block the releaser holds alone (at least the ref's), so it
        # can be served only once all of them are free.
        ledger, driver = self.driver.ledger, self.driver
        tenancy = self._tenancy(ref)
        exhausted = len(ledger.open) == driver.num_blocks
        if tenancy is None or not exhausted or tenancy.total_refs != 1 or waiter == ref.holder:
            return multiple(ref)  # not applicable: keep it
        sole = [b for b, t in ledger.open.items() if t.total_refs == 1 and ref.holder in t.refs]
        cancel = cancel and driver.is_async
        got = self._do(lambda: driver.probe_batch_wakeup(waiter, ref.holder, sole, cancel))
        return self._refs(waiter, len(sole), got)

    @rule(ref=blocks)
    @recorded()
    def mark_in_use(self, ref: Ref) -> None:
        tenancy = self._tenancy(ref)
        if tenancy is not None and not tenancy.marked:
            self._do(lambda: self.driver.mark_in_use(ref.holder, ref.block))

    @rule(ref=blocks)
    @recorded()
    def write_canary(self, ref: Ref) -> None:
        tenancy = self._tenancy(ref)
        if tenancy is not None and tenancy.marked:
            self._do(lambda: self.driver.write_canary(ref.holder, ref.block))

    @rule(ref=blocks)
    @recorded()
    def verify_canary(self, ref: Ref) -> None:
        if self._tenancy(ref) is not None:
            self._do(lambda: self.driver.verify_canary(ref.holder, ref.block))

    @rule(target=blocks, ref=blocks, to=holders)
    @recorded("blocks")
    def share(self, ref: Ref, to: str) -> Ref:
        if self._tenancy(ref) is None:
            return Ref(to, -1, NO_BLOCK_TENANCY)
        self._do(lambda: self.driver.share(ref.holder, ref.block, to))
        return Ref(to, ref.block, ref.tenancy)

    @rule(target=retired, ref=consumes(blocks))
    @recorded("retired")
    def release(self, ref: Ref) -> Ref:
        if self._tenancy(ref) is not None:
            self._do(lambda: self.driver.release(ref.holder, ref.block))
        return ref

    # release_many is optional too: drawn only for a pool that has it. The refs of the first's
    # holder, each on a distinct block it still holds, go back in one call; the others retire
    # unreleased (the example's end gives back what is still held).
    @precondition(lambda self: self.driver.has_release_many)
    @rule(target=retired, first=consumes(blocks), second=consumes(blocks))
    def release_many(self, first: Ref, second: Ref) -> MultipleResults[Ref]:
        refs = (first, second)
        mine = [r.block for r in refs if r.holder == first.holder and self._tenancy(r) is not None]
        block_ids = list(dict.fromkeys(mine))
        if block_ids:
            self._do(lambda: self.driver.release_many(first.holder, block_ids))
        return multiple(*refs)

    @precondition(lambda self: self.driver.cancels_tasks)
    @rule(target=blocks, ref=consumes(blocks), turns=st.integers(1, 3))
    @recorded("blocks")
    def release_cancelled_by_task_cancel(self, ref: Ref, turns: int) -> Ref:
        # The ref goes back: a release cancelled before it took effect leaves the block with its
        # holder (and a stale ref is a no-op in every rule).
        if self._tenancy(ref) is not None:
            self._do(lambda: self.driver.release_task_cancelled(ref.holder, ref.block, turns))
        return ref

    @precondition(lambda self: self.driver.cancels_scopes)
    @rule(target=blocks, ref=consumes(blocks))
    @recorded("blocks")
    def release_in_cancelled_scope(self, ref: Ref) -> Ref:
        # The ref goes back, as for a task-cancelled release: one cancelled before it took
        # effect leaves the block with its holder (and a stale ref is a no-op in every rule).
        if self._tenancy(ref) is not None:
            self._do(lambda: self.driver.release_in_cancelled_scope(ref.holder, ref.block))
        return ref

    @rule(ref=retired)
    @recorded()
    def double_release(self, ref: Ref) -> None:
        if self._unheld(ref):
            self._do(lambda: self.driver.double_release(ref.holder, ref.block))

    @rule(ref=retired, operation=st.sampled_from(("retain", "mark_in_use")))
    @recorded()
    def misuse(self, ref: Ref, operation: str) -> None:
        if self._unheld(ref):
            self._do(lambda: self.driver.misuse(ref.holder, ref.block, operation))

    def stale_use(self, ref: Ref, operation: str, first: bool = False) -> None:
        """Not a rule (the contract's step): ``operation`` through the handle that ``ref`` (a
        released reference) held (with ``first``, the block's first handle), once its block is
        held again through another handle."""
        if self.violation is None and ref.block in self.driver.ledger.open:
            self._do(lambda: self.driver.stale_use(ref.holder, ref.block, operation, first))

    @rule(target=blocks, ref=consumes(blocks), waiter=holders, cancel=st.booleans())
    @recorded("blocks")
    def waiter_woken_by_release(self, ref: Ref, waiter: str, cancel: bool) -> Ref:
        tenancy = self._tenancy(ref)
        exhausted = len(self.driver.ledger.open) == self.driver.num_blocks
        if tenancy is None or not exhausted or tenancy.total_refs != 1 or waiter == ref.holder:
            return ref  # not applicable (a holder cannot wait and release at once): keep it
        return self._ref(
            waiter, self._do(lambda: self.driver.probe_wakeup(waiter, ref.holder, ref.block, cancel))
        )

    @rule(programs=batches())
    @recorded()
    def concurrent_batch(self, programs: list[list[tuple[str, Any]]]) -> None:
        if self.options.batches:
            self._do(lambda: self.driver.run_batch(programs))

    # -- checks --------------------------------------------------------------------------------

    @invariant()
    @recorded()
    def pool_is_consistent(self) -> None:
        self._do(self.driver.check_quiet)

    def teardown(self) -> None:
        try:
            self._do(self.driver.drain)
        finally:
            self.driver.close()
        if self.violation is not None:
            self.violation.program = self.recorder.program()
            raise self.violation

    def _do(self, step: Callable[[], Any]) -> Any:
        """Run a driver step unless a violation was found; keep the first violation."""
        if self.violation is not None:
            return None
        try:
            return step()
        except InvariantViolation as violation:
            self.violation = violation
            return None

    def _ref(self, holder: str, block_id: int | None) -> Ref:
        if block_id is None or self.violation is not None:
            return Ref(holder, -1, NO_BLOCK_TENANCY)
        return Ref(holder, block_id, self.driver.ledger.open[block_id].number)

    def _refs(self, holder: str, n: int, block_ids: list[int] | None) -> MultipleResults[Ref]:
        """n Refs for a batch, one per block it returned (no-block Refs where none came)."""
        if block_ids is None or self.violation is not None or len(block_ids) != n:
            return multiple(*(Ref(holder, -1, NO_BLOCK_TENANCY) for _ in range(n)))
        return multiple(*(self._ref(holder, block_id) for block_id in block_ids))

    def _tenancy(self, ref: Ref) -> Any:
        if self.violation is not None:
            return None
        tenancy = self.driver.ledger.open.get(ref.block)
        if tenancy is None or tenancy.number != ref.tenancy or ref.holder not in tenancy.refs:
            return None
        return tenancy

    def _unheld(self, ref: Ref) -> bool:
        return self.violation is None and ref.block >= 0 and ref.block not in self.driver.ledger.open


DEFAULT_SETTINGS = settings(
    max_examples=100,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def _runs_on(factory: Callable[..., Any], name: str, options: MachineOptions) -> None:
    """An async pool that cannot run on ``options.backend`` though it runs on the other is the
    caller's setup error, said at once with the backend to choose (as ``kvstress fuzz`` says
    it), not a 'crash' blamed on the pool at the first example (a blind user's trio pool)."""
    if not is_async_factory(factory):
        return
    from kvstress.fuzz._target import TargetError, _check_backend

    try:
        _check_backend(name, factory, options.num_blocks, options.block_shape, options.backend)
    except TargetError as error:
        said = re.sub(r"choose --backend (\w+)", r"choose backend='\1'", str(error))
        raise ValueError(f"backend: {said}") from None


def pool_machine(
    factory: Callable[..., Any],
    *,
    num_blocks: int = 3,
    block_shape: tuple[int, ...] = (2, 4),
    dtype: torch.dtype = torch.float32,
    device: str | None = None,
    backend: str = "asyncio",
    backend_options: dict[str, Any] | None = None,
    timing: TimingPolicy | None = None,
    batches: bool = True,
    settings: settings | None = None,
    check_backend: bool = True,
) -> type[PoolMachine]:
    """A state machine class for ``factory``'s pool: ``TestMyPool = pool_machine(MyPool).TestCase``.

    ``factory`` is any pool class or callable with the protocol's constructor; threaded or async
    is told from the pool. ``backend`` picks asyncio or trio for async pools; an async pool that
    runs only on the other one is a ValueError naming it (one round of calls on each, in
    milliseconds; ``check_backend=False`` skips it where the caller has checked). ``settings``
    replaces the default Hypothesis settings of the generated TestCase.
    """
    if not callable(factory):
        raise ValueError(f"factory must be a pool class or callable, got {factory!r}")
    options = MachineOptions(
        # Checked here, not first when the TestCase runs (a blind tester's num_blocks=0).
        num_blocks=check_num_blocks(num_blocks),
        block_shape=check_block_shape(block_shape),
        dtype=dtype,
        device=device,
        backend=backend,
        backend_options=dict(backend_options or {}),
        timing=timing or TimingPolicy(),
        batches=batches,
    )
    name = getattr(factory, "__name__", "Pool")
    if check_backend:
        _runs_on(factory, name, options)
    machine = type(
        f"{name}Machine",
        (PoolMachine,),
        {"factory": staticmethod(factory), "options": options, "__module__": PoolMachine.__module__},
    )
    machine.TestCase.settings = settings or DEFAULT_SETTINGS  # type: ignore[attr-defined]
    return machine
