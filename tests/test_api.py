"""The public API is pinned: kvstress re-exports exactly these names and defines nothing itself."""

from __future__ import annotations

import subprocess
import sys

import kvstress

PUBLIC = {
    "AsyncBlockPool",
    "Block",
    "BlockInfo",
    "BlockState",
    "InvalidTransition",
    "LeakDetection",
    "LeakSuspect",
    "PoolExhausted",
    "ThreadedBlockPool",
}


def test_public_names_are_pinned() -> None:
    """kvstress exports exactly the pinned public names (plus __version__)."""
    exported = {name for name in vars(kvstress) if not name.startswith("_")}
    exported -= {"pool", "capacity", "cli"}  # subpackages, imported as a side effect
    assert exported == PUBLIC


def test_public_names_are_defined_in_private_modules() -> None:
    """Every public object is defined in a private module, not in kvstress/__init__.py."""
    for name in PUBLIC:
        module = getattr(kvstress, name).__module__
        assert module.startswith("kvstress.") and "._" in module, (name, module)


def test_block_state_values_are_fixed() -> None:
    """BlockState is an IntEnum FREE=0, ACQUIRED=1, IN_USE=2, RELEASING=3."""
    assert [(s.name, int(s)) for s in kvstress.BlockState] == [
        ("FREE", 0),
        ("ACQUIRED", 1),
        ("IN_USE", 2),
        ("RELEASING", 3),
    ]


def test_importing_the_library_configures_no_logging() -> None:
    """The library only gets structlog loggers; it never configures logging itself."""
    code = (
        "import logging, structlog, kvstress\n"
        "p = kvstress.ThreadedBlockPool(1, (1,)); b = p.acquire(); p.release(b); p.release(b)\n"
        "assert not structlog.is_configured()\n"
        "assert not logging.getLogger().handlers\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
