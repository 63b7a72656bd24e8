"""Checkers: one concern each, pure functions raising InvariantViolation with a stable id."""

from kvstress.checkers._consistency import check_conservation as check_conservation
from kvstress.checkers._consistency import check_counter as check_counter
from kvstress.checkers._consistency import check_held_not_queued as check_held_not_queued
from kvstress.checkers._consistency import check_queue as check_queue
from kvstress.checkers._consistency import on_its_way_back as on_its_way_back
from kvstress.checkers._contents import check_canary as check_canary
from kvstress.checkers._contents import check_zeroed as check_zeroed
from kvstress.checkers._timing import TimingPolicy as TimingPolicy
from kvstress.checkers._timing import check_parking as check_parking
from kvstress.checkers._timing import check_timeout as check_timeout
from kvstress.checkers._timing import check_woken as check_woken
from kvstress.checkers._transitions import check_acquired as check_acquired
from kvstress.checkers._transitions import check_double_release as check_double_release
from kvstress.checkers._transitions import check_fresh_state as check_fresh_state
from kvstress.checkers._transitions import check_misuse_raised as check_misuse_raised
from kvstress.checkers._transitions import check_refcount as check_refcount
from kvstress.checkers._transitions import check_refcount_at_least as check_refcount_at_least
from kvstress.checkers._transitions import check_release_accounting as check_release_accounting
from kvstress.checkers._transitions import check_release_result as check_release_result
from kvstress.checkers._transitions import check_stale_refused as check_stale_refused
from kvstress.checkers._transitions import check_state as check_state
from kvstress.checkers._wakeups import check_wakeups as check_wakeups
