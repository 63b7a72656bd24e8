"""The plugin's options, each on the command line and in the ini file, read once per session.

A command-line value wins over the ini value, which wins over the default. Values are checked
when pytest starts, so a bad one is a usage error naming the option, not a failure deep inside
the first test that fuzzes.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

DEFAULT_BUDGET_S = 10.0
DEFAULT_REPORT_DIR = "reports"
MARKER = "kvstress: a test that fuzzes a pool with the kvstress fixture"
SEED_BITS = 32  # short enough to read aloud; the per-test seeds are derived from it


@dataclass(frozen=True)
class Settings:
    """What the kvstress options resolved to for this session (and every xdist worker of it)."""

    budget_s: float  # wall seconds per ``kvstress.check`` unless the call gives its own
    session_seed: int  # >= 0; each test derives its own seeds from it and its node id
    report_dir: Path  # absolute: every worker writes into the same directory
    controlled_loop: bool  # pytest-asyncio tests run on kvstress' controlled loop


SETTINGS = pytest.StashKey[Settings]()


def add_options(parser: pytest.Parser) -> None:
    """Register the ``kvstress`` option group and its ini equivalents."""
    group = parser.getgroup("kvstress", "kvstress: fuzz KV-cache block pools")
    group.addoption(
        "--kvstress-budget",
        dest="kvstress_budget",
        type=float,
        default=None,
        metavar="SECONDS",
        help=f"wall seconds each kvstress.check fuzzes for (default {DEFAULT_BUDGET_S:g})",
    )
    group.addoption(
        "--kvstress-seed",
        dest="kvstress_seed",
        type=int,
        default=None,
        metavar="N",
        help="session seed; each test derives its own from it (default: random, shown in the header)",
    )
    group.addoption(
        "--kvstress-report-dir",
        dest="kvstress_report_dir",
        default=None,
        metavar="DIR",
        help=f"where failure reports go, relative to the rootdir (default {DEFAULT_REPORT_DIR})",
    )
    group.addoption(
        "--kvstress-controlled-loop",
        dest="kvstress_controlled_loop",
        action="store_true",
        default=None,
        help="run pytest-asyncio tests on kvstress' seeded, replayable controlled event loop",
    )
    group.addoption(
        "--kvstress-replay",
        dest="kvstress_replay",
        default=None,
        metavar="ks1:...",
        help="run each selected kvstress_explore test under exactly this schedule (from a failure)",
    )
    # Strings, parsed here: pytest's own "int" and "float" ini types need pytest >= 8.4.
    parser.addini("kvstress_budget", "default for --kvstress-budget", default=str(DEFAULT_BUDGET_S))
    parser.addini("kvstress_seed", "default for --kvstress-seed (empty: random)", default="")
    parser.addini("kvstress_report_dir", "default for --kvstress-report-dir", default=DEFAULT_REPORT_DIR)
    parser.addini(
        "kvstress_controlled_loop", "default for --kvstress-controlled-loop", type="bool", default=False
    )


def read_settings(config: pytest.Config, inherited_seed: int | None) -> Settings:
    """The session's settings; ``inherited_seed`` (an xdist worker's) overrides every other seed.

    A bad value raises ``pytest.UsageError`` naming the option and the value.
    """
    flag = config.option.kvstress_controlled_loop  # None unless given on the command line
    with _usage_errors():
        settings = Settings(
            budget_s=_budget(config),
            session_seed=_session_seed(config) if inherited_seed is None else inherited_seed,
            report_dir=configured_report_dir(config),
            controlled_loop=bool(config.getini("kvstress_controlled_loop") if flag is None else flag),
        )
        if config.option.kvstress_report_dir is not None:
            _can_hold_reports(settings.report_dir)
        return settings


def _can_hold_reports(directory: Path) -> None:
    """A report directory given on the command line, made now: one that cannot be (a file, a path
    under /proc) failed the first finding's report, and the finding was lost (a blind tester's).
    The default is left to be made by the first report: a session that finds nothing makes none."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        reason = "is a file" if directory.is_file() else f"cannot hold reports: {error.strerror or error}"
        raise ValueError(f"--kvstress-report-dir {str(directory)!r} {reason}") from None


def check_budget(budget: object, name: str) -> float:
    """``budget`` as seconds > 0; ValueError naming ``name`` otherwise."""
    if isinstance(budget, bool) or not isinstance(budget, int | float) or not budget > 0:
        raise ValueError(f"{name} must be a number of seconds > 0, got {budget!r} ({type(budget).__name__})")
    return float(budget)


def check_seed(seed: object, name: str) -> int:
    """``seed`` as an int >= 0; ValueError naming ``name`` otherwise."""
    if type(seed) is not int or seed < 0:
        raise ValueError(f"{name} must be an int >= 0, got {seed!r} ({type(seed).__name__})")
    return seed


@contextlib.contextmanager
def _usage_errors() -> Iterator[None]:
    # A bad option is the user's to fix: one line, not a traceback through the plugin.
    try:
        yield
    except ValueError as error:
        raise pytest.UsageError(str(error)) from None


def _budget(config: pytest.Config) -> float:
    value = config.option.kvstress_budget
    if value is not None:
        return check_budget(value, "--kvstress-budget")
    text = str(config.getini("kvstress_budget")).strip()
    try:
        number = float(text)
    except ValueError:
        raise ValueError(f"ini kvstress_budget must be a number of seconds > 0, got {text!r}") from None
    return check_budget(number, "ini kvstress_budget")


def _session_seed(config: pytest.Config) -> int:
    value = config.option.kvstress_seed
    if value is not None:
        return check_seed(value, "--kvstress-seed")
    text = str(config.getini("kvstress_seed")).strip()
    if not text:
        return secrets.randbits(SEED_BITS)  # not `random`: other plugins reseed it for each test
    try:
        number = int(text)
    except ValueError:
        raise ValueError(f"ini kvstress_seed must be an int >= 0 or empty, got {text!r}") from None
    return check_seed(number, "ini kvstress_seed")


def configured_report_dir(config: pytest.Config) -> Path:
    """``--kvstress-report-dir`` (or the ini's), absolute: relative to the rootdir. ValueError
    for an empty one."""
    value = config.option.kvstress_report_dir
    text = str(config.getini("kvstress_report_dir") if value is None else value).strip()
    if not text:
        raise ValueError("--kvstress-report-dir (ini kvstress_report_dir) must name a directory, got ''")
    path = Path(text).expanduser()
    return path if path.is_absolute() else config.rootpath / path
