"""Hypothesis settings shared by the state-machine tests, so that they are written once.

``ci(n)``: ``n`` derandomized examples of 30 steps, the same every run, so CI is deterministic
and a failure replays. ``hunt(base, n)``: for planted bugs, where the test checks the id: no
shrinking (a hang costs its bound per replay) and the first bug only.
"""

from __future__ import annotations

from hypothesis import HealthCheck, Phase, settings


def ci(max_examples: int) -> settings:
    """``max_examples`` derandomized examples of 30 steps, no database, no deadline."""
    return settings(
        max_examples=max_examples,
        stateful_step_count=30,
        deadline=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
        database=None,
    )


def hunt(base: settings, max_examples: int) -> settings:
    """``base`` for hunting a planted bug: generation only, the first bug reported."""
    return settings(base, max_examples=max_examples, report_multiple_bugs=False, phases=[Phase.generate])
