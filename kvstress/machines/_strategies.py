"""Hypothesis strategies for the state machines: holders, timeouts, concurrent programs."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

HOLDERS = ("h0", "h1", "h2")
# 0 tries once; the small ones exercise waiting and exhaustion at little real-time cost.
TIMEOUTS = (0, 0.005, 0.02)

holders = st.sampled_from(HOLDERS)
timeouts = st.sampled_from(TIMEOUTS)


def program_steps(workers: int) -> st.SearchStrategy[tuple[str, Any]]:
    """One step of a batch worker's program; ``pause`` draws the interleaving as data."""
    return st.one_of(
        st.tuples(st.just("acquire"), st.sampled_from((0, 0.001, 0.01, 0.05))),
        st.tuples(st.just("release"), st.none()),
        st.tuples(st.just("verify"), st.none()),
        st.tuples(st.just("share"), st.integers(0, workers - 1)),
        st.tuples(st.just("pause"), st.integers(1, 4)),
        st.tuples(st.just("cancel"), st.integers(0, workers - 1)),
    )


@st.composite
def batches(draw: st.DrawFn, max_workers: int = 3, max_steps: int = 6) -> list[list[tuple[str, Any]]]:
    """A concurrent batch: 2..max_workers programs of 1..max_steps steps each."""
    workers = draw(st.integers(2, max_workers))
    step = program_steps(workers)
    return [draw(st.lists(step, min_size=1, max_size=max_steps)) for _ in range(workers)]
