"""Which BaseExceptions the harness lets through a pool call, and which are the pool's fault.

A pool call may end in cancellation (asyncio, trio, anyio), in the thread baton's own
unwinding, or in a real Ctrl-C: those go on. SystemExit, GeneratorExit raised by the pool's own
code, or a KeyboardInterrupt that no Ctrl-C caused, are the pool ending the process: a
``crash`` finding, never the end of the harness. Whether a KeyboardInterrupt is real is known
only while ``fuzz`` watches SIGINT (its handler sets the flag first); unwatched, every one is
taken as real.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

_flag: threading.Event | None = None


@contextlib.contextmanager
def watching(flag: threading.Event) -> Iterator[None]:
    """While inside, ``flag`` is set by every real Ctrl-C (before its KeyboardInterrupt)."""
    global _flag
    previous, _flag = _flag, flag
    try:
        yield
    finally:
        _flag = previous


def passes_through(error: BaseException) -> bool:
    """Does ``error``, raised inside a pool call, belong to the harness or the user (go on)
    rather than to the pool (a finding)? Cancellation, the baton's unwinding and any other
    BaseException go on; SystemExit and GeneratorExit are the pool's; a KeyboardInterrupt is
    the pool's only while SIGINT is watched and no Ctrl-C came."""
    if isinstance(error, KeyboardInterrupt):
        return _flag is None or _flag.is_set()
    return not isinstance(error, SystemExit | GeneratorExit)
