"""InvariantViolation.details: what a failing test (an explored one above all) shows of the run."""

from __future__ import annotations

import functools

import pytest

import kvstress
from kvstress._violation import BlockRecord, InvariantViolation, Operation


def _op(index: int, worker: str, name: str, block: int, result: object = True) -> Operation:
    return Operation(index, worker, name, {"block": block}, float(index), float(index), "ok", result)


def test_details_numbers_operations_and_shows_one_the_message_cites() -> None:
    history = tuple(_op(i, f"w{i % 3}", "release", i) for i in range(40))
    found = InvariantViolation("double-release", "w1 released block 5, ended by w2 (operation 5)", history)
    lines = found.details(last=4).splitlines()
    assert lines[1] == "last 4 of 40 operations, and those cited:"
    assert lines[2] == "  #5 w2: release(block=5) -> True"
    assert lines[3:] == [f"  #{i} w{i % 3}: release(block={i}) -> True" for i in range(36, 40)]


def test_details_of_a_big_pool_shows_the_blocks_that_are_not_plainly_free() -> None:
    free = [BlockRecord(i, "FREE", 0, (), True) for i in range(100)]
    free[7] = BlockRecord(7, "IN_USE", 1, ("w0",), False)
    free[9] = BlockRecord(9, "FREE", 0, (), False)  # free but not queued: worth a row
    found = InvariantViolation("lost-block", "block 9 is lost", (), tuple(free))
    lines = found.details().splitlines()
    assert lines[1] == "blocks (2 of 100: the first not plainly free):"
    assert [line.split()[0] for line in lines[2:]] == ["7", "9"]
    small = InvariantViolation("lost-block", "x", (), tuple(free[:3]))
    assert small.details().splitlines()[1] == "blocks:" and len(small.details().splitlines()) == 5


def test_an_explored_failure_carries_its_history_before_its_schedule() -> None:
    """No report file for an explored test: the failure's notes hold its operations."""

    async def double_release() -> None:
        async with kvstress.audit(kvstress.AsyncBlockPool(2, (2,))) as pool:
            block = await pool.acquire(0)
            await pool.release(block)
            await pool.release(block)

    with pytest.raises(InvariantViolation) as caught:
        kvstress.explore(functools.partial(double_release), schedules=3, seed=0)
    notes = caught.value.__notes__
    assert notes[0].startswith("last 3 of 3 operations")
    assert "#2 " in notes[0] and "stale handle" in notes[0] and "blocks:" in notes[0]
    assert "schedule: ks1:" in notes[-1]
