"""The pool under test, named ``MODULE:ATTR``, imported and checked before any search starts.

Everything wrong here is the user's input, not a finding: a bad name, a module that does not
import, a factory that cannot build a pool with the given arguments, or an object that lacks
the protocol's methods. Each is one ``TargetError`` line (exit 2 from the CLI).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import torch

from kvstress._checks import check_block_shape, check_num_blocks, protocol_gap
from kvstress.controlled._patch import resolve_modules
from kvstress.controlled._reach import reached_modules
from kvstress.harness._driver import is_async_factory
from kvstress.harness._runner import Abandoned, run_on_a_thread

_SPEC = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
BACKENDS = ("asyncio", "trio")


class TargetError(ValueError):
    """The pool named on the command line (or to the plugin) cannot be used; one line."""


@dataclass(frozen=True)
class FuzzTarget:
    """A pool factory and the arguments every search builds it with."""

    spec: str  # MODULE:ATTR
    factory: Callable[..., Any]
    is_async: bool
    num_blocks: int = 2
    block_shape: tuple[int, ...] = (2, 4)
    backend: str = "asyncio"  # async pools: the event loop library
    # The modules of the built pool's class and its bases, and of the factory: the code under
    # test even where the factory is a function in another module, or a functools.partial; and
    # the user's modules they reach (``reached_modules``: a free list, a block class, a deadline
    # helper, a counter class of their own), whose lines are scheduling points too.
    pool_modules: tuple[str, ...] = ()
    # Larger pool sizes the factory builds correctly (``wider_sizes``, probed by load_target):
    # some of the search's slices run on them (``kvstress.fuzz._run.blocks_at``).
    wider: tuple[int, ...] = ()

    @property
    def mode(self) -> str:
        """ "async" or "threads", as reports name it."""
        return "async" if self.is_async else "threads"


def machine_for(target: FuzzTarget, hang_bound: float, batches: bool) -> type[Any]:
    """The state machine class for ``target``'s pool (see ``kvstress.machines.pool_machine``)."""
    from kvstress.checkers import TimingPolicy
    from kvstress.machines import pool_machine

    return pool_machine(
        target.factory,
        num_blocks=target.num_blocks,
        block_shape=target.block_shape,
        backend=target.backend,
        timing=TimingPolicy(hang_bound=hang_bound),
        batches=batches,
        check_backend=False,  # load_target did, once
    )


def check_target_args(
    spec: str, num_blocks: int, block_shape: Sequence[int], backend: str
) -> tuple[int, tuple[int, ...]]:
    """``load_target``'s checks that run none of the pool's code: the spec's form, the backend,
    the block count and shape (as ``(num_blocks, block_shape)``). TargetError names what is
    wrong."""
    if not isinstance(spec, str) or not _SPEC.match(spec):
        raise TargetError(
            f"the pool must be named MODULE:ATTR (for example kvstress:ThreadedBlockPool), got {spec!r}"
        )
    if backend not in BACKENDS:
        raise TargetError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    module_name = spec.split(":", 1)[0]
    top = module_name.split(".")[0]
    make_cwd_importable()
    # A top-level name is looked up without running any code (its parent packages would be
    # imported for a dotted one): a mistyped one is said at once, not after a child's start.
    try:
        found = importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        found = True  # the import itself says what is wrong
    if not found:
        raise TargetError(
            f"cannot import {module_name!r} for the pool {spec}: ModuleNotFoundError: No module named {top!r}"
        )
    try:
        return check_num_blocks(num_blocks), check_block_shape(block_shape)
    except ValueError as error:
        raise TargetError(str(error)) from None


def load_target(
    spec: str,
    *,
    num_blocks: int = 2,
    block_shape: Sequence[int] = (2, 4),
    backend: str = "asyncio",
    wider: bool = True,
) -> FuzzTarget:
    """Import ``spec`` (``MODULE:ATTR``, from the current directory or PYTHONPATH), build one pool
    to check it keeps the protocol, and tell threads from async. ``wider``: also find the larger
    sizes a fuzzing run tries (``wider_sizes``; a replay, at the size it recorded, needs none)."""
    blocks, shape = check_target_args(spec, num_blocks, block_shape, backend)
    factory = _import(spec)
    pool = _build(spec, factory, blocks, shape, backend)
    gap = protocol_gap(pool)
    if gap is not None:
        raise TargetError(f"{spec} built {_a(type(pool).__name__)}{gap}")
    is_async = inspect.iscoroutinefunction(pool.acquire)
    _check_plain_calls(spec, pool, is_async)
    if is_async:
        _check_backend(spec, factory, blocks, shape, backend)
    roots = resolve_modules((type(pool), factory))
    pool_modules = tuple(module.__name__ for module in (*roots, *reached_modules(roots, own_code=True)))
    sizes = wider_sizes(blocks) if wider else ()
    larger = tuple(size for size in sizes if _builds(spec, factory, size, shape, backend))
    return FuzzTarget(spec, factory, is_async, blocks, shape, backend, pool_modules, larger)


