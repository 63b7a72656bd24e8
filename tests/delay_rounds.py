"""What the delay strategy's opening and hot rounds find: the rounds the mix's first delay slice
runs to their end, past its length, within the grace. Counted in rounds, not seconds: a fuzz
run of 30 s missed such a find in CI with the machine loaded (the grace cut the first slice,
and the rest of the hot round came a quarter-second a cycle)."""

from __future__ import annotations

from typing import Any

from kvstress.fuzz._slices import _HOT_ROUNDS, Finding, run_slice
from kvstress.fuzz._target import load_target


def found_in_first_delay_rounds(spec: str) -> Finding | None:
    """The delay strategy's finding on ``spec``'s pool within its opening and hot rounds."""
    memo: dict[str, Any] = {}
    result = run_slice("delay", load_target(spec), 0, 1e-9, memo=memo, grace_s=120.0)
    assert memo["delay"].round <= _HOT_ROUNDS[-1]
    return result.finding
