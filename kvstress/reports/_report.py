"""Failure reports: one JSON file per failure (schema ``kvstress.failure/1``), HTML beside it.

The JSON is the record; the HTML is rendered from it and can be rendered again
(``kvstress report``). Reports are read back with ``json`` only, never unpickled, and checked
field by field, so a truncated, corrupt or foreign file is one clear ``ReportError``.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import platform
import re
import shlex
import sys
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from kvstress._violation import INVARIANTS

SCHEMA = "kvstress.failure/1"
REQUIRED: dict[str, type | tuple[type, ...]] = {
    "schema": str,
    "invariant": str,
    "message": str,
    "pool": str,
    "mode": str,
    "backend": (str, type(None)),
    "strategy": str,
    "seed": int,
    "schedule": (str, type(None)),
    "elapsed_s": (int, float),
    "history": list,
    "blocks": list,
    "metrics": dict,
    "versions": dict,
    "replay": str,
}
MODES = ("threads", "async", "unknown")
"""``unknown``: a crash while kvstress loaded the pool (its module, or the one pool built to check
the protocol), before it could tell threads from async."""


class ReportError(ValueError):
    """A file that is not a readable kvstress failure report; the message is one line."""


def versions() -> dict[str, str]:
    """kvstress, Python and torch versions, and the device the pools ran on."""
    import torch

    try:
        own = metadata.version("kvstress")
    except metadata.PackageNotFoundError:
        own = "unknown"
    device = f"cuda ({torch.cuda.get_device_name(0)})" if torch.cuda.is_available() else "cpu"
    return {
        "kvstress": own,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "device": device,
    }


def import_root(spec: str) -> str | None:
    """The directory the pool ``MODULE:ATTR`` was imported from (the ``sys.path`` entry that
    holds its top-level package or module), if it is imported here and is a file on disk: a
    replay from another directory adds it to the path (the command then works from anywhere)."""
    top = spec.partition(":")[0].partition(".")[0]
    module = sys.modules.get(top)
    file = getattr(module, "__file__", None)
    if not isinstance(file, str):
        return None
    where = Path(file).resolve().parent
    return str(where.parent if Path(file).name == "__init__.py" else where)


def write_report(report: Mapping[str, Any], report_dir: str | os.PathLike[str]) -> Path:
    """Write ``report`` as ``<dir>/<time>-<invariant>-<pool>-<n>.json`` plus its ``.html``.

    The name is claimed with O_EXCL, so processes writing into one directory (pytest-xdist
    workers, ``fuzz --workers``) never collide. ``replay`` is filled in with the command that
    replays this very file. Returns the JSON path.
    """
    directory = Path(report_dir)
    directory.mkdir(parents=True, exist_ok=True)
    path = _claim(directory, report)
    data = dict(report)
    # The absolute path: the command works from any directory (``kvstress report`` of a report
    # written under a relative --report-dir, read elsewhere, printed one that did not).
    data["replay"] = f"kvstress replay {shlex.quote(str(path.resolve()))}"
    if "pool_path" not in data and isinstance(data.get("pool"), str):
        data["pool_path"] = import_root(data["pool"])
    text = json.dumps(_finite(data), indent=1, default=repr, allow_nan=False)
    temporary = path.with_suffix(".json.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)
    write_html(data, path.with_suffix(".html"))
    return path


def _finite(value: Any) -> Any:
    """``value`` with every float that JSON cannot hold (NaN, infinities) as its ``repr``: a
    pool's answer read into a report (a ``free_count`` of NaN) made writing it fail, and the
    finding was lost (a blind tester's)."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, Mapping):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value


def write_html(report: Mapping[str, Any], path: Path) -> None:
    """Render ``report`` to the self-contained HTML page at ``path``."""
    from kvstress.reports._html import render_html

    path.write_text(render_html(report), encoding="utf-8")


DIVERGED = "not recorded: the replay under the recorder did not follow the schedule"
"""``switches_note`` of a controlled finding whose one replay, right after the search, did not
follow its schedule (work the pool handed to real threads, outside the schedule, went
otherwise): a replay of its report may not reproduce it either (``replay_line``)."""


def replay_line(report: Mapping[str, Any]) -> str:
    """``replay: <command>``, and for a free-running finding (no schedule: ``reproduction``) how
    often its seed's re-runs reproduced it, which is what the replay measures again: it printed
    the same line as an exact replay's, and a blind user's replay said "not reproduced (0/10)"."""
    line = f"replay: {report['replay']}"
    if report.get("switches_note") == DIVERGED:
        # Blind users' pools that zero or sort in an executor or trio's to_thread: 5 of 6 such
        # findings said "not reproduced" on replay, with nothing at the finding to say why.
        line += (
            " (its first replay, right after it was found, did not follow the schedule: work the"
            " pool hands to real threads runs outside it, so a replay may not reproduce it)"
        )
    rate = report.get("reproduction")
    if isinstance(rate, Mapping) and isinstance(rate.get("replays"), int) and rate["replays"] > 0:
        line += (
            f" (free-running, no schedule to replay: re-runs of its seed reproduced it "
            f"{rate.get('reproduced', 0)}/{rate['replays']} times; the replay measures that rate again)"
        )
    return line


def load_report(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and check a report; ``ReportError`` (one line) for anything that is not one."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ReportError(f"cannot read report {str(path)!r}: {_reason(error)}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        why = error.msg.removesuffix(" at")  # "Invalid control character at": no "at at line 1"
        raise ReportError(
            f"{str(path)!r} is not a kvstress report: not JSON ({why} at line {error.lineno})"
        ) from None
    except RecursionError:  # thousands of nested arrays: the decoder gives up (a traceback, exit 1)
        raise ReportError(f"{str(path)!r} is not a kvstress report: JSON nested too deep to read") from None
    if not isinstance(data, dict):
        raise ReportError(f"{str(path)!r} is not a kvstress report: the JSON is not an object")
    if data.get("schema") != SCHEMA:
        raise ReportError(
            f"{str(path)!r} is not a kvstress report: schema is {data.get('schema')!r}, expected {SCHEMA!r}"
        )
    for field, kind in REQUIRED.items():
        if field not in data:
            raise ReportError(f"{str(path)!r} is an incomplete kvstress report: field {field!r} is missing")
        if not isinstance(data[field], kind) or (isinstance(data[field], bool) and kind is int):
            raise ReportError(
                f"{str(path)!r} is a corrupt kvstress report: field {field!r} is {data[field]!r}"
            )
    if data["invariant"] not in INVARIANTS:
        raise ReportError(f"{str(path)!r} names an unknown invariant {data['invariant']!r}")
    if data["mode"] not in MODES:
        raise ReportError(f"{str(path)!r} has mode {data['mode']!r}, expected one of {MODES}")
    return data


def _claim(directory: Path, report: Mapping[str, Any]) -> Path:
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    pool = re.sub(r"[^A-Za-z0-9_.-]+", "_", str(report.get("pool", "pool")))[-60:]
    stem = f"{stamp}-{report.get('invariant', 'failure')}-{pool}-{os.getpid()}"
    for number in range(10_000):
        path = directory / f"{stem}-{number}.json"
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            continue
        return path
    raise ReportError(f"cannot find a free report name in {str(directory)!r}")


def _reason(error: BaseException) -> str:
    return getattr(error, "strerror", None) or type(error).__name__
