"""The entry point: build the parser from the subcommand modules, run one, map errors to statuses.

Exit statuses: 0 done, 1 a violation found or reproduced (``fuzz``, ``replay``), 2 bad input
(one ``kvstress: error:`` line on stderr, never a traceback), 130 interrupted. A subcommand is
one module with ``add_parser`` and ``run``, listed in ``_COMMANDS``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import os
import sys
import threading
from importlib import metadata
from typing import NoReturn, Protocol

import kvstress
from kvstress.cli._parser import Parser, ParserExit, UsageError

_PROG = "kvstress"


class Command(Protocol):
    """A subcommand module: registers its parser (with ``run`` as a default) and runs."""

    def add_parser(self, subparsers: argparse._SubParsersAction[Parser]) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


_COMMANDS: dict[str, tuple[str, str]] = {
    "fuzz": ("kvstress.cli._fuzz", "search a pool for violations; write a report for the first one"),
    "replay": ("kvstress.cli._replay", "replay a failure report on its pool"),
    "report": ("kvstress.cli._report", "print a failure report, or re-render its HTML page"),
    "mutants": (
        "kvstress.cli._mutants",
        "measure kvstress on its planted-bug corpus: mutation score and time to detect",
    ),
    "plan": ("kvstress.cli._plan", "size a KV-cache block pool for a model and a load"),
    "bench": ("kvstress.cli._bench", "measure what the pool buys"),
    "shadow": (
        "kvstress.cli._shadow",
        "decode with a tiny model over a pool's blocks beside a reference; report drift",
    ),
}
"""Each command: the module that defines and runs it, and its one-line help. Only the module of
the command being run is imported (several import torch, 2-3 s): ``kvstress --help`` and
``kvstress report`` took seconds while every command's module loaded."""


def main(argv: list[str] | None = None) -> int:
    """Run the command line on ``argv`` (default ``sys.argv[1:]``); return the exit status."""
    if argv is None:
        argv = sys.argv[1:]
    parser = build_parser(chosen_command(argv))
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return 2
        status: int = args.run(args)
        return status
    except ParserExit as exc:
        return exc.status
    except (UsageError, ValueError) as exc:
        # ValueError is how the API reports misuse; its message already names the argument.
        _say(f"error: {exc}")
        return 2
    except KeyboardInterrupt:
        _say("interrupted")
        return 130
    except BrokenPipeError:
        # The reader went away (``| head``): nothing more to say, and no traceback at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def entry() -> NoReturn:
    """The ``kvstress`` script and ``python -m kvstress``: ``main()``, then exit with its status.

    A pool that spins in C code or hangs is abandoned on a daemon thread (``StuckThread``, a hang),
    and Ctrl-C can land while a worker is inside torch. The interpreter's own exit would end such a
    thread inside C++ frames, and the process would abort (``terminate called without an active
    exception``, status -6) instead of exiting with the status the run earned. So when a thread
    lingers, everything is flushed and the process leaves at once.
    """
    status = main()
    # The stall meter's heartbeat only sleeps: the interpreter ends it safely.
    meter = getattr(sys.modules.get("kvstress.harness._cpu"), "STALL_METER", None)
    others = [t for t in threading.enumerate() if t is not threading.main_thread()]
    if any(t.is_alive() and t.name != meter for t in others):
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):  # a closed pipe: no reader is left
                stream.flush()
        os._exit(status)
    sys.exit(status)


def chosen_command(argv: list[str]) -> str | None:
    """The command ``argv`` runs: its first word that is no option (the top level's options
    take no value), if it names one."""
    first = next((word for word in argv if not word.startswith("-")), None)
    return first if first in _COMMANDS else None


def command_module(name: str) -> Command:
    """The module of the command ``name``."""
    module: Command = importlib.import_module(_COMMANDS[name][0])
    return module


def build_parser(command: str | None = "*") -> Parser:
    """The top-level parser; each command's own parser is built by its module for ``command``
    only (``"*"``, the default: every command), the others named with their help."""
    parser = Parser(
        prog=_PROG,
        description="Prove a KV-cache block pool correct under concurrency, and size one.",
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"{_PROG} {_version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for name, (_, summary) in _COMMANDS.items():
        if command in (name, "*"):
            command_module(name).add_parser(subparsers)
        else:
            subparsers.add_parser(name, help=summary)
    return parser


def _say(message: str) -> None:
    # One line, whatever the message holds, so scripts can read stderr line by line.
    print(f"{_PROG}: {' '.join(message.splitlines())}", file=sys.stderr)


def _version() -> str:
    try:
        return metadata.version(_PROG)
    except metadata.PackageNotFoundError:
        # Run from a checkout that was never installed.
        return kvstress.__version__
