"""Cooperative waits on file descriptors: ``select.select``, the ``selectors`` classes, and the
blocking calls of ``socket`` objects made by the ``socket`` module's stand-in.

A pool may park its waiters on the outside world: each waiter on a pipe of its own, a release
writing a byte to it (the self-pipe trick, an eventfd). Under the baton such a wait was a real
syscall with a real timeout on a virtual clock: the waiter's deadline never came, its loop
polled again and again, and a correct pool was reported as a busy-wait. Here a controlled
thread's wait first polls its descriptors (a zero timeout); if none is ready it blocks on an
``IoReady``, which the baton polls again at every decision (a byte written by another thread
makes it runnable), and whose deadline is the wait's timeout on virtual time. Outside a
controlled thread each call is the real one.
"""

from __future__ import annotations

import select as _select
import selectors as _selectors
import socket as _socket
from collections.abc import Callable
from typing import Any, TypeVar

from kvstress.controlled._baton import IoReady
from kvstress.controlled._coop import _here
from kvstress.controlled._loop import later

T = TypeVar("T")
_NOT_HERE = object()
MILLISECOND = 0.001
"""The unit ``select.poll`` takes its timeout in, and that ``epoll`` rounds its own up to."""


def _wait_ready(
    poll: Callable[[], T],
    ready: Callable[[T], bool],
    timeout: float | None,
    what: str,
    granularity: float = 0.0,
) -> Any:
    """``poll()`` once the descriptors are ready or the virtual ``timeout`` passed; ``_NOT_HERE``
    outside a controlled thread (the caller makes the real call). ``granularity``: the unit the
    real call rounds its timeout up to (``poll`` and ``epoll``: a millisecond); a wait that times
    out credits it to the thread (``excused``), as the timing checks allow a real clock's slack:
    a correct pool that rounds its remaining time up to whole milliseconds for ``poll`` returns
    up to that much past its deadline, as it would on any OS."""
    controller, me = _here()
    if controller is None or me is None:
        return _NOT_HERE
    controller.yield_point()
    got = poll()
    if ready(got) or (timeout is not None and timeout <= 0):
        return got
    deadline = None if timeout is None else later(controller.now, timeout)
    seen: list[Any] = []  # what the poll that found them ready returned: an edge-triggered epoll
    # reports an edge once, so the waiter gets that answer rather than polling again

    def check() -> bool:
        got = poll()
        if ready(got):
            seen.append(got)
            return True
        return False

    waitable = IoReady(check, what)
    while True:
        woken = controller.block(me, waitable, deadline)
        if seen:
            return seen.pop()
        got = poll()
        if ready(got) or not woken:
            if not woken and granularity:  # a timeout rounded up to the primitive's unit
                me.excused += granularity
            return got


def select(rlist: Any, wlist: Any, xlist: Any, timeout: float | None = None) -> Any:
    """``select.select`` on virtual time in a controlled thread."""
    got = _wait_ready(
        lambda: _select.select(rlist, wlist, xlist, 0),
        lambda lists: any(lists),
        timeout,
        "select() on file descriptors",
    )
    return _select.select(rlist, wlist, xlist, timeout) if got is _NOT_HERE else got


def _cooperative(real: type[_selectors.BaseSelector]) -> type[_selectors.BaseSelector]:
    """``real`` whose ``select`` waits cooperatively in a controlled thread."""

    def select(self: Any, timeout: float | None = None) -> Any:
        got = _wait_ready(lambda: real.select(self, 0), bool, timeout, f"{real.__name__}.select()")
        return real.select(self, timeout) if got is _NOT_HERE else got

    return type(
        real.__name__, (real,), {"select": select, "__module__": real.__module__, "__doc__": real.__doc__}
    )


SELECTORS: dict[str, type[_selectors.BaseSelector]] = {}
"""The ``selectors`` module's selector classes (those this platform has), made cooperative;
``DefaultSelector`` is the stand-in of the class it names."""
for _name in ("SelectSelector", "PollSelector", "EpollSelector", "DevpollSelector", "KqueueSelector"):
    if hasattr(_selectors, _name):
        SELECTORS[_name] = _cooperative(getattr(_selectors, _name))
SELECTORS["DefaultSelector"] = SELECTORS[_selectors.DefaultSelector.__name__]


