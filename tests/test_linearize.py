"""The linearizability checker: hand-written histories, and properties over simulated ones."""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from kvstress import Operation
from kvstress.linearize import LinearizabilityResult, check_history
from kvstress.linearize._check import fair_excused
from kvstress.linearize._model import ANY_BLOCK as ANY
from kvstress.linearize._model import EMPTY_POOL as EMPTY
from kvstress.linearize._model import BlockOp, operation_index, part_index, step, translate
from kvstress.scenarios._execution import unlinearizable


@dataclass
class History:
    """Builds a history: each call appends one operation with the next index."""

    ops: list[Operation] = field(default_factory=list)

    def add(
        self,
        worker: str,
        name: str,
        args: Mapping[str, Any],
        start: float,
        end: float | None,
        result: Any = None,
        outcome: str = "ok",
    ) -> int:
        """Append one operation; returns its index."""
        index = len(self.ops)
        self.ops.append(Operation(index, worker, name, dict(args), start, end, outcome, result))
        return index

    def acquire(self, worker: str, start: float, end: float | None, block: Any, outcome: str = "ok") -> int:
        """An acquire that answered ``block``."""
        return self.add(worker, "acquire", {"timeout": 0.0}, start, end, block, outcome)

    def release(
        self, worker: str, start: float, end: float | None, block: int, result: Any, **extra: Any
    ) -> int:
        """A release of ``block`` that answered ``result``."""
        outcome = "pending" if end is None else extra.pop("outcome", "ok")
        return self.add(worker, "release", {"block": block, **extra}, start, end, result, outcome)

    def check(self, num_blocks: int, time_limit: float = 5.0) -> LinearizabilityResult:
        """The checker's verdict."""
        return check_history(self.ops, num_blocks, time_limit=time_limit)


# -- hand-written histories ----------------------------------------------------------------------


def test_sequential_life_cycle_is_ok() -> None:
    """acquire, retain, mark, two releases and a fresh acquire, one after another, are ok."""
    h = History()
    h.acquire("w0", 0, 1, 0)
    h.add("w0", "retain", {"block": 0, "for": "w1"}, 2, 3)
    h.add("w0", "mark_in_use", {"block": 0}, 4, 5)
    h.add("w0", "write", {"block": 0, "canary": 1.0}, 5, 6)
    h.release("w0", 6, 7, 0, False)
    h.release("w1", 8, 9, 0, True)
    h.acquire("w1", 10, 11, 0)
    result = h.check(1)
    assert result.status == "ok", result


def test_overlapping_acquires_of_different_blocks_are_ok() -> None:
    """Two concurrent acquires handing out different blocks are ok."""
    h = History()
    h.acquire("w0", 0, 2, 1)
    h.acquire("w1", 1, 3, 0)
    assert h.check(2).status == "ok"


def test_release_overlapping_the_next_acquire_of_its_block_is_ok() -> None:
    """An acquire that overlaps the release of the same block can follow it."""
    h = History()
    h.acquire("w0", 0, 1, 0)
    h.release("w0", 2, 4, 0, True)
    h.acquire("w1", 3, 5, 0)
    assert h.check(1).status == "ok"


def test_one_block_handed_out_twice_is_a_violation() -> None:
    """Two overlapping acquires answering the same block, with no release between, fail."""
    h = History()
    first = h.acquire("w0", 0, 2, 0)
    second = h.acquire("w1", 1, 3, 0)
    result = h.check(2)
    assert (result.status, result.block, result.witness) == ("violation", 0, (first, second))
    assert "w1: acquire(timeout=0.0) -> 0" in result.message


def test_two_true_releases_of_one_tenancy_are_a_violation() -> None:
    """Release answering True twice for one acquire fails; the witness keeps the acquire."""
    h = History()
    h.acquire("w0", 0, 1, 0)
    h.release("w0", 2, 3, 0, True)
    h.release("w1", 4, 5, 0, True)
    result = h.check(1)
    assert (result.status, result.block, result.witness) == ("violation", 0, (0, 1, 2))


def test_last_reference_released_with_false_is_a_violation() -> None:
    """A release of the only reference must answer True."""
    h = History()
    h.acquire("w0", 0, 1, 0)
    h.release("w0", 2, 3, 0, False)
    assert h.check(1).status == "violation"


def test_none_while_another_block_sat_free_is_a_violation() -> None:
    """acquire answering None while a block was FREE throughout its call fails."""
    h = History()
    h.acquire("w0", 0, 1, 0)
    empty = h.acquire("w1", 2, 3, None, outcome="info")
    result = h.check(2)
    assert (result.status, result.block, result.witness) == ("violation", None, (empty,))


def test_a_batch_try_once_refused_beside_a_free_block_is_named_as_called() -> None:
    """The refused call is named as it was made: ``acquire_many`` (a blind user read "acquire
    returned None" for an ``acquire_many(n=1, timeout=0)``)."""
    h = History()
    h.acquire("w0", 0, 1, 0)
    empty = h.add("w1", "acquire_many", {"n": 1, "timeout": 0.0}, 2, 3, None, "info")
    result = h.check(2)
    assert (result.status, result.witness) == ("violation", (empty,))
    said = "acquire_many returned None, but at every instant of its call some block was FREE"
    assert said in result.message


