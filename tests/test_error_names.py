"""How an exception a pool raised is named in a finding: as its users spell it."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import queue

from kvstress._format import error_name, error_text


class DoubleRelease(Exception):
    """A user's own exception."""


def test_the_standard_library_s_exceptions_go_by_their_public_module() -> None:
    """``acquire(0.0) raised Empty`` read as a name of the pool's own (a blind user's pool that
    checked ``qsize()`` before ``get_nowait()``); the class lives in ``_queue``."""
    assert error_text(queue.Empty()) == "queue.Empty"
    assert error_name(asyncio.CancelledError) == "asyncio.CancelledError"  # not asyncio.exceptions
    assert error_name(concurrent.futures.CancelledError) == "concurrent.futures.CancelledError"
    assert error_text(json.JSONDecodeError("bad", "x", 0)).startswith("json.JSONDecodeError: bad")


def test_builtins_and_the_user_s_own_stay_bare() -> None:
    assert error_text(RuntimeError("boom")) == "RuntimeError: boom"
    assert error_name(TimeoutError) == "TimeoutError"
    assert error_text(DoubleRelease("block 3")) == "DoubleRelease: block 3"
