"""The user's modules that code under test reaches: where its locks, clocks and queues are made.

A pool is seldom one module. Its free list may be a class in ``freelist.py``, its blocks a class
in ``block.py`` that makes a lock each, its deadlines a helper in ``util.py``. Each of those makes
primitives and reads the clock while the pool runs, and each must see the controlled ones: a
thread waiting on a real lock that a parked thread holds stalls the run (a hang on a correct
pool), and a deadline on the real clock comes early or never on virtual time.

``reached_modules`` follows what the given modules refer to (the modules they import, the classes
and functions they import with their defining modules, a class with its bases), through the
user's own code: the modules of the roots' own top-level packages and any module outside the
installed packages. The standard library, the harness and the libraries it stands on are left
alone; an installed package is taken only where the user's code refers to it, never entered.
Imports inside function bodies are not seen (nothing runs to find them).
"""

from __future__ import annotations

import inspect
import os
import site
import sys
import sysconfig
import types
from collections.abc import Iterable, Iterator

INFRASTRUCTURE = frozenset(
    {
        "kvstress", "_pytest", "pytest", "pluggy", "xdist", "execnet", "pytest_asyncio", "anyio",
        "sniffio", "trio", "outcome", "hypothesis", "torch", "numpy", "structlog", "rich",
    }
)  # fmt: skip
"""Top-level packages never made cooperative on the user's behalf: the harness and the libraries
it stands on (their locks guard their own machinery, shared with threads outside the baton).
``kvstress.mutants`` is a pool like any."""

CONCURRENCY_API = frozenset({"threading", "queue", "_thread", "concurrent", "time", "asyncio"})
"""What makes a reached module one to control: it imports one of these (or something of theirs)."""

MAX_MODULES = 256
"""Modules looked at, at most, in one walk: a bound on its cost in a large code base."""


def reached_modules(
    roots: Iterable[types.ModuleType], api: frozenset[str] = CONCURRENCY_API, *, own_code: bool = False
) -> tuple[types.ModuleType, ...]:
    """The modules reached from ``roots`` (see the module's docstring), roots excluded, that use
    ``api``, in the order they were reached; with ``own_code``, also every reached module of
    the user's own (the roots' top-level packages, or outside the installed packages) whatever
    it imports: a helper that only computes (a counter class, a free-list of plain lists) runs
    inside the pool's operations, and its lines are where real threads switch too."""
    roots = tuple(roots)
    seen = {module.__name__ for module in roots}
    tops = {module.__name__.partition(".")[0] for module in roots}
    found: dict[str, types.ModuleType] = {}
    frontier = list(roots)
    while frontier and len(seen) < MAX_MODULES:
        for module in _referred(frontier.pop(0)):
            name = module.__name__
            if name in seen or left_alone(name):
                continue
            seen.add(name)
            own = name.partition(".")[0] in tops or not _installed(module)
            if uses_api(module, api) or (own_code and own):
                found[name] = module
            if own:
                frontier.append(module)
    return tuple(found.values())


def left_alone(name: str) -> bool:
    """Whether the module ``name`` is never controlled on the user's behalf: the standard
    library, the harness and its libraries (``INFRASTRUCTURE``)."""
    top = name.partition(".")[0]
    if top in sys.stdlib_module_names or name == "__main__":
        return True
    return top in INFRASTRUCTURE and not name.startswith("kvstress.mutants")


def uses_api(module: types.ModuleType, api: frozenset[str]) -> bool:
    """Whether ``module`` imports one of the ``api`` modules (or a submodule of one), or anything
    defined in one (a class, a function): what its code may make or call while it runs."""
    for value in list(vars(module).values()):
        name: object
        if isinstance(value, types.ModuleType):
            name = value.__name__
        else:
            try:
                name = getattr(value, "__module__", None)
            except Exception:  # an object whose attributes raise names no module
                continue
        if isinstance(name, str) and _in_api(name, api):
            return True
    return False


