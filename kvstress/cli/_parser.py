"""An argparse parser that reports instead of exiting, so ``main`` owns every exit status."""

from __future__ import annotations

import argparse
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

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if status != 0 and message:
            raise UsageError(message.strip())
        raise ParserExit(status)