def test_a_witness_names_a_batch_by_its_own_index_and_the_report_shows_it() -> None:
    """A block a batch took stands in the model as a part of it, under an index no operation
    has; a witness that held one (a block of a batch, given back, FREE beside a refused try-once)
    named no operation, and the report's translation of it raised IndexError: exit 3, and a real
    finding lost (a blind user's FIFO pool)."""
    h = History()
    for at in (0, 4):  # operations before the batch: its parts' indexes are past -1024
        h.acquire("w0", at, at + 1, 0)
        h.release("w0", at + 2, at + 3, 0, True)
    batch = h.add("w1", "acquire_many", {"n": 2, "timeout": 0.0}, 10, 11, [0, 1])
    given = h.release("w1", 12, 13, 1, True)  # the batch's second block: block 0 stays held
    empty = h.acquire("w2", 14, 15, None, outcome="info")
    result = h.check(2)
    assert result.status == "violation"
    assert set(result.witness) == {batch, given, empty}, result.witness
    violation = unlinearizable(tuple(h.ops), result)
    assert violation.invariant == "lost-block"
    assert "acquire_many" in result.message


def test_a_witness_holding_a_batch_s_part_names_the_batch() -> None:
    """A batch still in flight stands in the model as one wildcard per block it may take, the
    parts past its first under indexes no operation has (``part_index``). A witness holding one
    (a blind user's FIFO pool: ``[-3079, 10, 14]``) raised IndexError in the report's
    translation of it: exit 3, and a real finding lost. The witness names the batch itself."""
    h = History()
    for at in (0, 4):  # operations before the batch, so its parts' indexes pass -1024
        h.acquire("w0", at, at + 1, 0)
        h.release("w0", at + 2, at + 3, 0, True)
    batch = h.add("w1", "acquire_many", {"n": 2, "timeout": 1.0}, 10, None, None, "pending")
    result = check_history(h.ops, 2)
    model = translate(h.ops, 2)
    assert [w.index for w in model.wildcards] == [batch, part_index(batch, 1)]
    assert part_index(batch, 1) < -1024 and operation_index(part_index(batch, 1)) == batch
    faked = replace(result, status="violation", witness=(part_index(batch, 1), 0, 3))
    violation = unlinearizable(tuple(h.ops), faked)  # raised IndexError
    assert violation.invariant == "lost-block"


def test_none_while_the_pool_was_empty_at_one_instant_is_ok() -> None:
    """acquire answering None is ok when every block was held at some instant of its call."""
    h = History()
    h.acquire("w0", 0, 1, 0)
    h.acquire("w1", 2, 4, 1)  # the pool may be empty from its linearization on
    h.release("w0", 5, 7, 0, True)
    h.acquire("w2", 3, 6, None, outcome="info")  # empty in [4, 5] and maybe later
    assert h.check(2).status == "ok"


def test_none_across_staggered_tenancies_is_a_violation() -> None:
    """Each block held during part of the call, never both at once: no empty instant."""
    h = History()
    h.acquire("w0", 0, 1, 0)
    h.release("w0", 5, 5.5, 0, True)
    h.acquire("w1", 5.6, 6, 1)
    empty = h.acquire("w2", 2, 8, None, outcome="info")
    result = h.check(2)
    assert (result.status, result.block) == ("violation", None)
    assert empty in result.witness
    sub = [op for op in h.ops if op.index in result.witness]
    assert check_history(sub, 2).status == "violation"


def test_cancelled_acquire_may_have_taken_the_block() -> None:
    """A cancelled acquire may hold the block nobody saw, which explains a later None."""
    h = History()
    h.acquire("w0", 0, 1, "cancelled", outcome="info")
    h.acquire("w1", 2, 3, None, outcome="info")
    assert h.check(1).status == "ok"


def test_cancelled_acquire_cannot_take_a_block_handed_out_later() -> None:
    """If the cancelled acquire took the only block, no later acquire gets it: a violation."""
    h = History()
    h.acquire("w0", 0, 1, "cancelled", outcome="info")
    h.acquire("w1", 2, 3, None, outcome="info")
    h.acquire("w2", 4, 5, 0)
    assert h.check(1).status == "violation"


def test_one_cancelled_acquire_explains_one_block_only() -> None:
    """A wildcard may be used by one block: two blocks both needing it is a violation."""
    h = History()
    h.acquire("w0", 0, 1, "cancelled", outcome="info")
    h.acquire("w1", 2, 3, None, outcome="info")
    assert h.check(2).status == "violation"


