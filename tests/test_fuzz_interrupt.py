"""Ctrl-C during ``fuzz()``: the run ends as interrupted, whichever code the signal lands in, and
an operation it cut short is never reported as the pool's violation."""

from __future__ import annotations

import contextlib
import gc
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from kvstress import InvariantViolation
from kvstress.fuzz import _run as run_module
from kvstress.fuzz import fuzz, load_target
from kvstress.fuzz._slices import Finding, SliceResult


def test_ctrl_c_that_a_gc_callback_swallows_still_ends_the_run(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """Python drops a KeyboardInterrupt raised inside a gc callback (Hypothesis installs one);
    the run must still stop at the next slice, and print no "Exception ignored" traceback."""
    target = load_target("kvstress:ThreadedBlockPool")
    armed: list[bool] = []
    fired: list[float] = []

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if armed and not fired and phase == "start":
            fired.append(time.monotonic())
            signal.raise_signal(signal.SIGINT)  # its handler runs here, inside the callback

    gc.callbacks.append(on_gc)
    try:
        outcome = fuzz(
            target,
            budget_s=20,
            seed=0,
            mix=("pct",),
            report_dir=tmp_path,
            on_progress=lambda _: armed.append(True),
        )
    finally:
        gc.callbacks.remove(on_gc)
    assert fired, "no collection ran during the fuzz run"
    assert outcome.interrupted and outcome.finding is None
    assert time.monotonic() - fired[0] < 10  # the next slice boundary, not the end of the budget
    err = capfd.readouterr().err
    assert "Exception ignored" not in err and "Traceback" not in err
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_finding_from_the_slice_ctrl_c_cut_short_is_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slice that Ctrl-C interrupted may report what the interruption did (a wait cut short, a
    ledger half settled): no report is written from it and the run is interrupted."""

    def interrupted_slice(
        strategy: str,
        target: object,
        seed: int,
        budget: float,
        shrink_s: float | None = None,
        memo: object = None,
        grace_s: float = 0.0,
    ) -> SliceResult:
        with contextlib.suppress(KeyboardInterrupt):  # as a gc callback or a pool's except would
            signal.raise_signal(signal.SIGINT)
        violation = InvariantViolation("refcount", "block 0: refcount 1, the ledger says 2")
        return SliceResult(1, 3, Finding(violation, strategy, seed, 0.01, "machine"))

    monkeypatch.setattr(run_module, "run_slice", interrupted_slice)
    outcome = fuzz(load_target("kvstress:ThreadedBlockPool"), budget_s=5, seed=0, report_dir=tmp_path)
    assert outcome.interrupted and outcome.finding is None and outcome.report is None
    assert not list(tmp_path.glob("*.json"))


def test_raise_interrupt_turns_the_clean_stop_into_keyboard_interrupt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With raise_interrupt, the run still stops cleanly and drops the slice's finding, and then
    raises KeyboardInterrupt, as a test or a score needs; its handler is put back first."""

    def interrupted_slice(
        strategy: str,
        target: object,
        seed: int,
        budget: float,
        shrink_s: float | None = None,
        memo: object = None,
        grace_s: float = 0.0,
    ) -> SliceResult:
        with contextlib.suppress(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
        return SliceResult(1, 3, None)

    monkeypatch.setattr(run_module, "run_slice", interrupted_slice)
    target = load_target("kvstress:ThreadedBlockPool")
    with pytest.raises(KeyboardInterrupt):
        fuzz(target, budget_s=5, seed=0, report_dir=tmp_path, raise_interrupt=True)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert not list(tmp_path.glob("*.json"))


def test_without_ctrl_c_a_finding_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same slice without the signal: its finding is written (the drop above is Ctrl-C's)."""

    def finding_slice(
        strategy: str,
        target: object,
        seed: int,
        budget: float,
        shrink_s: float | None = None,
        memo: object = None,
        grace_s: float = 0.0,
    ) -> SliceResult:
        violation = InvariantViolation("refcount", "block 0: refcount 1, the ledger says 2")
        return SliceResult(1, 3, Finding(violation, strategy, seed, 0.01, "machine"))

    monkeypatch.setattr(run_module, "run_slice", finding_slice)
    outcome = fuzz(load_target("kvstress:ThreadedBlockPool"), budget_s=5, seed=0, report_dir=tmp_path)
    assert not outcome.interrupted and outcome.finding is not None
    assert outcome.report is not None and outcome.report.exists()
