"""A pool's own reset thread, fed by a queue of jobs, shared by the test pools that have one."""

from __future__ import annotations

import contextlib
import weakref
from typing import Any, Protocol


class _Jobs(Protocol):
    def get(self) -> Any: ...


def reset_worker(pool_ref: weakref.ref[Any], jobs: _Jobs, run: str, run_ended: type[BaseException]) -> None:
    """Run ``getattr(pool, run)(*job)`` for each job until a None job or the pool is gone; a job
    whose run (loop, trio run) ended as it worked raises ``run_ended``, ignored.

    Nothing is held while it waits: a daemon thread that drops a block's tensor as the
    interpreter shuts down dies inside torch's deallocation, and the process aborts ("terminate
    called without an active exception", exit 134)."""
    while (job := jobs.get()) is not None:
        pool = pool_ref()
        if pool is None:
            return
        with contextlib.suppress(run_ended):
            getattr(pool, run)(*job)
        del pool, job
