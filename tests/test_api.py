"""The public API is pinned: kvstress re-exports exactly these names and defines nothing itself."""

from __future__ import annotations

import pathlib
import subprocess
import sys
import tomllib
import types

import kvstress

PUBLIC = {
    "INVARIANTS",
    "AsyncAuditedPool",
    "AsyncBlockPool",
    "AuditedBlock",
    "AuditedPool",
    "audit",
    "AsyncTieredBlockPool",
    "Block",
    "BlockInfo",
    "BlockRecord",
    "BlockState",
    "CapacityPlan",
    "InvalidTransition",
    "InvariantViolation",
    "LeakDetection",
    "LeakSuspect",
    "ModelCard",
    "Operation",
    "PoolDriver",
    "PoolExhausted",
    "PoolMachine",
    "PoolSetupError",
    "ThreadedBlockPool",
    "TieredBlockPool",
    "ShadowResult",
    "shadow",
    "TimingPolicy",
    "BlockManager",
    "BlockTable",
    "Degradation",
    "PagingPolicy",
    "PrefixCache",
    "paged_machine",
    "LoadSpec",
    "OverloadPolicy",
    "WorkloadConfig",
    "WorkloadReport",
    "list_cards",
    "run_workload",
    "load_card",
    "plan",
    "pool_for_model",
    "pool_machine",
    "Explored",
    "explore",
}


def test_public_names_are_pinned() -> None:
    """kvstress exports exactly the pinned public names (plus __version__)."""
    exported = {
        name
        for name in dir(kvstress)  # loaded or not yet: the package imports each on first use
        if not name.startswith("_") and not isinstance(getattr(kvstress, name), types.ModuleType)
    }
    assert exported == PUBLIC == set(kvstress.__all__)


def test_public_names_are_defined_in_private_modules() -> None:
    """Every public object is defined in a private module, not in kvstress/__init__.py."""
    for name in PUBLIC - {"INVARIANTS"}:
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
    done = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert done.stdout == "" and done.stderr == ""  # structlog unconfigured would print to stdout


def test_an_application_with_stdlib_logging_gets_the_events() -> None:
    """Unless structlog is configured, events go to stdlib loggers under ``kvstress``, fields and all."""
    code = (
        "import logging, sys, kvstress\n"
        "logging.basicConfig(stream=sys.stdout, format='%(name)s %(levelname)s %(message)s')\n"
        "p = kvstress.ThreadedBlockPool(1, (1,)); b = p.acquire(); p.release(b); p.release(b)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert done.stdout.startswith("kvstress.pool WARNING double_release block=0 "), done.stdout


def test_every_subpackage_is_listed_for_setuptools() -> None:
    """pyproject.toml lists every kvstress subpackage, so a regular install ships all of them."""
    root = pathlib.Path(kvstress.__file__).parent
    found = {"kvstress." + p.parent.name for p in root.glob("*/__init__.py")} | {"kvstress"}
    pyproject = tomllib.loads((root.parent / "pyproject.toml").read_text())
    listed = set(pyproject["tool"]["setuptools"]["packages"])
    assert found <= listed
