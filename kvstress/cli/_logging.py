"""Logging for the command line and the pytest plugin (the only places that configure it).

structlog writes JSON lines to ``events.jsonl`` beside the reports, and, on a terminal, a
console renderer on stderr for warnings and above, so progress output stays readable.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import structlog

from kvstress.cli._parser import UsageError


def configure(report_dir: str | Path, *, console: bool | None = None) -> Path:
    """Send kvstress' events to ``<report_dir>/events.jsonl``; returns that path."""
    directory = Path(report_dir)
    path = directory / "events.jsonl"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        handlers: list[logging.Handler] = [logging.FileHandler(path, encoding="utf-8")]
    except OSError as error:
        if directory.exists() and not directory.is_dir():
            raise UsageError(f"--report-dir {str(report_dir)!r} is a file, not a directory") from None
        raise UsageError(
            f"--report-dir {str(report_dir)!r} cannot hold reports: {error.strerror or error}"
        ) from None
    handlers[0].setFormatter(
        structlog.stdlib.ProcessorFormatter(processor=structlog.processors.JSONRenderer())
    )
    if console if console is not None else sys.stderr.isatty():
        screen = logging.StreamHandler(sys.stderr)
        screen.setLevel(logging.WARNING)
        screen.setFormatter(structlog.stdlib.ProcessorFormatter(processor=structlog.dev.ConsoleRenderer()))
        handlers.append(screen)
    root = logging.getLogger("kvstress")
    for old in list(root.handlers):
        root.removeHandler(old)
        old.close()
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(logging.INFO)
    root.propagate = False
    structlog.configure(
        processors=[
            structlog.stdlib.add_log_level,
            structlog.stdlib.add_logger_name,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )
    return path