def _referred(module: types.ModuleType) -> Iterator[types.ModuleType]:
    """The modules ``module``'s namespace refers to: imported modules, and the defining modules
    of its classes (with their bases) and functions."""
    for value in list(vars(module).values()):
        if isinstance(value, types.ModuleType):
            yield value
            continue
        if isinstance(value, type):
            names = [base.__module__ for base in value.__mro__]
        elif inspect.isfunction(value):
            names = [value.__module__]
        else:
            continue
        for name in names:
            found = sys.modules.get(name) if isinstance(name, str) else None
            if found is not None:
                yield found


def users_own(module: types.ModuleType) -> bool:
    """Whether ``module`` is the user's own code: outside the installed packages, the standard
    library and the harness."""
    return not left_alone(module.__name__) and not _installed(module)


def _installed(module: types.ModuleType) -> bool:
    """Whether ``module`` comes from an installed package (site-packages), not the user's tree."""
    path = getattr(module, "__file__", None)
    if not isinstance(path, str):
        return True  # a built-in or a namespace package: nothing of the user's to follow
    path = os.path.realpath(path)
    return any(path.startswith(prefix) for prefix in _site_dirs())


_SITE_DIRS: tuple[str, ...] | None = None


def _site_dirs() -> tuple[str, ...]:
    global _SITE_DIRS
    if _SITE_DIRS is None:
        dirs = {sysconfig.get_paths()[key] for key in ("purelib", "platlib")}
        dirs.update(getattr(site, "getsitepackages", list)())
        dirs.add(getattr(site, "getusersitepackages", str)())
        _SITE_DIRS = tuple(os.path.realpath(d) + os.sep for d in dirs if d)
    return _SITE_DIRS


def class_uses_api(cls: type, api: frozenset[str]) -> bool:
    """Whether the code of ``cls`` (the methods of its MRO, the functions nested in them, and the
    functions and classes of the pool's own modules they call) refers to one of the ``api``
    modules or to anything defined in one; or whether a class of its MRO is defined in one. A
    module that imports anyio for something else (a ``__main__`` block, a helper of its own)
    does not make an asyncio pool an anyio one."""
    own = {klass.__module__ for klass in cls.__mro__ if klass is not object}
    seen: set[int] = set()
    frontier: list[object] = []
    for klass in cls.__mro__:
        if klass is object:
            continue
        if _in_api(klass.__module__, api):
            return True
        frontier.extend(vars(klass).values())
    while frontier:
        value = frontier.pop()
        for code, names in _code_of(value):
            if id(code) in seen:
                continue
            seen.add(id(code))
            for name in code.co_names:
                found = names.get(name)
                if found is None:
                    continue
                if isinstance(found, types.ModuleType):
                    if _in_api(found.__name__, api):
                        return True
                    continue
                module = getattr(found, "__module__", None)
                if isinstance(module, str) and _in_api(module, api):
                    return True
                if module in own and (inspect.isfunction(found) or isinstance(found, type)):
                    frontier.extend(vars(found).values() if isinstance(found, type) else (found,))
    return False


def _in_api(name: str, api: frozenset[str]) -> bool:
    """Whether the module ``name`` is one of ``api`` or inside one."""
    return name in api or name.partition(".")[0] in api


def _code_of(value: object) -> Iterator[tuple[types.CodeType, dict[str, object]]]:
    """The code objects of a class attribute (a function, a static or class method, a property),
    nested ones included, each with the globals it names are looked up in."""
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    if isinstance(value, property):
        for part in (value.fget, value.fset, value.fdel):
            if part is not None:
                yield from _code_of(part)
        return
    if not inspect.isfunction(value):
        return
    names = value.__globals__
    stack = [value.__code__]
    while stack:
        code = stack.pop()
        yield code, names
        stack.extend(const for const in code.co_consts if isinstance(const, types.CodeType))
