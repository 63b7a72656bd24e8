"""The README's promises that code can check: its first commands are what CI runs."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def first_bash_block() -> list[str]:
    """The commands of the README's first bash block, without comments and blank lines."""
    text = (ROOT / "README.md").read_text()
    block = text.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip() and not line.startswith("#")]


def test_the_first_block_is_two_commands_install_and_run_then_test() -> None:
    """One command makes a venv, installs torch first and runs the main job; the other tests."""
    install, tests = first_bash_block()
    assert install.startswith(
        "python3 -m venv .venv && . .venv/bin/activate && pip install torch==2.13.0 && "
    )
    assert "kvstress fuzz" in install
    assert tests.endswith("python -m pytest -n 2")


def test_ci_reads_those_commands_from_the_readme() -> None:
    """.ci/run extracts exactly the two commands, with the venv moved into its own folder."""
    script = "source <(sed -n '/^mapfile/,/^)/p' .ci/run); printf '%s\\n' \"${commands[@]}\""
    done = subprocess.run(
        ["bash", "-c", f"work=/W; {script}"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert done.stdout.splitlines() == [c.replace(".venv", "/W/venv") for c in first_bash_block()]