@pytest.mark.parametrize(
    ("try_at", "settle", "status"), [(0.3, 0.0, "ok"), (0.6, 0.1, "ok"), (0.8, 0.1, "violation")]
)
def test_a_cancelled_acquire_may_be_served_until_its_deadline_and_give_the_block_back(
    try_at: float, settle: float, status: str
) -> None:
    """A worker thread (or an actor) still waits for a block on behalf of a cancelled acquire
    until its deadline: it takes the block as it is released, finds its caller gone and gives it
    back within ``settle``. A try-once meanwhile finds no block free, and a later acquire gets
    the block again: correct (CI's false lost-block on an async face over worker threads). Past
    the deadline and the settle, the None is a violation again."""
    h = History()
    h.acquire("w0", 0.0, 0.01, 0)
    h.add("w0", "acquire", {"timeout": 0.5}, 0.02, 0.03, "cancelled", "info")
    h.release("w0", 0.04, 0.05, 0, True)
    h.acquire("w1", try_at, try_at + 0.01, None)
    h.acquire("w1", 1.0, 1.01, 0)
    assert check_history(h.ops, 1, time_limit=5.0, settle=settle).status == status


@pytest.mark.parametrize(("try_at", "status"), [(0.1, "ok"), (0.2, "violation")])
def test_a_cancelled_try_once_is_served_until_the_settle_after_its_return(try_at: float, status: str) -> None:
    h = History()
    h.acquire("w0", 0.0, 0.01, "cancelled", outcome="info")
    h.acquire("w1", try_at, try_at + 0.01, None)
    h.acquire("w2", 0.5, 0.51, 0)
    assert check_history(h.ops, 1, time_limit=5.0, settle=0.1).status == status


def test_the_settle_must_be_a_number_of_seconds() -> None:
    with pytest.raises(ValueError, match="settle"):
        check_history([], 1, settle=-1.0)


@pytest.mark.parametrize(("pending_start", "status"), [(11, "ok"), (12, "violation")])
def test_wildcards_and_an_empty_instant_settled_together(pending_start: float, status: str) -> None:
    """Each block needs its own wildcard at the one empty instant: the pool-wide search decides."""
    h = History()
    h.acquire("w0", 6, 7, "cancelled", outcome="info")  # takes block 0 before its release
    h.release("w1", 9, 11, 0, True)
    h.acquire("w2", pending_start, None, None, outcome="pending")  # takes block 1 at 11, or too late
    h.acquire("w3", 8, 13, None, outcome="info")  # empty only at 11, between the two
    assert h.check(2).status == status


def test_pending_release_may_have_taken_effect() -> None:
    """A release that never returned may have freed the block for a later acquire."""
    h = History()
    h.acquire("w0", 0, 1, 0)
    h.release("w0", 2, None, 0, None)
    h.acquire("w1", 3, 4, 0)
    assert h.check(1).status == "ok"


def test_pending_acquire_may_never_take_effect() -> None:
    """An acquire that never returned constrains nothing when it took nothing."""
    h = History()
    h.acquire("w0", 0, None, None, outcome="pending")
    h.acquire("w1", 1, 2, 0)
    h.release("w1", 3, 4, 0, True)
    assert h.check(1).status == "ok"


def test_stale_double_release_answering_false_is_ok() -> None:
    """A double release through an old handle answers False even while someone else holds the block."""
    h = History()
    h.acquire("w0", 0, 1, 0)
    h.release("w0", 2, 3, 0, True)
    h.acquire("w1", 4, 5, 0)
    h.release("w0", 6, 7, 0, False, double=True)
    assert h.check(1).status == "ok"


def test_refused_misuse_is_ok() -> None:
    """A retain on a FREE block that raised is what the protocol asks for."""
    h = History()
    h.add("w0", "retain", {"block": 0, "for": "w1", "misuse": True}, 0, 1, "InvalidTransition: x", "raised")
    h.acquire("w0", 2, 3, 0)
    assert h.check(1).status == "ok"


def test_witness_keeps_the_tenancy_it_breaks() -> None:
    """The witness fails on its own, passes without its last operation, and skips other blocks."""
    h = History()
    h.acquire("w0", 0, 1, 0)
    h.acquire("w1", 2, 3, 1)
    h.release("w0", 4, 5, 0, True)
    h.release("w1", 6, 7, 1, True)
    h.release("w0", 8, 9, 0, True)
    result = h.check(2)
    assert (result.status, result.block, result.witness) == ("violation", 0, (0, 2, 4))


def test_id_out_of_range_is_a_violation() -> None:
    """An acquire answering an id outside the pool fails, naming the id."""
    h = History()
    bad = h.acquire("w0", 0, 1, 7)
    result = h.check(2)
    assert (result.status, result.witness) == ("violation", (bad,))
    assert "acquire returned 7" in result.message


def test_quiet_check_operations_are_ignored() -> None:
    """The harness's own check operations do not count as pool operations."""
    h = History()
    h.add("harness", "check", {}, 0, 1, {"free_count": 1, "free_ids": [0]})
    h.acquire("w0", 2, 3, 0)
    assert h.check(1).status == "ok"


