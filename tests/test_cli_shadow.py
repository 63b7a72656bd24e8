"""`kvstress shadow`: exit 0 clean with a summary, 1 divergence with block and replay, 2 bad input."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from kvstress.cli import _main, _shadow

RESET = "kvstress.mutants:ResetAfterOfferPool"


@pytest.fixture
def main() -> object:
    """kvstress's real ``main`` (shadow is one of its commands)."""
    assert _main.command_module("shadow") is _shadow
    return _main.main


def run(main: object, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run ``kvstress shadow ARGV``; return the status, stdout and stderr."""
    status = main(["shadow", *argv])  # type: ignore[operator]
    out, err = capsys.readouterr()
    return status, out, err


def test_a_correct_pool_exits_0_with_a_summary(main: object, capsys: pytest.CaptureFixture[str]) -> None:
    """A clean run prints one paragraph: steps compared, the largest diff, the tolerance."""
    status, out, err = run(main, capsys, "--pool", "kvstress.mutants:CondvarPool", "--seeds", "2")
    assert status == 0, err
    assert out.startswith("no divergence: ") and "steps compared over 2 seeds" in out
    assert "max |paged - reference| logit diff" in out and "(tolerance 0.001)" in out
    assert len(out.strip().splitlines()) == 1


def test_a_divergence_exits_1_names_the_block_and_its_replay_reproduces_it(
    main: object, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Exit 1 prints the step, the block and a replay command that reproduces the same lines."""
    report = tmp_path / "shadow.json"
    status, out, _ = run(main, capsys, "--pool", RESET, "--seed", "0", "--seeds", "3", "--json", str(report))
    assert status == 1
    lines = out.splitlines()
    assert lines[0].startswith("divergence: sequence s") and "> 0.001" in lines[0]
    assert lines[1].startswith("block: ") and "read back differs from what was written" in lines[1]
    replay = lines[-1].removeprefix("replay: ")
    words = shlex.split(replay)
    assert words[:2] == ["kvstress", "shadow"] and "--seed" in words and words[-2:] == ["--seeds", "1"]
    data = json.loads(report.read_text())
    assert data["schema"] == "kvstress.shadow/1" and data["replay"] == replay
    again, out_again, _ = run(main, capsys, *words[2:])
    assert again == 1 and out_again.splitlines()[:2] == lines[:2]


def test_a_pool_failure_exits_1_with_its_invariant(main: object, capsys: pytest.CaptureFixture[str]) -> None:
    """A pool that raises is reported as a pool failure, with the seed to replay."""
    status, out, _ = run(main, capsys, "--pool", "kvstress.mutants:CheckThenPollPool", "--seeds", "3")
    assert status == 1 and out.startswith("pool failure: [crash] ") and "replay: kvstress shadow" in out


def test_a_lost_block_exits_1_and_its_replay_reproduces_it(
    main: object, capsys: pytest.CaptureFixture[str]
) -> None:
    """RetainLostUpdatePool leaks a shared block: exit 1, ``[lost-block]``, and the replay says the same."""
    pool = "kvstress.mutants:RetainLostUpdatePool"
    status, out, _ = run(main, capsys, "--pool", pool, "--seed", "0", "--seeds", "1")
    assert status == 1 and out.startswith("pool failure: [lost-block] after every sequence released")
    replay = out.splitlines()[-1].removeprefix("replay: ")
    again, out_again, _ = run(main, capsys, *shlex.split(replay)[2:])
    assert again == 1 and out_again == out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--pool", "kvstress:AsyncBlockPool"], "is an async pool; shadow mode drives thread-flavoured"),
        (["--pool", "no_such_module_xyz:Pool"], "cannot import 'no_such_module_xyz'"),
        (["--pool", "not a spec"], "the pool must be named MODULE:ATTR"),
        (["--pool", RESET, "--blocks", "3"], "--blocks must be >= 4"),
        (["--pool", RESET, "--model", "no-such-model"], "--model: "),
        # a real card's geometry: 25 GiB of random weights (it ran a machine out of memory)
        (["--pool", RESET, "--model", "llama-2-7b"], "GiB of float32 weights for the shadow decoder"),
        (["--pool", RESET, "--budget", "0"], "--budget must be > 0 seconds"),
        (["--pool", RESET, "--steps", "0"], "--steps must be >= 1"),
        (["--pool", RESET, "--json", "/no/such/folder/out.json"], "--json: the folder of"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    main: object, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    """Bad input: exit 2 and one ``kvstress: error:`` line, no traceback."""
    status, out, err = run(main, capsys, *argv)
    assert status == 2 and out == ""
    assert err.startswith("kvstress: error: ") and message in err and len(err.strip().splitlines()) == 1


def test_shadow_subcommand_runs_as_a_process() -> None:
    """`python -m kvstress shadow` is registered: a planted dirty block exits 1 with its replay."""
    done = subprocess.run(
        [sys.executable, "-m", "kvstress", "shadow", "--pool", RESET, "--seeds", "2"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    assert "divergence: sequence" in done.stdout and "replay: kvstress shadow" in done.stdout
