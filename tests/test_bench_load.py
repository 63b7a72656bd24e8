"""The load: a seeded stream, heavy-tailed lengths within bounds, phases around a burst, checked fields."""

from __future__ import annotations

import pytest

from kvstress._stats import nearest_rank
from kvstress.bench import LoadSpec, Phase, request_stream


def test_the_same_seed_gives_the_same_stream() -> None:
    """Two streams of one spec are equal; another seed gives other lengths."""
    spec = LoadSpec(requests=50, seed=3)
    assert request_stream(spec) == request_stream(spec)
    assert request_stream(spec) != request_stream(LoadSpec(requests=50, seed=4))


def test_lengths_are_heavy_tailed_and_clipped() -> None:
    """Lengths stay in 1..max_tokens, the median is near max/8, and the P99 is many medians away."""
    tokens = [request.tokens for request in request_stream(LoadSpec(requests=4000, max_tokens=1024))]
    assert min(tokens) >= 1 and max(tokens) == 1024
    median = nearest_rank(tokens, 50)
    assert 100 <= median <= 160
    assert nearest_rank(tokens, 99) >= 6 * median


def test_holds_are_cut_at_ten_means() -> None:
    """Holds are non-negative and at most 10 x hold_ms; hold_ms 0 holds nothing."""
    holds = [request.hold_s for request in request_stream(LoadSpec(requests=2000, hold_ms=5))]
    assert min(holds) >= 0 and max(holds) <= 0.05
    assert {request.hold_s for request in request_stream(LoadSpec(requests=10, hold_ms=0))} == {0.0}


def test_a_burst_sits_between_the_two_halves_of_the_steady_load() -> None:
    """5 steady requests, a burst of 3: 2 steady, 3 burst, 3 recovery, indexed in arrival order."""
    stream = request_stream(LoadSpec(requests=5, burst=3))
    assert [request.phase for request in stream] == [Phase.STEADY] * 2 + [Phase.BURST] * 3 + [
        Phase.RECOVERY
    ] * 3
    assert [request.index for request in stream] == list(range(8))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("requests", 0),
        ("concurrency", True),
        ("max_tokens", -1),
        ("sigma", -0.5),
        ("hold_ms", float("nan")),
        ("burst", -1),
        ("seed", 1.5),
    ],
)
def test_bad_fields_are_refused_by_name(field: str, value: object) -> None:
    """A bad field raises ValueError naming the field and the value received."""
    with pytest.raises(ValueError, match=rf"^{field} must .* got {value!r}"):
        LoadSpec(**{field: value})  # type: ignore[arg-type]
