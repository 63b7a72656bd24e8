"""Nearest-rank percentiles: observed values only, empty input, bad percentiles."""

from __future__ import annotations

import pytest

from kvstress._stats import nearest_rank


def test_nearest_rank_returns_an_observed_value() -> None:
    """Of 1..200, the P50 is 100, the P99 198, the P99.9 and P100 the largest, the P0 the smallest."""
    values = list(range(200, 0, -1))
    assert [nearest_rank(values, q) for q in (50, 99, 99.9, 100, 0)] == [100, 198, 200, 200, 1]


def test_no_values_give_zero() -> None:
    """An empty input has every percentile 0.0."""
    assert nearest_rank([], 99) == 0.0


@pytest.mark.parametrize("q", [-1, 100.5])
def test_a_percentile_outside_0_to_100_is_refused(q: float) -> None:
    """q outside 0..100 raises ValueError naming q."""
    with pytest.raises(ValueError, match=r"^q must be a percentile between 0 and 100"):
        nearest_rank([1.0], q)