def test_time_limit_yields_unknown() -> None:
    """A search the time limit cuts short answers unknown, never a violation."""
    h = History()
    h.acquire("w0", 0, 1, 0)
    for k in range(12):  # one release short of explaining the True: an exhaustive search
        h.add(f"r{k}", "retain", {"block": 0, "for": "x"}, 2, 3)
        if k:
            h.release(f"f{k}", 2, 3, 0, False)
    h.release("t", 2, 3, 0, True)
    result = h.check(1, time_limit=0.05)
    assert result.status == "unknown", result
    assert h.check(1, time_limit=0.0).status == "unknown"


def test_bad_arguments_are_named() -> None:
    """num_blocks and time_limit are checked, and the error names them."""
    with pytest.raises(ValueError, match="num_blocks"):
        check_history([], -1)
    with pytest.raises(ValueError, match="time_limit"):
        check_history([], 1, time_limit=-1.0)
    with pytest.raises(ValueError, match="status"):
        LinearizabilityResult("maybe")


# -- simulated histories -------------------------------------------------------------------------


@dataclass
class Simulation:
    """A correct pool run one operation at a time; operation k takes effect at time k + 1."""

    rng: random.Random
    num_blocks: int
    workers: int
    refcounts: list[int] = field(default_factory=list)
    held: dict[str, list[int]] = field(default_factory=dict)
    released: dict[str, list[int]] = field(default_factory=dict)
    steps: list[tuple[str, str, dict[str, Any], Any, str]] = field(default_factory=list)
    before: list[tuple[int, ...]] = field(default_factory=list)  # refcounts before each step

    def run(self, count: int, cancels: bool) -> None:
        """Take ``count`` steps, each by a random worker."""
        self.refcounts = [0] * self.num_blocks
        names = [f"w{k}" for k in range(self.workers)]
        self.held = {w: [] for w in names}
        self.released = {w: [] for w in names}
        for _ in range(count):
            self.before.append(tuple(self.refcounts))
            self.steps.append(self._step(self.rng.choice(names), cancels))

    def _step(self, w: str, cancels: bool) -> tuple[str, str, dict[str, Any], Any, str]:
        rng, mine = self.rng, self.held[w]
        free = [b for b, rc in enumerate(self.refcounts) if rc == 0]
        move = rng.choice(["acquire", "acquire", "release", "retain", "mark", "double", "cancel", "misuse"])
        if move == "cancel" and cancels:
            if free and rng.random() < 0.5:
                self.refcounts[rng.choice(free)] = 1  # taken, never seen by anyone: leaked
            return (w, "acquire", {"timeout": None}, "cancelled", "info")
        if move == "misuse" and free:
            return (w, "retain", {"block": rng.choice(free), "for": w, "misuse": True}, "refused", "raised")
        if move == "double" and self.released[w]:
            return (w, "release", {"block": rng.choice(self.released[w]), "double": True}, False, "ok")
        if move in ("release", "retain", "mark") and mine:
            block = rng.choice(mine)
            if move == "mark":
                return (w, "mark_in_use", {"block": block}, None, "ok")
            if move == "retain":
                self.refcounts[block] += 1
                self.held[rng.choice(list(self.held))].append(block)
                return (w, "retain", {"block": block, "for": w}, None, "ok")
            mine.remove(block)
            self.refcounts[block] -= 1
            self.released[w].append(block)
            return (w, "release", {"block": block}, self.refcounts[block] == 0, "ok")
        if not free:
            return (w, "acquire", {"timeout": 0.0}, None, "info")
        block = rng.choice(free)
        self.refcounts[block] = 1
        mine.append(block)
        return (w, "acquire", {"timeout": 0.0}, block, "ok")

    def history(self, overlap: bool, pend_last: bool) -> list[Operation]:
        """Operations whose intervals contain their step's time; ``overlap`` widens them at random."""
        ops: list[Operation] = []
        last_end: dict[str, float] = {}
        next_time = self._next_times()
        for k, (w, name, args, result, outcome) in enumerate(self.steps):
            t = k + 1.0
            start = self.rng.uniform(last_end.get(w, 0.0), t) if overlap else t
            later = next_time[k]
            end: float | None = self.rng.uniform(t, later or t + 3.0) if overlap else t + 0.5
            if pend_last and later is None and name in ("acquire", "release"):
                end, outcome = None, "pending"
            last_end[w] = start if end is None else end
            ops.append(Operation(k, w, name, args, start, end, outcome, result))
        return ops

    def _next_times(self) -> list[float | None]:
        """The time of each step's worker's next step (its interval ends before it); None for the last."""
        following: dict[str, float] = {}
        out: list[float | None] = [None] * len(self.steps)
        for k in range(len(self.steps) - 1, -1, -1):
            w = self.steps[k][0]
            out[k] = following.get(w)
            following[w] = k + 1.0
        return out


def simulate(rng: random.Random, blocks: int, workers: int, count: int, cancels: bool) -> Simulation:
    """A finished simulation."""
    sim = Simulation(rng, blocks, workers)
    sim.run(count, cancels)
    return sim


