"""pytest-xdist: the controller picks the session seed once and hands it to every worker.

Without the hand-over each worker would draw its own random seed, and the seed in the header
(printed by the controller) would repeat none of the workers' tests. pytest-randomly does the
same through ``workerinput``.
"""

from __future__ import annotations

from typing import Any

import pytest

WORKER_KEY = "kvstress_seed"


def inherited_seed(config: pytest.Config) -> int | None:
    """On an xdist worker, the seed its controller handed over; None on the controller."""
    workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
    if workerinput is None or WORKER_KEY not in workerinput:
        return None
    return int(workerinput[WORKER_KEY])


def is_worker(config: pytest.Config) -> bool:
    """True in an xdist worker process."""
    return hasattr(config, "workerinput")


class SeedHandover:
    """An xdist plugin (registered only when xdist is loaded, which defines its hook)."""

    def __init__(self, session_seed: int) -> None:
        self._session_seed = session_seed

    def pytest_configure_node(self, node: Any) -> None:
        """Hand the session seed to a worker before it starts (``node`` is xdist's WorkerController)."""
        node.workerinput[WORKER_KEY] = self._session_seed
