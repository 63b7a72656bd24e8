"""An argparse parser that reports instead of exiting, so ``main`` owns every exit status."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn


class UsageError(Exception):
    """Bad command-line input; ``main`` prints it as one ``kvstress: error:`` line, exit 2."""


class ParserExit(Exception):
    """argparse finished early (``--help``, ``--version``) with this exit status."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors raise UsageError: no usage dump, no SystemExit."""

    words: tuple[str, ...] = ()

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[no-untyped-def]
        self.words = tuple(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        if message.startswith("argument ") and message.endswith("expected one argument"):
            # argparse reads a value that starts with "-" (``-2,4``) as the next option
            option = message[len("argument ") : message.index(":")].split("/")[-1]
            words = self.words
            given = [words[i + 1] for i, word in enumerate(words[:-1]) if word == option]
            if any(value.startswith("-") for value in given):
                message += f" (a value that starts with '-' goes after '=': {option}={given[-1]})"
        raise UsageError(message)

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if status != 0 and message:
            raise UsageError(message.strip())
        raise ParserExit(status)
