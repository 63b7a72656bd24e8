"""The entry point: build the parser from the subcommand modules, run one, map errors to statuses.

Exit statuses: 0 done, 1 a violation found or reproduced (``fuzz``, ``replay``), 2 bad input
(one ``kvstress: error:`` line on stderr, never a traceback), 130 interrupted. A subcommand is
one module with ``add_parser`` and ``run``, listed in ``_COMMANDS``.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import threading
from importlib import metadata
from typing import NoReturn, Protocol

import kvstress
from kvstress.cli import _bench, _fuzz, _mutants, _plan, _replay, _report, _shadow
from kvstress.cli._parser import Parser, ParserExit, UsageError
from kvstress.harness._cpu import STALL_METER

_PROG = "kvstress"


class Command(Protocol):
    """A subcommand module: registers its parser (with ``run`` as a default) and runs."""

    def add_parser(self, subparsers: argparse._SubParsersAction[Parser]) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


_COMMANDS: tuple[Command, ...] = (_fuzz, _replay, _report, _mutants, _plan, _bench, _shadow)


def main(argv: list[str] | None = None) -> int:
    """Run the command line on ``argv`` (default ``sys.argv[1:]``); return the exit status."""
    parser = build_parser()
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
    others = [t for t in threading.enumerate() if t is not threading.main_thread()]
    if any(t.is_alive() and t.name != STALL_METER for t in others):
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):  # a closed pipe: no reader is left
                stream.flush()
        os._exit(status)
    sys.exit(status)


def build_parser() -> Parser:
    """The top-level parser with every subcommand registered."""
    parser = Parser(
        prog=_PROG,
        description="Prove a KV-cache block pool correct under concurrency, and size one.",
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"{_PROG} {_version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for command in _COMMANDS:
        command.add_parser(subparsers)
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
