"""Pools that answer ``free_count`` or ``free_ids`` with what no pool should: each is a finding
against the pool, written to a report (a blind tester's: None went up as kvstress's own
TypeError, exit 3; a NaN count made the finding's report fail to write, and it was lost)."""

from __future__ import annotations

from typing import Any

from tests.pools._simple import SimpleThreadedPool


class FreeIdsNonePool(SimpleThreadedPool):
    def free_ids(self) -> Any:
        return None


class FreeCountNanPool(SimpleThreadedPool):
    def free_count(self) -> Any:
        return float("nan")
