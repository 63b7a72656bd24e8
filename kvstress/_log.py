"""kvstress' loggers: structlog's when the application configured structlog, stdlib's otherwise.

Unconfigured, structlog prints every event to stdout, so a library that merely imported it would
write to its host's output (the harness' deliberate double releases, for one). Here an event goes
through ``structlog.get_logger`` once ``structlog.configure`` has run (the command line and the
pytest plugin do, and so may the application), and otherwise to the stdlib logger of the same
name, under ``kvstress``, which has a NullHandler as a library's logger should: silent until the
application adds handlers.
"""

from __future__ import annotations

import logging
from collections.abc import MutableMapping
from typing import Any

import structlog

logging.getLogger("kvstress").addHandler(logging.NullHandler())


class Logger:
    """A logger by name whose sink is chosen at each call (see the module)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._stdlib = structlog.wrap_logger(
            logging.getLogger(name),
            processors=[_as_message],
            wrapper_class=structlog.stdlib.BoundLogger,
        )

    def __getattr__(self, method: str) -> Any:
        logger = structlog.get_logger(self.name) if structlog.is_configured() else self._stdlib
        return getattr(logger, method)


def _as_message(logger: Any, method: str, event: MutableMapping[str, Any]) -> dict[str, Any]:
    # "double_release block=0 count=2": the stdlib's one message line, its fields in it.
    fields = " ".join(f"{key}={value}" for key, value in event.items() if key != "event")
    return {"msg": f"{event.get('event', '')} {fields}".rstrip()}


def get_logger(name: str) -> Logger:
    """The logger for ``name`` (a dotted name under ``kvstress``)."""
    return Logger(name)
