"""Hypothesis settings profiles for pool tests, registered when the plugin loads, never loaded by it.

Pick one with ``pytest --hypothesis-profile NAME``:

- ``kvstress-dev``: fast local runs (50 examples, no deadline).
- ``kvstress-ci``: the same examples on every run (``derandomize``, no example database), 200 of
  them, no deadline and no health checks, so CI fails only on a pool bug.
- ``kvstress-nightly``: 2,000 random examples, and failures saved in
  ``.hypothesis/kvstress-nightly`` (relative to the working directory), so what the night
  found replays first in the next run.

Sharing the nightly database across machines (a note, not done here): point the profile at
Redis, for example from a ``conftest.py`` run after the plugin has loaded::

    from hypothesis import settings
    from hypothesis.database import MultiplexedDatabase
    from hypothesis.extra.redis import RedisExampleDatabase   # pip install "hypothesis[redis]"
    from redis import Redis

    shared = RedisExampleDatabase(Redis(host="ci-cache", port=6379), key_prefix=b"kvstress:")
    settings.register_profile(
        "kvstress-nightly",
        settings.get_profile("kvstress-nightly"),
        database=MultiplexedDatabase(settings.get_profile("kvstress-nightly").database, shared),
    )

Every machine then saves its failures to Redis and replays the others' before searching.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis.database import DirectoryBasedExampleDatabase

NIGHTLY_DATABASE = ".hypothesis/kvstress-nightly"
PROFILES = ("kvstress-dev", "kvstress-ci", "kvstress-nightly")


def register_profiles() -> None:
    """Register (or re-register, unchanged) the three ``kvstress-*`` profiles."""
    settings.register_profile("kvstress-dev", max_examples=50, deadline=None)
    settings.register_profile(
        "kvstress-ci",
        derandomize=True,
        database=None,
        max_examples=200,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    settings.register_profile(
        "kvstress-nightly",
        derandomize=False,
        max_examples=2000,
        deadline=None,
        database=DirectoryBasedExampleDatabase(NIGHTLY_DATABASE),
    )


# At import, not in pytest_configure: Hypothesis' own plugin loads --hypothesis-profile in its
# pytest_configure, which may run before ours; entry-point plugins are all imported before that.
register_profiles()
