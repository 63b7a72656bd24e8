"""The README's tutorial, run as a reader runs it: its pools saved as mypools.py, its commands."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def tutorial() -> str:
    """The README's tutorial section, up to the next heading of its level."""
    text = (ROOT / "README.md").read_text()
    return text.split("\n## Tutorial", 1)[1].split("\n## ", 1)[0]


def pool_code() -> str:
    """The tutorial's python blocks in order: the pool, then its buggy twin added to the file."""
    return "\n\n".join(re.findall(r"```python\n(.*?)```", tutorial(), re.S))


def shown_commands() -> dict[str, list[str]]:
    """The ``$ kvstress fuzz`` lines of the tutorial's terminal session, by the pool they name."""
    commands = {}
    for line in tutorial().splitlines():
        if line.startswith("$ kvstress fuzz "):
            argv = shlex.split(line[2:])
            commands[argv[argv.index("--pool") + 1]] = argv[1:]
    return commands


def shown_output(command: str) -> list[str]:
    """The lines the README shows right after ``$ command``, up to the next prompt."""
    lines = tutorial().splitlines()
    start = lines.index(f"$ {command}") + 1
    end = next(i for i in range(start, len(lines)) if lines[i].startswith(("$ ", "```")))
    return lines[start:end]


def kvstress(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``kvstress ARGS`` in ``cwd`` (where mypools.py lies), bounded in time."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, "-m", "kvstress", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def with_budget(argv: list[str], seconds: str) -> list[str]:
    """``argv`` with its ``--budget`` value replaced."""
    at = argv.index("--budget") + 1
    return [*argv[:at], seconds, *argv[at + 1 :]]


@pytest.fixture
def mypools(tmp_path: Path) -> Path:
    """A folder holding the tutorial's mypools.py, as the reader saves it."""
    (tmp_path / "mypools.py").write_text(pool_code())
    return tmp_path


def test_the_tutorial_shows_both_pools_and_both_commands() -> None:
    """Two python blocks (the pool and its twin) and a fuzz command for each, seeded."""
    code = pool_code()
    assert code.startswith("# mypools.py\n")
    assert "class SimplePool:" in code and "class BuggyPool(SimplePool):" in code
    commands = shown_commands()
    assert set(commands) == {"mypools:SimplePool", "mypools:BuggyPool"}
    assert all("--seed" in argv for argv in commands.values())


def test_the_correct_pool_is_clean(mypools: Path) -> None:
    """SimplePool, fuzzed with the tutorial's command on a short budget: exit 0, no report."""
    argv = with_budget(shown_commands()["mypools:SimplePool"], "3")
    done = kvstress(argv, mypools)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("no violation found:")
    assert shown_output(shlex.join(["kvstress", *shown_commands()["mypools:SimplePool"]]))[0].startswith(
        "no violation found:"
    )
    assert not list((mypools / "reports").glob("*.json"))


def test_the_buggy_twin_fails_as_shown_and_replays(mypools: Path) -> None:
    """BuggyPool, fuzzed with the tutorial's command: exit 1 with the violation the README shows,
    a report, and a replay that reproduces it."""
    argv = shown_commands()["mypools:BuggyPool"]
    done = kvstress(argv, mypools)
    assert done.returncode == 1, done.stdout + done.stderr
    shown = shown_output(shlex.join(["kvstress", *argv]))
    # The invariant, not the whole line: the first slices are timed, so on a slower machine the
    # find may come from a later strategy, with another block or value in its message.
    assert shown[0].startswith("violation: [dirty-read]")
    assert done.stdout.startswith("violation: [dirty-read]")
    (report,) = (mypools / "reports").glob("*.json")
    replayed = kvstress(["replay", str(report), "--quiet"], mypools)
    assert replayed.returncode == 1, replayed.stdout + replayed.stderr
    assert "reproduced: dirty-read" in replayed.stdout