runs = st.tuples(st.randoms(use_true_random=False), st.integers(1, 4), st.integers(2, 4), st.integers(1, 40))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs, st.booleans(), st.booleans())
def test_correct_histories_are_ok(
    run: tuple[random.Random, int, int, int], cancels: bool, pend: bool
) -> None:
    """A correct pool's history, with overlapping intervals around a legal order, is ok."""
    rng, blocks, workers, count = run
    sim = simulate(rng, blocks, workers, count, cancels)
    ops = sim.history(overlap=True, pend_last=pend)
    result = check_history(ops, blocks, time_limit=10.0)
    assert result.status == "ok", result


@settings(max_examples=300, deadline=None)
@given(runs, st.sampled_from(["flip", "duplicate"]), st.data())
def test_mutated_sequential_histories_are_violations(
    run: tuple[random.Random, int, int, int], mutation: str, data: st.DataObject
) -> None:
    """A sequential history with a flipped last release or a block handed out twice fails."""
    rng, blocks, workers, count = run
    # A block a cancelled acquire took is held by nobody anyone saw: handing it out may be fine.
    sim = simulate(rng, blocks, workers, count, cancels=mutation == "flip")
    ops = sim.history(overlap=False, pend_last=False)
    if mutation == "flip":
        targets = [op for op in ops if op.name == "release" and op.result is True]
        assume(targets)
        op = data.draw(st.sampled_from(targets))
        ops[op.index] = replace(op, result=False)
    else:
        targets = [
            (op, b)
            for op in ops
            if op.name == "acquire" and op.outcome == "ok"
            for b, rc in enumerate(sim.before[op.index])
            if rc > 0
        ]
        assume(targets)
        op, block = data.draw(st.sampled_from(targets))
        ops[op.index] = replace(op, result=block)
    result = check_history(ops, blocks, time_limit=10.0)
    assert result.status == "violation", result
    sub = [o for o in ops if o.index in result.witness]
    assert check_history(sub, blocks, time_limit=10.0).status == "violation"


# -- against a brute-force oracle on small random histories --------------------------------------


def oracle(ops: list[Operation], num_blocks: int) -> bool:
    """Linearizable, by trying every order of the whole pool's operations (no partitioning)."""
    model = translate(ops, num_blocks)
    if model.bad:
        return False
    steps = [(b, op) for b, block in enumerate(model.blocks) for op in block]
    steps += [(ANY, op) for op in model.wildcards] + [(EMPTY, op) for op in model.empties]
    seen: set[tuple[frozenset[int], tuple[int, ...]]] = set()

    def outcomes(target: int, op: BlockOp, state: tuple[int, ...]) -> list[tuple[int, ...]]:
        if target == EMPTY:
            return [state] if all(state) else []
        if target == ANY:
            return [state] + [(*state[:b], 1, *state[b + 1 :]) for b in range(num_blocks) if not state[b]]
        return [(*state[:target], rc, *state[target + 1 :]) for rc in step(op.kind, state[target])]

    def search(done: frozenset[int], state: tuple[int, ...]) -> bool:
        if len(done) == len(steps):
            return True
        if (done, state) in seen:
            return False
        seen.add((done, state))
        waiting = [k for k in range(len(steps)) if k not in done]
        for k in waiting:
            target, op = steps[k]
            if any(steps[j][1].hi < op.lo for j in waiting):
                continue  # something that must come first has not happened yet
            if any(search(done | {k}, after) for after in outcomes(target, op, state)):
                return True
        return False

    return search(frozenset(), (0,) * num_blocks)


def strict(ops: list[Operation], blocks: int) -> list[Operation]:
    """``ops`` less the Nones that fairness excuses (tested on their own): the oracle knows
    only the strict model."""
    excused = fair_excused(ops, blocks)
    return [op for op in ops if op.index not in excused]


@st.composite
def random_histories(draw: st.DrawFn) -> tuple[list[Operation], int]:
    """Up to 7 operations with random times, answers and outcomes: many are not linearizable."""
    blocks = draw(st.integers(1, 3))
    ops = []
    for index in range(draw(st.integers(1, 7))):
        name = draw(st.sampled_from(["acquire", "acquire", "release", "retain", "mark_in_use"]))
        start = draw(st.integers(0, 8))
        end = start + draw(st.integers(0, 4))
        outcome = draw(st.sampled_from(["ok", "ok", "ok", "info", "pending", "raised"]))
        if name == "acquire":
            result = draw(st.sampled_from([None, "cancelled", *range(blocks)]))
            args: dict[str, Any] = {"timeout": 0.0}
        else:
            result = draw(st.sampled_from([True, False, None])) if name == "release" else None
            args = {"block": draw(st.integers(0, blocks - 1))}
            if name == "release" and draw(st.booleans()):
                args["double"] = True
        final = None if outcome == "pending" else float(end)
        ops.append(Operation(index, f"w{index}", name, args, float(start), final, outcome, result))
    return ops, blocks


