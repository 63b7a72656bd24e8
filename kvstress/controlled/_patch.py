"""Swap the standard library's blocking primitives for cooperative ones, in named modules only.

A pool under test is not changed or annotated: while a controlled run builds and drives it,
the modules it is written in see cooperative ``threading``, ``time`` and ``queue`` modules, and
the names they imported from them (``from time import monotonic``) are swapped one by one
(``concurrent.futures``' thread executor and futures too). Only
those modules' globals change, and only for the run, so the rest of the process (pytest, torch,
the harness itself) keeps the real primitives.
"""

from __future__ import annotations

import asyncio
import builtins
import concurrent
import concurrent.futures
import contextlib
import datetime
import functools
import importlib
import inspect
import queue
import select
import selectors
import socket
import sys
import threading
import time
import types
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from kvstress.controlled import _coop, _coop_asyncio, _coop_compound, _coop_futures, _coop_io, _coop_queue
from kvstress.controlled._baton import active_controller
from kvstress.controlled._gated import gated_sleep, work_of_this_thread
from kvstress.controlled._loop import ControlledEventLoop, sole_running_loop
from kvstress.controlled._reach import left_alone
from kvstress.controlled._thread_work import trio_clock_elsewhere

_THREADING = {
    "Lock": _coop.Lock,
    "RLock": _coop.RLock,
    "Condition": _coop.Condition,
    "Semaphore": _coop.Semaphore,
    "BoundedSemaphore": _coop.BoundedSemaphore,
    "Event": _coop.Event,
    "Thread": _coop.Thread,
    "Barrier": _coop_compound.Barrier,
    "Timer": _coop_compound.Timer,
}
_MONOTONIC_NAMES = ("CLOCK_MONOTONIC", "CLOCK_MONOTONIC_RAW", "CLOCK_BOOTTIME")
_MONOTONIC_IDS = frozenset(getattr(time, name) for name in _MONOTONIC_NAMES if hasattr(time, name))
_WALL_IDS = frozenset(getattr(time, name) for name in ("CLOCK_REALTIME",) if hasattr(time, name))


def _clock_gettimes(
    monotonic: Callable[[], float], wall: Callable[[], float]
) -> dict[str, Callable[[int], float | int]]:
    """``clock_gettime`` and ``clock_gettime_ns`` that read ``monotonic`` for the monotonic
    clocks (``CLOCK_MONOTONIC``, ``_RAW``, ``CLOCK_BOOTTIME``) and ``wall`` for
    ``CLOCK_REALTIME``, so a deadline kept on them moves with the virtual clock; the CPU-time
    clocks and any other stay real. Empty where the platform has no ``clock_gettime``."""
    if not hasattr(time, "clock_gettime"):
        return {}
    real, real_ns = time.clock_gettime, time.clock_gettime_ns

    def clock_gettime(clk_id: int) -> float:
        if clk_id in _MONOTONIC_IDS:
            return monotonic()
        return wall() if clk_id in _WALL_IDS else real(clk_id)

    def clock_gettime_ns(clk_id: int) -> int:
        if clk_id in _MONOTONIC_IDS or clk_id in _WALL_IDS:
            return int(clock_gettime(clk_id) * 1e9)
        return real_ns(clk_id)

    return {"clock_gettime": clock_gettime, "clock_gettime_ns": clock_gettime_ns}


_TIME = {
    "sleep": _coop.sleep,
    "monotonic": _coop.monotonic,
    "monotonic_ns": _coop.monotonic_ns,
    "perf_counter": _coop.monotonic,
    "perf_counter_ns": _coop.monotonic_ns,
    "time": _coop.time,
    "time_ns": _coop.time_ns,
    **_clock_gettimes(_coop.monotonic, _coop.time),
}
_QUEUE = {
    "Queue": _coop_queue.Queue,
    "LifoQueue": _coop_queue.LifoQueue,
    "PriorityQueue": _coop_queue.PriorityQueue,
    "SimpleQueue": _coop_queue.SimpleQueue,
}

_FUTURES = {
    "ThreadPoolExecutor": _coop_futures.ThreadPoolExecutor,
    "Future": _coop_futures.Future,
    "wait": _coop_futures.wait,
    "as_completed": _coop_futures.as_completed,
}