WIDEST_BASE = 16
"""The largest ``--blocks`` whose run also tries larger pools: a bigger one mirrors a real
pool's size, and twice its memory is the user's to spend."""
WIDER_BUILD_S = 5.0  # seconds the build of a larger pool may take before that size is left out


def wider_sizes(num_blocks: int) -> tuple[int, ...]:
    """The larger pool sizes a run with ``num_blocks`` also searches: a bug that needs more
    blocks than the scenarios' default two (a bitmap's next word, a stripe or shard past the
    second, a batch of four or five resets) is out of reach of a pool of two, whatever the
    schedule (a blind tester's bitmap and batched-reset pools, found at once with 3 and 5)."""
    if num_blocks > WIDEST_BASE:
        return ()
    return (num_blocks + 2, 2 * num_blocks + 4)


def builds_at(target: FuzzTarget, blocks: int) -> bool:
    """Whether ``target``'s factory builds a pool of ``blocks`` that says it has them all free
    (``_builds``)."""
    return _builds(target.spec, target.factory, blocks, target.block_shape, target.backend)


def _builds(
    spec: str, factory: Callable[..., Any], blocks: int, shape: tuple[int, ...], backend: str
) -> bool:
    """Whether ``factory`` builds a pool of ``blocks`` that says it has them all free. A pool that
    refuses the size (it raises), takes long to build, or ignores it (a fixed capacity) keeps
    to the user's size: that is no finding."""
    try:
        pool = _build(spec, factory, blocks, shape, backend, bound_s=WIDER_BUILD_S)
        return bool(pool.free_count() == blocks)
    except Exception:
        return False


PLAIN_CALLS = ("free_count", "free_ids")
"""Plain calls in both flavours: the harness reads them at quiet points without await."""

THREADED_CALLS = ("mark_in_use", "retain", "release")
"""Plain calls of a threaded pool too. An async pool's may be coroutines or plain calls: the
harness awaits what returns an awaitable (an ``async def retain`` that takes an ``asyncio.Lock``
was refused, a blind user's, though the harness ran it as well as any)."""


def _check_plain_calls(spec: str, pool: Any, is_async: bool) -> None:
    """A coroutine function where the harness makes a plain call (``free_count`` in either
    flavour, ``release`` on a threaded pool) would never run: a setup error, not the pool's
    finding."""
    plain = PLAIN_CALLS if is_async else (*THREADED_CALLS, *PLAIN_CALLS)
    wrong = [name for name in plain if inspect.iscoroutinefunction(getattr(pool, name))]
    if wrong:
        flavour = (
            "an async pool (acquire is a coroutine)"
            if is_async
            else "a threaded pool (acquire is a plain def: make it async def for an async pool)"
        )
        raise TargetError(
            f"{spec} built {flavour} whose {', '.join(wrong)} must be plain calls, not async def: "
            "the harness calls them without await (see docs/protocol.md)"
        )


BUILD_BOUND_S = 30.0
"""Seconds the first pool may take to build (``load_target``): a pool that allocates a large
memory on a slow machine takes a few; one whose constructor blocks is refused after this."""

PROBE_BOUND_S = 1.0
"""Seconds the backend probe (``_check_backend``) may take on one backend: it takes every block,
waits 1 ms for one more and gives them back, in milliseconds; a pool that ignores its timeout is
cancelled then, and one that will not end even so is left to the search."""


def _check_backend(
    spec: str, factory: Callable[..., Any], blocks: int, shape: tuple[int, ...], backend: str
) -> None:
    """An async pool that cannot take every block, wait out a short timeout and give them back
    on ``backend``, though it can on another backend, is a setup error (an asyncio-only pool run
    on trio), not a finding. A pool that fails on every backend is left to the search: that is a
    bug of its own."""

    async def one_round() -> None:
        pool = factory(blocks, shape, dtype=torch.float32, device=None)
        taken = [await pool.acquire(0) for _ in range(blocks)]
        late = await pool.acquire(0.001)  # waits: the primitives of the wait path run too
        for block in [*taken, late]:
            if block is not None:
                await _maybe(pool.release(block))
        # A reset worker's hand-back must not find the loop closed: let the pool come to rest
        # (briefly: a pool that never does is the search's to find), then close it if it can.
        for _ in range(100):
            if pool.free_count() >= blocks:
                break
            await anyio.sleep(0.001)
        close = getattr(pool, "close", None)
        if callable(close):
            await _maybe(close())

    async def bounded_round() -> None:
        with anyio.fail_after(PROBE_BOUND_S):  # a pool that ignores its timeout: the search's
            await one_round()

    def fails(on: str) -> BaseException | None:
        """What the round raised on ``on`` (None: it ran). A round that will not end even when
        cancelled (a pool that blocks its loop) is no verdict: it is left in a daemon thread, and
        the search, in processes of its own, reports the pool."""
        try:
            run_on_a_thread(
                lambda: anyio.run(bounded_round, backend=on), 2 * PROBE_BOUND_S, name=f"kvstress-probe-{on}"
            )
        except Abandoned:
            return None
        except (Exception, SystemExit) as error:
            return error
        return None

    error = fails(backend)
    if error is None:
        return
    others = [other for other in BACKENDS if other != backend and fails(other) is None]
    if others:
        raise TargetError(
            f"{spec} cannot run on {backend} ({type(error).__name__}: {error}), though it runs on "
            f"{others[0]}: choose --backend {others[0]}"
        )