@settings(max_examples=1500, deadline=None)
@given(random_histories())
def test_agrees_with_the_brute_force_oracle(case: tuple[list[Operation], int]) -> None:
    """On small random histories the verdict matches trying every order (unknown is allowed)."""
    ops, blocks = case
    result = check_history(ops, blocks, time_limit=10.0)
    if result.status != "unknown":
        assert (result.status == "ok") == oracle(strict(ops, blocks), blocks), result
    if result.status == "violation":
        assert not oracle(strict([op for op in ops if op.index in result.witness], blocks), blocks)


def test_none_while_a_concurrent_acquire_holds_a_unit_of_capacity_is_ok() -> None:
    """A semaphore-and-queue pool: w2's acquire takes a unit at its start and its block only
    later (block 0, held by w0 meanwhile), so w1's try-once fails though block 1 sits queued."""
    h = History()
    h.acquire("w0", 0, 1, 0)
    h.acquire("w2", 0.5, 9, 0)  # a unit from 0.5; block 0 once w0 gives it back
    h.acquire("w1", 2, 3, None, outcome="info")  # block 1 queued, its unit held by w2
    h.release("w0", 5, 6, 0, True)
    assert h.check(2).status == "ok"


def test_none_while_a_hand_off_is_in_flight_is_ok() -> None:
    """A FIFO pool hands a released block to the waiter queued first; a newcomer's try-once
    fails meanwhile, and the waiter's timeout races the hand-off: it passes the block on."""
    h = History()
    h.acquire("w0", 0, 1, 0)
    h.acquire("w1", 2, 8, None, outcome="info")  # queued; times out as the block reaches it
    h.release("w0", 5, 6, 0, True)  # handed to w1
    h.acquire("w2", 7, 7.5, None, outcome="info")  # the queue is busy: refused
    assert h.check(1).status == "ok"


def _semaphore_queue(handed_off: bool) -> History:
    """Three blocks on ``asyncio.Semaphore``, which refuses a newcomer while any waiter is
    queued: w1 waits and is handed block 0; while it has not run, w2 queues behind it though
    blocks 1 and 2 are FREE, and is chain-woken only once w1 runs; w3's try-once meanwhile finds
    the queue busy, with block 2 FREE throughout. Without the hand-off w1 never waited, nothing
    queued w2, and the refusal is a finding."""
    h = History()
    for block in range(3):
        h.acquire("w0", block, block + 0.5, block)
    if handed_off:
        h.add("w1", "acquire", {"timeout": 0.05}, 3, 9, 0)  # waits; handed block 0 at 4
    h.release("w0", 3.5, 4, 0, True)
    h.release("w0", 4.5, 5, 1, True)
    h.release("w0", 5.2, 5.5, 2, True)
    if not handed_off:
        h.add("w1", "acquire", {"timeout": 0.05}, 5.7, 5.8, 0)  # takes block 0 at once
    h.add("w2", "acquire", {"timeout": 0.05}, 6, 12, 1)  # queued behind w1 (or not)
    h.acquire("w3", 10, 10.5, None, outcome="info")
    return h


def test_a_try_once_behind_a_waiter_queued_behind_a_hand_off_is_ok() -> None:
    """A blind tester's pool on ``asyncio.Semaphore.locked()`` was reported lost-block: its
    try-once failed with a block FREE while a waiter, queued behind a woken one, had not run."""
    assert _semaphore_queue(handed_off=True).check(3).status == "ok"
    assert _semaphore_queue(handed_off=False).check(3).status == "violation"


def test_none_after_the_hand_off_has_settled_is_a_violation() -> None:
    """Once the waiter the block was handed to has given up, the block is FREE again: a
    try-once that then answers None, with nothing else in flight, lost it."""
    h = History()
    h.acquire("w0", 0, 1, 0)
    h.acquire("w1", 2, 8, None, outcome="info")
    h.release("w0", 5, 6, 0, True)
    late = h.acquire("w2", 9, 10, None, outcome="info")
    result = h.check(1)
    assert result.status == "violation" and late in result.witness


def test_one_unit_in_flight_does_not_excuse_two_free_blocks() -> None:
    """A concurrent acquire that began with blocks free (no hand-off) may hold one unit: a None
    while two blocks sit FREE is still a violation."""
    h = History()
    h.acquire("w1", 2, 6, 1)  # took its block at once: no unit left over
    empty = h.acquire("w2", 3, 4, None, outcome="info")
    result = h.check(3)
    assert result.status == "violation" and empty in result.witness


def test_two_acquires_in_flight_for_one_block_leave_one_unit_spare() -> None:
    """Two acquires take a unit each at their start and, one after the other, block 0: while
    both are in flight the second's unit covers block 1, so a try-once may fail."""
    h = History()
    h.acquire("w1", 0, 11, 0)
    h.acquire("w2", 0.5, 2.5, 0)
    h.acquire("w0", 1, 1.5, None, outcome="info")  # blocks 0 and 1 queued, both units held
    h.release("w2", 7, 7.5, 0, True)
    h.acquire("w0", 2, 8, 1)
    assert h.check(2).status == "ok"