class _ModuleProxy(types.ModuleType):
    """A module that answers with the cooperative names and falls back to the real module."""

    def __init__(self, real: types.ModuleType, overrides: dict[str, Any]) -> None:
        super().__init__(real.__name__, real.__doc__)
        self.__dict__.update(overrides)
        self.__real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__real, name)


def _virtual_now() -> float | None:
    """The running controlled loop's (or trio run's) clock; None anywhere else. A thread that
    runs no loop of its own reads the controlled loop running in the process, or the clock of
    the trio run whose work is out in threads (the code's worker thread, an executor's, trio's:
    a deadline the loop's side computed and a worker waits until is on one clock, as in a real
    process; a worker read the real clock and timed out at once)."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        trio = sys.modules.get("trio")
        if trio is not None:
            with contextlib.suppress(RuntimeError):
                return float(trio.current_time())
        work = work_of_this_thread()  # a gated call's thread reads the clock of the run it is in
        if work is not None and work.clock is not None:
            return work.clock()
        sole = sole_running_loop()
        return trio_clock_elsewhere() if sole is None else sole.time_elsewhere()
    return loop.time() if isinstance(loop, ControlledEventLoop) else None


def _loop_time() -> float:
    """The running controlled loop's (or trio run's) clock; the real clock anywhere else."""
    now = _virtual_now()
    return time.monotonic() if now is None else now


def _loop_time_ns() -> int:
    return int(_loop_time() * 1e9)


_WALL_EPOCH = float(int(time.time() - time.monotonic()))
"""The wall clock's offset from the monotonic one, taken once, in whole seconds: a controlled
loop's wall clock (``time.time()``, ``datetime.now()``) is this plus its virtual time (and off a
controlled loop, the real one)."""


def _loop_wall_time() -> float:
    """``time.time()`` that moves with the controlled loop's virtual clock, so a deadline kept
    on the wall clock expires with the loop's timeouts (off such a loop: the real one, read
    afresh: the wall clock may be set while the process runs)."""
    now = _virtual_now()
    return time.time() if now is None else _WALL_EPOCH + now


def _loop_wall_time_ns() -> int:
    return int(_loop_wall_time() * 1e9)


def _loop_sleep(secs: float) -> None:
    """``time.sleep``: on the controlled loop's clock in a call out to a thread the loop runs at its
    scheduler's choice (``kvstress.controlled._gated``: the thread's next scheduling point, as
    ``asyncio.sleep`` is a task's); a real sleep anywhere else (the loop's own thread included)."""
    if not gated_sleep(secs):
        time.sleep(secs)


_LOOP_TIME = {
    "sleep": _loop_sleep,
    "monotonic": _loop_time,
    "monotonic_ns": _loop_time_ns,
    "perf_counter": _loop_time,
    "perf_counter_ns": _loop_time_ns,
    "time": _loop_wall_time,
    "time_ns": _loop_wall_time_ns,
    **_clock_gettimes(_loop_time, _loop_wall_time),
}


def _virtual_datetime(virtual_now: Callable[[], float | None], epoch: float) -> type[datetime.datetime]:
    """``datetime.datetime`` whose ``now``, ``today`` and ``utcnow`` read the virtual clock
    (``virtual_now``: virtual seconds, None off a controlled run: then the real clock), so a
    latency measured with them moves with virtual time; the rest is the real class's (a
    subclass: what it makes passes ``isinstance`` with either). The instant is ``epoch`` (the
    engine's wall epoch, the one its ``time.time()`` adds: a whole second) plus virtual time
    rounded to the microsecond a datetime keeps, so a 50 ms sleep reads as 50 ms, never
    0.049999 (an epoch with its own fraction of a microsecond made two reads round apart)."""

    def stamp() -> float:
        now = virtual_now()
        return time.time() if now is None else epoch + round(now * 1e6) / 1e6

    class VirtualDatetime(datetime.datetime):
        @classmethod
        def now(cls, tz: datetime.tzinfo | None = None) -> VirtualDatetime:
            return cls.fromtimestamp(stamp(), tz)

        @classmethod
        def today(cls) -> VirtualDatetime:
            return cls.fromtimestamp(stamp())

        @classmethod
        def utcnow(cls) -> VirtualDatetime:
            return cls.fromtimestamp(stamp(), datetime.UTC).replace(tzinfo=None)

    VirtualDatetime.__name__ = VirtualDatetime.__qualname__ = "datetime"
    VirtualDatetime.__module__ = "datetime"
    return VirtualDatetime


def _thread_virtual_now() -> float | None:
    """The controlled thread run's virtual seconds, or None off one."""
    controller = active_controller()
    return None if controller is None else controller.now


def _swaps(groups: tuple[tuple[types.ModuleType, dict[str, Any]], ...]) -> dict[int, tuple[object, object]]:
    """id(real object) -> (real object, its cooperative stand-in)."""
    swaps: dict[int, tuple[object, object]] = {}
    for real_module, overrides in groups:
        swaps[id(real_module)] = (real_module, _ModuleProxy(real_module, overrides))
        for name, stand_in in overrides.items():
            real = getattr(real_module, name)
            swaps.setdefault(id(real), (real, stand_in))
    return swaps


_THREAD_SWAPS = _swaps(
    (
        (threading, _THREADING),
        (time, _TIME),
        (queue, _QUEUE),
        (concurrent.futures, _FUTURES),
        (select, _coop_io.SELECT),
        (selectors, _coop_io.SELECTORS),
        (socket, _coop_io.SOCKET),
        (asyncio, _coop_asyncio.ASYNCIO),
        (datetime, {"datetime": _virtual_datetime(_thread_virtual_now, _coop.EPOCH)}),
    )
)
# ``import concurrent.futures`` binds the package: its stand-in answers ``.futures`` with the
# cooperative module.
_THREAD_SWAPS[id(concurrent)] = (
    concurrent,
    _ModuleProxy(concurrent, {"futures": _THREAD_SWAPS[id(concurrent.futures)][1]}),
)
_LOOP_SWAPS = _swaps(
    ((time, _LOOP_TIME), (datetime, {"datetime": _virtual_datetime(_virtual_now, _WALL_EPOCH)}))
)


def resolve_modules(targets: Iterable[object]) -> tuple[types.ModuleType, ...]:
    """Modules named by ``targets``: modules, module names, or classes/functions (a class brings
    the modules of its whole MRO). A package brings its submodules loaded by then, but for those
    never controlled on the user's behalf (``left_alone``): a package's code is in its
    submodules, and its ``__init__`` only re-exports them. ValueError names a target that is none
    of these."""
    if isinstance(targets, str | type | types.ModuleType | types.FunctionType | functools.partial):
        # One target, not a collection of them: ``modules="server"`` was taken letter by letter
        # ("cannot import 'b'", a blind tester's).
        targets = (targets,)
    found: dict[str, types.ModuleType] = {}
    for target in targets:
        for module in _modules_of(target):
            found.setdefault(module.__name__, module)
            if hasattr(module, "__path__"):
                prefix = module.__name__ + "."
                for name, sub in sorted(sys.modules.items()):
                    if name.startswith(prefix) and isinstance(sub, types.ModuleType) and not left_alone(name):
                        found.setdefault(name, sub)
    return tuple(found.values())


def _modules_of(target: object) -> list[types.ModuleType]:
    while isinstance(target, functools.partial):  # a partial's code is its function's
        target = target.func
    if isinstance(target, types.ModuleType):
        return [target]
    if isinstance(target, str):
        try:
            return [importlib.import_module(target)]
        except ImportError as error:
            raise ValueError(f"modules: cannot import {target!r}: {error}") from None
    if isinstance(target, type):
        names = class_module_names(target)
    elif callable(target) and getattr(target, "__module__", None):
        names = [target.__module__]
    else:
        raise ValueError(f"modules: expected a module, a module name, a class or a function, got {target!r}")
    return [m for m in (inspect.getmodule(target) if n == "__main__" else _loaded(n) for n in names) if m]


def class_module_names(cls: type) -> list[str]:
    """The names of the modules ``cls`` and its bases are defined in, the built-in ones left out."""
    names = dict.fromkeys(base.__module__ for base in cls.__mro__)
    return [name for name in names if name not in ("builtins", "abc", "typing")]


def _loaded(name: str) -> types.ModuleType | None:
    with contextlib.suppress(ImportError):
        return importlib.import_module(name)
    return None


def source_files(modules: Iterable[types.ModuleType]) -> frozenset[str]:
    """The source files of ``modules`` (the names the trace hook sees), skipping built-ins."""
    return frozenset(f for m in modules if (f := getattr(m, "__file__", None)) and f.endswith(".py"))


def cooperative(modules: Iterable[types.ModuleType]) -> contextlib.AbstractContextManager[None]:
    """Within the block, ``modules`` see cooperative primitives; restored on the way out.

    Besides the names they import, the primitives they made at import (a module-level
    ``threading.Lock()``, a class attribute) are swapped for cooperative copies in the same
    state: a real lock held by a parked thread would block the next thread that takes it
    outside the scheduler's view, and the run would stall on a correct pool.
    """
    return _swapped(modules, _THREAD_SWAPS, _copy_primitive)


def loop_clock(
    modules: Iterable[types.ModuleType], *, fresh_primitives: bool = False
) -> contextlib.AbstractContextManager[None]:
    """Within the block, ``modules`` read ``time.monotonic``/``perf_counter``/``time`` from the
    running controlled loop, so an async pool that mixes them with the loop's timeouts stays on one clock;
    with ``fresh_primitives``, in the same pass, as ``own_loop_primitives`` does."""
    return _swapped(modules, _LOOP_SWAPS, _copy_async_primitive if fresh_primitives else None)


def own_loop_primitives(modules: Iterable[types.ModuleType]) -> contextlib.AbstractContextManager[None]:
    """Within the block, the asyncio primitives ``modules`` made at import (a module-level
    ``asyncio.Lock()``, a class attribute, a module-level pool's own) are fresh copies in the
    same state, and the real ones come back after.

    An asyncio primitive binds to the event loop it first waits on, and then refuses every
    other ("is bound to a different event loop"). A server runs one loop, so a pool with a
    module-level ``asyncio.Condition`` is correct there; the harness runs each execution or
    example on a loop of its own, and without fresh copies it would report that pool as a crash.
    """
    return _swapped(modules, {}, _copy_async_primitive)


_Undo = tuple[object, str, object, object]  # (a namespace dict, a class or an object; name; real; stand-in)


_Copier = Callable[[object, dict[int, object]], object | None]
"""(a real primitive, the copies made so far by id) -> its stand-in, or None to leave it."""


@contextlib.contextmanager
def _swapped(
    modules: Iterable[types.ModuleType],
    swaps: dict[int, tuple[object, object]],
    copier: _Copier | None = None,
) -> Iterator[None]:
    undo: list[_Undo] = []
    made: dict[int, object] = {}  # id(real primitive) -> its stand-in, shared by every place it is
    followed: list[type] = []  # subclasses of the real Thread defined in the modules, counted
    modules = tuple(modules)
    names = {module.__name__ for module in modules}
    importing = [vars(module) for module in modules]
    try:
        _imports_swapped(importing, swaps)
        for module in modules:
            namespace = vars(module)
            for name, value in list(namespace.items()):
                swap = swaps.get(id(value))
                if swap is not None and swap[0] is value:
                    namespace[name] = swap[1]
                    undo.append((namespace, name, value, swap[1]))
                    continue
                if getattr(value, "__module__", None) == module.__name__:
                    _swap_bound(value, swaps, undo)
                if copier is not None:
                    at = (namespace, name, value)
                    _swap_made_at_import(module, names, at, (copier, made), undo, followed)
        if copier is _copy_primitive:
            _follow(followed, undo)
        yield
    finally:
        _imports_restored(importing)
        for cls in followed:
            _coop.FOLLOWED[cls] -= 1
            if not _coop.FOLLOWED[cls]:
                del _coop.FOLLOWED[cls]
        for place, name, real, stand_in in reversed(undo):
            if isinstance(place, dict):
                if place.get(name) is stand_in:
                    place[name] = real
            elif isinstance(place, (types.FunctionType, types.CellType)):
                if getattr(place, name) is stand_in:
                    setattr(place, name, real)
            elif vars(place).get(name) is stand_in:
                setattr(place, name, real)


_importers: dict[int, list[dict[int, tuple[object, object]]]] = {}
"""id(a swapped module's namespace) -> the swaps its ``import`` statements get, innermost last."""
_importers_lock = threading.Lock()
_real_import: Callable[..., Any] | None = None  # builtins.__import__, while ours stands in
_FIRST_IMPORT = builtins.__import__  # what a call that began as ours was taken out falls back on


def _import(
    name: str,
    globals: dict[str, Any] | None = None,
    locals: Any = None,
    fromlist: Any = (),
    level: int = 0,
) -> Any:
    """``builtins.__import__`` while modules are swapped: an ``import time`` (or ``from time
    import monotonic``) inside a swapped module's function gets the stand-in its module-level
    name has, as the module's own name does. Every other import is the real one."""
    real = _real_import or _FIRST_IMPORT  # one read: another thread may restore it meanwhile
    module = real(name, globals, locals, fromlist, level)
    found = _importers.get(id(globals)) if globals is not None else None
    if found:
        swap = found[-1].get(id(module))
        if swap is not None and swap[0] is module:
            return swap[1]
    return module


def _imports_swapped(namespaces: list[dict[str, Any]], swaps: dict[int, tuple[object, object]]) -> None:
    """Route the imports made inside ``namespaces``' code through ``_import`` (a function-local
    ``import time`` read the real clock: a correct pool's deadline never came on virtual time,
    reported as a hang)."""
    global _real_import
    with _importers_lock:
        for namespace in namespaces:
            _importers.setdefault(id(namespace), []).append(swaps)
        if _real_import is None and _importers:
            _real_import = builtins.__import__
            builtins.__import__ = _import  # type: ignore[assignment]


def _imports_restored(namespaces: list[dict[str, Any]]) -> None:
    global _real_import
    with _importers_lock:
        for namespace in namespaces:
            stack = _importers.get(id(namespace))
            if stack:
                stack.pop()
                if not stack:
                    del _importers[id(namespace)]
        if _real_import is not None and not _importers:
            if builtins.__import__ is _import:
                builtins.__import__ = _real_import
            _real_import = None


def _swap_bound(value: object, swaps: dict[int, tuple[object, object]], undo: list[_Undo]) -> None:
    """Swap the real objects bound before the run by what a module defines (``value``): a
    function's default arguments (``clock=time.monotonic``), and a class's methods' defaults
    and its attributes (``_clock = time.monotonic``, also as a ``staticmethod``), in one pass."""
    if isinstance(value, types.FunctionType):
        _swap_defaults(value, swaps, undo)
        return
    if not isinstance(value, type):
        return
    for name, member in list(vars(value).items()):
        inner = getattr(member, "__func__", member)  # staticmethod, classmethod
        if isinstance(inner, types.FunctionType):
            _swap_defaults(inner, swaps, undo)
            continue
        real = inner if isinstance(member, staticmethod) else member
        swap = swaps.get(id(real))
        if swap is None or swap[0] is not real:
            continue
        stand_in = staticmethod(swap[1]) if isinstance(member, staticmethod) else swap[1]  # type: ignore[arg-type]
        setattr(value, name, stand_in)
        undo.append((value, name, member, stand_in))


def _swap_defaults(
    function: types.FunctionType, swaps: dict[int, tuple[object, object]], undo: list[_Undo]
) -> None:
    """Swap the real objects among ``function``'s default arguments and the variables it closes
    over for their stand-ins: a default is bound when the function is defined
    (``clock=time.monotonic``, a ``lock_factory=threading.Lock``), and so is a closed-over one
    (a dataclass's ``field(default_factory=threading.Condition)`` is one of its ``__init__``), so
    swapping the module's names reaches neither."""

    def stand_in(value: object) -> object:
        swap = swaps.get(id(value))
        return swap[1] if swap is not None and swap[0] is value else value

    defaults = function.__defaults__
    if defaults:
        swapped = tuple(stand_in(value) for value in defaults)
        if any(new is not old for new, old in zip(swapped, defaults, strict=True)):
            function.__defaults__ = swapped
            undo.append((function, "__defaults__", defaults, swapped))
    for cell in function.__closure__ or ():
        try:
            value = cell.cell_contents
        except ValueError:  # a cell not filled yet
            continue
        new = stand_in(value)
        if new is not value:
            cell.cell_contents = new
            undo.append((cell, "cell_contents", value, new))
    keywords = function.__kwdefaults__
    if keywords:
        swapped_keywords = {name: stand_in(value) for name, value in keywords.items()}
        if any(swapped_keywords[name] is not value for name, value in keywords.items()):
            function.__kwdefaults__ = swapped_keywords
            undo.append((function, "__kwdefaults__", keywords, swapped_keywords))


def _swap_made_at_import(
    module: types.ModuleType,
    names: set[str],
    place: tuple[dict[str, Any], str, object],
    copying: tuple[_Copier, dict[int, object]],
    undo: list[_Undo],
    followed: list[type],
) -> None:
    """Swap what ``module`` made at import under one global name (``place``: its namespace, the
    name, the value): a primitive; a class's primitive attributes (and a Thread subclass is
    followed, counted in ``followed``); a named module's object's own primitives, one level down
    (a pool made at import). ``copying``: the copier, and the copies it made so far."""
    namespace, name, value = place
    _swap_primitive(namespace, name, value, copying, undo)
    if isinstance(value, type) and value.__module__ == module.__name__:
        for attribute, member in list(vars(value).items()):
            _swap_primitive(value, attribute, member, copying, undo)
        if issubclass(value, threading.Thread):
            _coop.FOLLOWED[value] = _coop.FOLLOWED.get(value, 0) + 1
            followed.append(value)
    elif type(value).__module__ in names and not isinstance(value, dict | type):
        for attribute, member in list(getattr(value, "__dict__", {}).items()):
            _swap_primitive(value, attribute, member, copying, undo)


_FOLLOWERS = {"start": _coop.thread_start, "join": _coop.thread_join, "is_alive": _coop.thread_is_alive}


def _follow(followed: list[type], undo: list[_Undo]) -> None:
    """Let ``threading.Thread`` start the ``followed`` classes' threads as controlled ones."""
    if not followed or vars(threading.Thread)["start"] is _coop.thread_start:
        return  # nothing to follow, or an enclosing run installed the followers already
    for name, follower in _FOLLOWERS.items():
        undo.append((threading.Thread, name, vars(threading.Thread)[name], follower))
        setattr(threading.Thread, name, follower)


def _swap_primitive(
    place: object, name: str, value: object, copying: tuple[_Copier, dict[int, object]], undo: list[_Undo]
) -> None:
    """Put the copy of ``value`` in its place, if it is a primitive the copier takes, free now."""
    copier, made = copying
    stand_in = _made(value, made, copier)
    if stand_in is None:
        return
    if isinstance(place, dict):
        place[name] = stand_in
    else:
        setattr(place, name, stand_in)
    undo.append((place, name, value, stand_in))


_REAL_LOCK = type(threading.Lock())
_REAL_RLOCK = type(threading.RLock())


_NEVER_PRIMITIVE = frozenset(
    {
        type, types.FunctionType, types.BuiltinFunctionType, types.ModuleType, types.MethodType,
        types.MethodDescriptorType, types.WrapperDescriptorType, types.GetSetDescriptorType,
        types.MemberDescriptorType, property, staticmethod, classmethod, functools.partial,
        str, bytes, int, float, bool, type(None), tuple, frozenset, dict,
    }
)  # fmt: skip
"""The types of most of a module's globals and a class's attributes, which no copier takes:
rejected by one lookup, since every name is looked at each run."""


def _made(real: object, made: dict[int, object], copier: _Copier) -> object | None:
    """The copy of ``real`` made already, else a new one (kept in ``made``), else None."""
    if type(real) in _NEVER_PRIMITIVE:
        return None
    if id(real) not in made:
        stand_in = copier(real, made)
        if stand_in is None:
            return None
        made[id(real)] = stand_in
    return made[id(real)]


def _copy_primitive(real: object, made: dict[int, object]) -> object | None:
    if type(real) is _REAL_LOCK:
        return None if real.locked() else _coop.Lock()
    if type(real) is _REAL_RLOCK:
        if not real.acquire(blocking=False):
            return None
        real.release()
        return _coop.RLock()
    if isinstance(real, threading.Condition):
        lock = _made(getattr(real.acquire, "__self__", None), made, _copy_primitive)  # its lock
        return _coop.Condition(lock) if isinstance(lock, _coop.Lock) else None
    if isinstance(real, threading.Semaphore):  # BoundedSemaphore too
        take = functools.partial(real.acquire, blocking=False)
        value = _free_units(take, real.release)
        if not isinstance(real, threading.BoundedSemaphore):
            return _coop.Semaphore(value)
        semaphore = _coop.BoundedSemaphore(value + _headroom(take, real.release))
        semaphore._value = value
        return semaphore
    if isinstance(real, threading.Event):
        event = _coop.Event()
        if real.is_set():
            event.set()
        return event
    return _copy_queue(real)


_QUEUES: dict[type, type[_coop_queue.Queue]] = {
    queue.Queue: _coop_queue.Queue,
    queue.LifoQueue: _coop_queue.LifoQueue,
    queue.PriorityQueue: _coop_queue.PriorityQueue,
}


def _copy_queue(real: object) -> _coop_queue.Queue | None:
    """A cooperative copy of a real queue made at import (its items, bound and unfinished tasks),
    or None: not one of the standard queues (a subclass is left as it is), or one in use now."""
    kind = _QUEUES.get(type(real))
    if isinstance(real, queue.Queue) and kind is not None:
        if not real.mutex.acquire(blocking=False):
            return None
        try:
            copy = kind(real.maxsize)
            copy.queue = type(real.queue)(real.queue)  # a deque, or a list (LIFO order, a heap)
            copy.unfinished_tasks = real.unfinished_tasks
        finally:
            real.mutex.release()
        return copy
    if type(real) is queue.SimpleQueue:
        items = []
        with contextlib.suppress(queue.Empty):
            while True:
                items.append(real.get_nowait())
        simple = _coop_queue.SimpleQueue()
        for item in items:
            real.put(item)
            simple.put(item)
        return simple
    return None


def _free_units(take: Callable[[], bool], give: Callable[[], object]) -> int:
    """A real semaphore's value: units taken while one comes without waiting, then given back."""
    taken = 0
    while take():
        taken += 1
    for _ in range(taken):
        give()
    return taken


def _headroom(take: Callable[[], bool], give: Callable[[], object]) -> int:
    """How many releases a real bounded semaphore takes before it refuses (undone after)."""
    given = 0
    with contextlib.suppress(ValueError):
        while True:
            give()
            given += 1
    for _ in range(given):
        take()
    return given


def _copy_async_primitive(real: object, made: dict[int, object]) -> object | None:
    """A fresh asyncio primitive in ``real``'s state (no loop bound yet), or None: not one, or
    one held or waited on now (left as it is)."""
    kind = type(real)
    if kind is asyncio.Lock:
        return None if real.locked() else asyncio.Lock()  # type: ignore[attr-defined]
    if kind is asyncio.Event:
        event = asyncio.Event()
        if real.is_set():  # type: ignore[attr-defined]
            event.set()
        return event
    if kind is asyncio.Condition:
        lock = _made(getattr(real.acquire, "__self__", None), made, _copy_async_primitive)  # type: ignore[attr-defined]
        return asyncio.Condition(lock) if isinstance(lock, asyncio.Lock) else None
    if kind in (asyncio.Semaphore, asyncio.BoundedSemaphore):
        return _copy_async_semaphore(real)  # type: ignore[arg-type]
    if kind in (asyncio.Queue, asyncio.LifoQueue, asyncio.PriorityQueue):
        return _copy_async_queue(real)  # type: ignore[arg-type]
    return None


def _copy_async_semaphore(real: asyncio.Semaphore) -> asyncio.Semaphore:
    """A fresh semaphore with ``real``'s value (and bound), read as a thread semaphore's is."""
    take = functools.partial(_taken_now, real)
    value = _free_units(take, real.release)
    if not isinstance(real, asyncio.BoundedSemaphore):
        return asyncio.Semaphore(value)
    bound = value + _headroom(take, real.release)
    semaphore = asyncio.BoundedSemaphore(bound)
    for _ in range(bound - value):
        _taken_now(semaphore)
    return semaphore


def _taken_now(semaphore: asyncio.Semaphore) -> bool:
    """Take a unit if one is free now, outside any loop: an acquire that needs no wait completes
    at its first step. False when it would wait."""
    if semaphore.locked():
        return False
    step = semaphore.acquire()
    try:
        step.send(None)
    except StopIteration:
        return True
    step.close()  # it would wait after all
    return False


def _copy_async_queue(real: asyncio.Queue[Any]) -> asyncio.Queue[Any]:
    """A fresh queue of ``real``'s kind and bound, holding its items (taken and put back)."""
    items = []
    with contextlib.suppress(asyncio.QueueEmpty):
        while True:
            items.append(real.get_nowait())
    copy: asyncio.Queue[Any] = type(real)(real.maxsize)
    for item in items:
        real.put_nowait(item)
        real.task_done()  # the put back is no new task: the count of unfinished ones stands
        copy.put_nowait(item)
    return copy
