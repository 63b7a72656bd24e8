"""A threaded pool whose own reset thread raises on the second block it is handed (BUG): the
run controls the thread as one of its own, and what it raises is a crash of the execution."""

from __future__ import annotations

import queue
import threading
from typing import Any

from kvstress.mutants import Block
from kvstress.mutants._ledger import BlockLedger


class ResetThreadRaisesPool(BlockLedger):
    threaded = True
    backoff_bound = 0.0
    expected = ("crash",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._jobs: queue.Queue[Block] = queue.Queue()
        self._cond = threading.Condition()
        threading.Thread(target=self._worker, daemon=True).start()

    def _worker(self) -> None:
        for handed in range(2):
            block = self._jobs.get()
            if handed == 1:
                raise RuntimeError("the reset thread gave up")
            self._reset(block)
            with self._cond:
                self._free.append(block)
                self._cond.notify()

    def acquire(self, timeout: float | None = None) -> Block | None:
        with self._cond:
            if not self._cond.wait_for(lambda: self._free, timeout=timeout):
                return None
            return self._taken(self._free.popleft())

    def release(self, block: Block) -> bool:
        if not self._last_reference(block):
            return False
        self._jobs.put(block)
        return True