def test_none_while_a_release_has_not_given_its_unit_back_is_ok() -> None:
    """A semaphore pool queues the block, then gives the unit back: while w0's release is still
    in flight its block can come and go (w1), and a try-once then fails with block 0 queued."""
    h = History()
    h.acquire("w3", 0, 0.5, 1)  # block 1 stays held
    h.acquire("w0", 0.6, 0.8, 0)
    h.release("w0", 1, 20, 0, True)  # block queued at once, unit back at 20
    h.acquire("w1", 3, 4, 0)
    h.release("w1", 5, 6, 0, True)
    h.acquire("w2", 7, 8, None, outcome="info")
    assert h.check(2).status == "ok"


def test_a_release_whose_block_was_taken_again_may_still_hold_back_its_unit() -> None:
    """A semaphore over a set of ids, lowest first: w0's release queues block 0 and is paused
    before giving its unit back; w1 takes the only unit left (block 1's) and picks block 0, so
    a try-once fails with block 1 queued. Units are alike: the one w0 holds back is the one
    block 1 lacks (a false lost-block before)."""
    h = History()
    h.acquire("w0", 0, 1, 0)
    h.release("w0", 2, 20, 0, True)  # block 0 queued at once, unit back at 20
    h.acquire("w1", 3, 4, 0)  # took block 1's unit, and the lowest id
    h.acquire("w2", 5, 6, None, outcome="info")  # block 1 queued, no unit left
    assert h.check(2).status == "ok"


def test_a_release_whose_block_was_taken_again_excuses_one_free_block_only() -> None:
    """The same with three blocks and two of them queued: one unit held back explains one."""
    h = History()
    h.acquire("w0", 0, 1, 0)
    h.release("w0", 2, 20, 0, True)
    h.acquire("w1", 3, 4, 0)
    h.acquire("w2", 5, 6, None, outcome="info")
    assert h.check(3).status == "violation"


def test_an_acquire_waiting_on_a_block_still_being_released_holds_a_spare_unit() -> None:
    """w1 took a unit at its start and gets block 0 once w2's release of it ends; meanwhile
    block 1 is queued but both units are out (w1's, and w2's not yet given back)."""
    h = History()
    h.acquire("w1", 0, 19, 0)
    h.acquire("w2", 1, 2, 0)
    h.release("w2", 9, 13, 0, True)
    h.acquire("w0", 10, 11, None, outcome="info")
    h.acquire("w0", 12, 14, 1)
    assert h.check(2).status == "ok"


def test_a_newcomer_holding_a_semaphore_unit_excuses_a_try_once_none() -> None:
    """Recorded from TrioSemaphorePool (correct, fair) on trio: b2's acquire takes the
    semaphore's last unit and checkpoints before it takes a block; meanwhile b1's try-once
    fails beside a queued block. b2 later answers block 0, whose earlier tenancy overlaps its
    call, so block 0 is neither surely HELD nor surely FREE there: b2 may hold the unit."""
    import json
    from pathlib import Path

    from kvstress._violation import Operation

    raw = json.loads((Path(__file__).parent / "histories" / "trio_semaphore_handoff.json").read_text())
    history = tuple(Operation(**op) for op in raw)
    assert any(op.name == "acquire" and op.result is None and op.args["timeout"] == 0 for op in history)
    assert check_history(history, 2).status == "ok"


def test_a_fifo_gate_refuses_a_try_once_while_a_waiter_woken_behind_a_batch_has_not_run() -> None:
    """Recorded blind (a FIFO pool: ``if not self._waiters and len(self._free) >= n`` takes at
    once, anything else queues; 8 blocks). b0 holds one block and asks for all 8: it waits at the
    head from its start; b1 and b2 queue behind it. Its timeout wakes b1, which takes a block and
    wakes b2; before b2 runs, b1's try-once finds b2 queued and answers None beside five FREE
    blocks, as ``asyncio.Semaphore`` refuses a newcomer while a waiter is queued. That is the
    pool being fair, not losing blocks: b0's batch gave up after waiting, so it stood in the
    queue, and b2, begun behind it, too. (It was reported, and the report's translation of its
    witness, which held a part of b0's batch, raised IndexError: exit 3.)

    Had b2 begun before the batch (nobody queued, no hand-off to wait for), the None is a
    finding, and its witness names the batch by its own index, not its part's (-3079)."""
    import json
    from pathlib import Path

    from kvstress._violation import Operation

    raw = json.loads((Path(__file__).parent / "histories" / "fifo_gate_batch_parts.json").read_text())
    history = tuple(Operation(**op) for op in raw)
    refused = history[10]
    assert (refused.name, refused.args["timeout"], refused.result) == ("acquire", 0.0, None)
    assert history[3].name == "acquire_many" and history[3].result is None
    assert check_history(history, 8).status == "ok"

    raw[5]["start"] = raw[3]["start"] / 2  # b2 arrives before the batch
    early = tuple(Operation(**op) for op in raw)
    result = check_history(early, 8)
    assert result.status == "violation"
    assert set(result.witness) <= {op.index for op in early}, result.witness
    assert {3, 10} <= set(result.witness)
    assert unlinearizable(early, result).invariant == "lost-block"