async def _maybe(result: Any) -> Any:
    return await result if inspect.isawaitable(result) else result


def make_cwd_importable() -> None:
    """Let the user's pool be imported from the current directory, after the installed packages.

    The console script does not put the current directory on ``sys.path``. Appended, not
    prepended: a folder there named like an installed package (a clone of kvstress itself, say)
    must not stand in for it as a namespace package.
    """
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.append(os.getcwd())


def make_importable_after_cwd(directory: object) -> None:
    """The import path of a replay: the current directory first (``make_cwd_importable``), then
    ``directory``, the one a report's pool was imported from (its ``pool_path``).

    A replay run from another directory found no module without ``directory`` (a blind user's
    reports); one run beside a module of that name (a fix checked in another worktree) must
    import that one, not the report's old module (two blind users'). The supervisor of a replay
    and the isolated child that re-runs a crash's stream both call this, so the two keep one
    order.
    """
    make_cwd_importable()
    if isinstance(directory, str) and os.path.isdir(directory) and directory not in sys.path:
        sys.path.append(directory)


def cwd_entries() -> list[str]:
    """The ``sys.path`` entries that mean the current directory."""
    cwd = os.getcwd()
    return [entry for entry in sys.path if entry in ("", ".") or os.path.abspath(entry) == cwd]


def _import(spec: str) -> Callable[..., Any]:
    module_name, attribute = spec.split(":", 1)
    make_cwd_importable()
    try:
        module = importlib.import_module(module_name)
    except (Exception, SystemExit) as error:  # a module that exits as it is imported, too
        raise TargetError(
            f"cannot import {module_name!r} for the pool {spec}: {type(error).__name__}: {error}"
        ) from None
    value: Any = module
    for part in attribute.split("."):
        if not hasattr(value, part):
            raise TargetError(f"module {module_name!r} has no attribute {attribute!r} (the pool {spec})")
        value = getattr(value, part)
    if not callable(value):
        raise TargetError(f"the pool {spec} names {_a(type(value).__name__)}, not a pool class or factory")
    return value  # type: ignore[no-any-return]


def _build(
    spec: str,
    factory: Callable[..., Any],
    blocks: int,
    shape: tuple[int, ...],
    backend: str,
    bound_s: float | None = None,
) -> Any:
    def make() -> Any:
        return factory(blocks, shape, dtype=torch.float32, device=None)

    async def make_in_loop() -> Any:
        return make()

    def build() -> Any:
        if is_async_factory(factory) is False:
            return make()
        return anyio.run(make_in_loop, backend=backend)  # async pools may need a running loop

    # On a thread of its own, bounded: a constructor that blocks hung `kvstress fuzz` for ever,
    # before any output (a blind tester's pool sleeping in __init__).
    call = f"{spec}({blocks}, {shape}, dtype=torch.float32, device=None)"
    bound_s = BUILD_BOUND_S if bound_s is None else bound_s  # read now: a test lowers it
    try:
        return run_on_a_thread(build, bound_s, name="kvstress-build")
    except Abandoned:
        raise TargetError(f"{call} did not return within {bound_s:g} s: its constructor blocks") from None
    except (Exception, SystemExit) as error:
        raise TargetError(f"{call} raised {type(error).__name__}: {error}") from None


def _a(name: str) -> str:
    """``a list``, ``an int``, ``a OneSpacePool``, ``a UniformPool``: a type's name with its
    article, by its sound where a vowel sounds as a consonant (``an OneSpacePool`` read wrong)."""
    lower = name.lower()
    vowel = lower[:1] in "aeiou" and not lower.startswith(("one", "uni", "use", "usu", "uti", "eu"))
    return f"{'an' if vowel else 'a'} {name}"
