"""The operation history of one run: invocations and responses, in order, on the harness clock."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from kvstress._violation import Operation
from kvstress.controlled._baton import HarnessLock


class History:
    """An append-only record of operations; thread-safe. ``snapshot()`` gives frozen Operations."""

    def __init__(self) -> None:
        self._lock = HarnessLock()
        self._ops: list[Operation] = []

    def begin(self, worker: str, name: str, args: Mapping[str, Any], start: float) -> int:
        """Record an invocation; returns its index for ``end``."""
        with self._lock:
            index = len(self._ops)
            self._ops.append(Operation(index, worker, name, dict(args), start, None, "pending"))
            return index

    def end(
        self,
        index: int,
        end: float,
        outcome: str,
        result: Any = None,
        observed: Mapping[str, Any] | None = None,
    ) -> None:
        """Record the response to invocation ``index``."""
        with self._lock:
            op = self._ops[index]
            # Built directly: dataclasses.replace is several times slower, on every operation.
            self._ops[index] = Operation(
                op.index, op.worker, op.name, op.args, op.start, end, outcome, result, dict(observed or {})
            )

    def note(self, index: int, **observed: Any) -> None:
        """Add to what operation ``index`` observed, after its response (a cancelled release
        found later to have left its reference: ``kept``)."""
        with self._lock:
            op = self._ops[index]
            self._ops[index] = dataclasses.replace(op, observed={**op.observed, **observed})

    def pending_of(self, worker: str) -> Operation | None:
        """The worker's operation still in flight, if any."""
        with self._lock:
            for op in reversed(self._ops):
                if op.worker == worker:
                    return op if op.outcome == "pending" else None
            return None

    def snapshot(self) -> tuple[Operation, ...]:
        """Every operation so far."""
        with self._lock:
            return tuple(self._ops)

    def __len__(self) -> int:
        with self._lock:
            return len(self._ops)
