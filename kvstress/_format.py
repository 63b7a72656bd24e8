"""Plain-text rendering shared by the commands and reports: byte sizes in binary units, aligned tables."""

from __future__ import annotations

import sys
from collections.abc import Sequence

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def human_bytes(size: int) -> str:
    """``size`` bytes in the largest binary unit that keeps it >= 1, one decimal: ``8.0 MiB``."""
    value, index = float(size), 0
    while abs(value) >= 1024 and index < len(_UNITS) - 1:
        value /= 1024
        index += 1
    return f"{size} B" if index == 0 else f"{value:.1f} {_UNITS[index]}"


def gib(size: int) -> str:
    """``size`` bytes in GiB, two decimals: ``96.00 GiB``."""
    return f"{size / (1 << 30):.2f} GiB"


def table(rows: Sequence[Sequence[str]]) -> str:
    """Rows as left-aligned columns two spaces apart, with no trailing spaces."""
    widths = [max(len(row[i]) for row in rows if i < len(row)) for i in range(max(map(len, rows)))]
    lines = ("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)) for row in rows)
    return "\n".join(line.rstrip() for line in lines)


def human_seconds(seconds: float) -> str:
    """``seconds`` in us, ms or s, three significant digits: ``12.3 us``, ``150 ms``, ``2.5 s``."""
    if seconds < 1e-3:
        return f"{seconds * 1e6:.3g} us"
    if seconds < 1:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds:.3g} s"


ERROR_TEXT_MAX = 500
"""Characters of a pool's exception kept in a message: one of a megabyte filled the terminal,
the report and every replay (a blind tester's)."""


def error_text(error: BaseException) -> str:
    """``RuntimeError: boom`` (``RuntimeError`` when its text is empty) for an exception a pool
    raised: its ``str()`` may itself raise (then it says so) or run to megabytes (cut)."""
    try:
        said = str(error)
    except Exception as broken:
        said = f"<its str() raised {type(broken).__name__}>"
    if len(said) > ERROR_TEXT_MAX:
        said = f"{said[:ERROR_TEXT_MAX]}... ({len(said):,} characters)"
    name = error_name(type(error))
    return f"{name}: {said}" if said else name


def error_name(kind: type) -> str:
    """An exception class's name as its users spell it: bare for a builtin or the user's own
    (``RuntimeError``, ``DoubleRelease``), by its public module for the standard library's
    (``queue.Empty``, not ``Empty`` or ``_queue.Empty``; ``asyncio.CancelledError``)."""
    name = kind.__name__
    module = getattr(kind, "__module__", None) or "builtins"
    top = module.split(".")[0]
    if top == "builtins" or top not in sys.stdlib_module_names:
        return name
    parts = module.split(".")
    for depth in range(1, len(parts) + 1):  # the shortest path that has it: asyncio, not asyncio.exceptions
        path = parts[:depth]
        unhidden = ".".join([*path[:-1], path[-1].lstrip("_")])  # _queue -> queue
        for public in (unhidden, ".".join(path)):
            if getattr(sys.modules.get(public), name, None) is kind:
                return f"{public}.{name}"
    return f"{module}.{name}"