def test_a_timed_out_waiter_passing_its_unit_on_excuses_a_try_once_none() -> None:
    """Recorded from AsyncioSemaphorePool (correct) after 456 s of soak: b0's timed wait gives
    up as a release hands it a unit, the unit goes on, and b0's next try-once fails while b2's
    acquire, begun meanwhile, is in flight."""
    import json
    from pathlib import Path

    from kvstress._violation import Operation

    raw = json.loads((Path(__file__).parent / "histories" / "asyncio_semaphore_soak.json").read_text())
    history = tuple(Operation(**op) for op in raw)
    assert check_history(history, 2).status == "ok"


def _hand_on(w1: tuple[float, float], timeout: float) -> tuple[History, int]:
    """Block 1 comes back at 4 and stays FREE; block 0 comes back at 6. w1 waits in ``w1``, w2
    queues at 6.2 and gets block 0, and w3's try-once fails at 7."""
    h = History()
    h.acquire("w9", 0, 0.5, 1)
    h.acquire("w0", 0, 1, 0)
    h.add("w1", "acquire", {"timeout": timeout}, *w1, None, "info")
    h.release("w9", 3, 4, 1, True)
    h.release("w0", 5, 6, 0, True)
    h.add("w2", "acquire", {"timeout": 0.5}, 6.2, 9, 0)
    return h, h.acquire("w3", 7, 7.5, None, outcome="info")


def test_a_waiter_giving_up_passes_its_unit_to_a_waiter_queued_behind_it() -> None:
    """asyncio's Semaphore: the releases hand units to w1, queued first; w1 times out as one
    arrives (6.5) and passes it on to w2, queued after it. w3's try-once then finds w2's
    hand-off in flight and fails, though block 1 sits queued."""
    h, _ = _hand_on((2, 6.5), 0.5)
    assert h.check(2).status == "ok"


def test_a_waiter_no_hand_off_could_reach_passes_nothing_on() -> None:
    """The same, but w1 gave up before any release ended: no unit reached it, nothing is handed
    on at its return, and w3's None beside FREE block 1 is a violation."""
    h, late = _hand_on((2, 2.8), 0.5)
    result = h.check(2)
    assert result.status == "violation" and late in result.witness


def test_a_try_once_never_waits_so_never_passes_a_unit_on() -> None:
    """A try-once that answered None took no unit to pass on, whatever ended during its call."""
    h, late = _hand_on((2, 6.5), 0.0)
    result = h.check(2)
    assert result.status == "violation" and late in result.witness


def _timed_none(excused: float | None, timeout: float = 0.0005) -> list[Operation]:
    """A fresh pool of one block; a timed acquire answers None, the block FREE all along."""
    observed = {"elapsed_s": timeout} if excused is None else {"elapsed_s": timeout, "excused_s": excused}
    return [Operation(0, "b1", "acquire", {"timeout": timeout}, 0.0, timeout, "info", None, observed)]


def test_a_timed_none_that_sat_through_a_jump_may_not_have_looked() -> None:
    """A timed acquire's None, the only block FREE throughout: a violation, unless time jumped
    while it was in flight (``excused_s``: a timer fired early, or the process stalled), when
    its deadline may have passed while it sat ready, before it looked (a controlled loop's
    anyio pool, which checkpoints before it looks, was a lost-wakeup under random). A try-once
    is judged either way."""
    assert check_history(_timed_none(None), 1).status == "violation"
    assert check_history(_timed_none(0.001), 1).status == "ok"
    assert check_history(_timed_none(0.001, timeout=0.0), 1).status == "violation"


def test_a_timed_none_not_judged_still_counts_as_in_flight() -> None:
    """A waiter (b1) that may have timed out before it looked is still an acquire in flight: its
    getter task may hold a unit meanwhile, which excuses a try-once's None beside it (a blind
    sweep's shielded-getter pool: the first version of the rule dropped b1 from the history
    altogether, and the try-once became a lost-block)."""
    excused = {"elapsed_s": 0.001, "excused_s": 0.001}
    t = [0.0005]  # one instant of virtual time, its calls apart by a float each (as recorded)
    for _ in range(4):
        t.append(math.nextafter(t[-1], 1.0))
    history = [
        Operation(0, "b1", "acquire", {"timeout": 0.0005}, t[0], 0.0015, "info", None, excused),
        Operation(1, "b0", "acquire", {"timeout": 0.0}, t[1], t[2], "ok", 1),
        Operation(2, "b0", "acquire", {"timeout": 0.0}, t[3], t[4], "info", None),
        Operation(3, "b2", "acquire", {"timeout": 1.0}, math.nextafter(t[4], 1.0), 0.0016, "ok", 0, excused),
    ]
    assert check_history(history, 2).status == "ok"
    assert check_history(history[1:], 2).status == "violation"  # the first version's reading
