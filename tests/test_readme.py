"""The README's promises that code can check: its first commands are what CI runs, and its links hold."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

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


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of a markdown file's headings (outside code blocks)."""
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return {anchor(line.lstrip("#")) for line in text.splitlines() if line.startswith("#")}


DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("page", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_reaches_a_file_and_heading(page: Path) -> None:
    """Links between the README and docs/ name files that exist and headings they hold."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if target.startswith(("http://", "https://")):
            continue
        file, _, fragment = target.partition("#")
        path = (page.parent / file).resolve() if file else page
        assert path.exists(), f"{page.name}: link to missing {target}"
        if fragment:
            assert fragment in anchors(path), f"{page.name}: no heading #{fragment} in {path.name}"


def test_each_measured_table_names_its_command() -> None:
    """Every section of docs/measurements.md with a table or an output says how it was made."""
    text = (ROOT / "docs" / "measurements.md").read_text()
    for section in re.split(r"\n(?=##+ )", text)[1:]:
        if "\n|" in section or "\n```" in section:
            assert "\nCommand:" in section, section.splitlines()[0]
            assert "Recorded: 20" in section.replace("\n", " "), section.splitlines()[0]