class _Polling:
    """A ``select.poll`` or ``select.epoll`` object whose ``poll`` waits cooperatively in a
    controlled thread (``milliseconds``: poll's timeout unit; epoll's is seconds); everything
    else is the real object's."""

    def __init__(self, real: Any, *, milliseconds: bool) -> None:
        self._real = real
        self._milliseconds = milliseconds

    def poll(self, timeout: float | None = None, *args: Any) -> Any:
        seconds = None if timeout is None or timeout < 0 else timeout / (1000 if self._milliseconds else 1)
        what = f"{type(self._real).__name__}.poll()"
        got = _wait_ready(lambda: self._real.poll(0, *args), bool, seconds, what, MILLISECOND)
        return self._real.poll(timeout, *args) if got is _NOT_HERE else got

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def __enter__(self) -> _Polling:
        self._real.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._real.__exit__(*exc)


def poll() -> _Polling:
    """``select.poll()``, whose ``poll`` waits on virtual time in a controlled thread."""
    return _Polling(_select.poll(), milliseconds=True)


SELECT: dict[str, Callable[..., Any]] = {"select": select, "poll": poll}
"""The ``select`` module's waits, made cooperative (``epoll`` where the platform has it)."""
if hasattr(_select, "epoll"):

    def epoll(*args: Any, **kwargs: Any) -> _Polling:
        """``select.epoll(...)``, whose ``poll`` waits on virtual time in a controlled thread."""
        return _Polling(_select.epoll(*args, **kwargs), milliseconds=False)

    SELECT["epoll"] = epoll


class CooperativeSocket(_socket.socket):
    """A ``socket.socket`` whose blocking calls wait cooperatively in a controlled thread: first
    until the socket is ready (its own timeout, on virtual time), then the real call, which no
    longer blocks. A waiter that sleeps in ``recv`` on a socket pair, woken by a byte a release
    sends, was a real syscall under the baton: it held the baton while the releaser could not
    run (a hang), or with a timeout polled the real clock while virtual time stood (a busy-wait),
    on a correct pool (a blind user's). A non-blocking socket's calls are the real ones."""

    __slots__ = ()

    def _wait(self, write: bool, what: str) -> bool:
        """False when the socket's timeout passed first; True otherwise (ready, or not here)."""
        timeout = self.gettimeout()
        if timeout == 0.0:
            return True
        watched: list[Any] = [self]
        got = _wait_ready(
            lambda: _select.select([] if write else watched, watched if write else [], [], 0),
            lambda lists: any(lists),
            timeout,
            f"socket.{what}()",
        )
        return got is _NOT_HERE or any(got)

    def _ready(self, write: bool, what: str) -> None:
        if not self._wait(write, what):
            raise TimeoutError("timed out")

    def recv(self, *args: Any) -> bytes:
        self._ready(False, "recv")
        return super().recv(*args)

    def recv_into(self, *args: Any) -> int:
        self._ready(False, "recv_into")
        return super().recv_into(*args)

    def recvfrom(self, *args: Any) -> tuple[bytes, Any]:
        self._ready(False, "recvfrom")
        return super().recvfrom(*args)

    def send(self, *args: Any) -> int:
        self._ready(True, "send")
        return super().send(*args)

    def sendall(self, data: Any, *args: Any) -> None:
        view = memoryview(data).cast("B")
        while view:
            sent = self.send(view, *args)
            view = view[sent:]

    def accept(self) -> tuple[CooperativeSocket, Any]:
        self._ready(False, "accept")
        fd, address = self._accept()  # type: ignore[attr-defined]
        accepted = CooperativeSocket(self.family, self.type, self.proto, fileno=fd)
        if _socket.getdefaulttimeout() is None and self.gettimeout():
            accepted.setblocking(True)
        return accepted, address


def socketpair(*args: Any, **kwargs: Any) -> tuple[CooperativeSocket, CooperativeSocket]:
    """``socket.socketpair(...)``, of cooperative sockets."""
    pair = _socket.socketpair(*args, **kwargs)
    return tuple(  # type: ignore[return-value]
        CooperativeSocket(real.family, real.type, real.proto, fileno=real.detach()) for real in pair
    )


SOCKET: dict[str, Any] = {"socket": CooperativeSocket, "socketpair": socketpair}
"""The ``socket`` module's socket class and pair, made cooperative (``create_connection`` and
the server helpers still make real sockets)."""
