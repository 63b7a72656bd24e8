"""Leak detection: time and holder always, stacks by level, suspects reported once, returns reported."""

from __future__ import annotations

import linecache
import time

import pytest
import structlog

from kvstress import LeakDetection, ThreadedBlockPool
from kvstress.pool._leaks import LeakTracker


def test_block_held_past_threshold_is_reported_once() -> None:
    """A block held longer than leak_threshold is a suspect once, counted in the metrics."""
    pool = ThreadedBlockPool(2, (2,), leak_threshold=0.01)
    block = pool.acquire()
    assert block is not None
    time.sleep(0.03)
    with structlog.testing.capture_logs() as logs:
        first = pool.check_leaks()
        second = pool.check_leaks()
    assert [s.block_id for s in first] == [block.id] and second == []
    assert first[0].held_for_s >= 0.01 and "MainThread" in first[0].holder
    assert [e["event"] for e in logs] == ["leak_suspect"]
    assert pool.metrics()["leak_suspect_count"] == 1


def test_suspect_returned_later_is_reported() -> None:
    """Releasing a reported block logs leak_suspect_returned and counts it (as HikariCP does)."""
    pool = ThreadedBlockPool(1, (2,), leak_threshold=0.01)
    block = pool.acquire()
    assert block is not None
    time.sleep(0.03)
    pool.check_leaks()
    with structlog.testing.capture_logs() as logs:
        pool.release(block)
    assert [e["event"] for e in logs] == ["leak_suspect_returned"]
    assert pool.metrics()["leak_returned_count"] == 1


def test_acquire_scans_for_leaks_without_a_background_thread() -> None:
    """Each acquire looks at the oldest holders, so suspects surface without check_leaks()."""
    pool = ThreadedBlockPool(3, (2,), leak_threshold=0.01)
    pool.acquire()
    time.sleep(0.03)
    pool.acquire()
    assert pool.metrics()["leak_suspect_count"] == 1


def test_blocks_within_threshold_are_not_suspects() -> None:
    """A short hold is never reported: no false alarms from the leak detector."""
    pool = ThreadedBlockPool(2, (2,), leak_threshold=60)
    block = pool.acquire()
    assert block is not None
    assert pool.check_leaks() == []
    pool.release(block)
    assert pool.metrics()["leak_suspect_count"] == 0


def test_no_threshold_means_no_reports() -> None:
    """Without leak_threshold the detector records holders but never reports."""
    pool = ThreadedBlockPool(1, (2,))
    pool.acquire()
    time.sleep(0.01)
    assert pool.check_leaks() == []
    assert pool.dump()[0].holder is not None


def test_paranoid_captures_every_stack_and_disabled_none() -> None:
    """PARANOID records a stack at every acquire; DISABLED records none."""
    paranoid = LeakTracker(LeakDetection.PARANOID, 128, None, 3)
    disabled = LeakTracker(LeakDetection.DISABLED, 128, None, 3)
    for block_id in range(3):
        paranoid.on_acquire(block_id, 0.0, None)
        disabled.on_acquire(block_id, 0.0, None)
    assert all(paranoid.stack_of(i) for i in range(3))
    assert not any(disabled.stack_of(i) for i in range(3))
    assert "test_paranoid_captures_every_stack" in (paranoid.stack_of(0) or "")


def test_a_stack_is_read_from_source_only_when_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    """Capturing a stack at acquire walks frames and reads no source file (the first read of
    a file costs milliseconds, on the acquire's path); showing it reads the lines."""
    tracker = LeakTracker(LeakDetection.PARANOID, 128, None, 1)
    with monkeypatch.context() as patched:
        patched.setattr(linecache, "getline", lambda *a, **k: pytest.fail("source read at acquire"))
        patched.setattr(linecache, "checkcache", lambda *a, **k: pytest.fail("source read at acquire"))
        tracker.on_acquire(0, 0.0, None)  # the acquire site, by name and line
    shown = tracker.stack_of(0) or ""
    assert "tracker.on_acquire(0, 0.0, None)  # the acquire site" in shown


def test_simple_samples_one_acquire_in_n() -> None:
    """SIMPLE captures the stack of one acquire in sample_rate, deterministically."""
    tracker = LeakTracker(LeakDetection.SIMPLE, 4, None, 12)
    for block_id in range(12):
        tracker.on_acquire(block_id, 0.0, None)
    assert [i for i in range(12) if tracker.stack_of(i)] == [0, 4, 8]


def test_leak_report_carries_the_sampled_stack() -> None:
    """A suspect acquired under PARANOID carries the stack of its acquire."""
    pool = ThreadedBlockPool(1, (2,), leak_threshold=0.01, leak_detection=LeakDetection.PARANOID)
    pool.acquire()
    time.sleep(0.03)
    (suspect,) = pool.check_leaks()
    assert suspect.stack is not None and "test_leak_report_carries_the_sampled_stack" in suspect.stack
