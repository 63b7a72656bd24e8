"""The command line: `kvstress plan`, its output, and how bad input and interrupts exit."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import kvstress
from kvstress.capacity import list_cards
from kvstress.cli import main

ROOT = Path(__file__).resolve().parents[1]
LLAMA2 = ["plan", "--model", "llama-2-7b", "--concurrency", "64", "--seq-len", "2048"]


@pytest.fixture(autouse=True)
def _no_user_cards(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KVSTRESS_MODELS", raising=False)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    """Run `python -m kvstress ARGS` on this checkout, as a user would."""
    env = {key: value for key, value in os.environ.items() if key != "KVSTRESS_MODELS"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "kvstress", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        (["plan", "--concurrency", "4", "--seq-len", "8"], "--model"),
        (["plan", "--model", "tiny"], "--concurrency, --seq-len"),
        (["plan", "--model", "nope", "--concurrency", "4", "--seq-len", "8"], "'nope'"),
        (["plan", "--model", "tiny", "--concurrency", "0", "--seq-len", "8"], "concurrency"),
        (["plan", "--model", "tiny", "--concurrency", "4", "--seq-len", "-8"], "seq_len"),
        (["plan", "--model", "tiny", "--concurrency", "x", "--seq-len", "8"], "--concurrency"),
        (["plan", "--model", "tiny", "--concurrency", "4", "--seq-len", "8", "--frag", "-0.1"], "frag"),
        (
            ["plan", "--model", "tiny", "--concurrency", "4", "--seq-len", "8", "--device-memory", "0"],
            "device",
        ),
        (["plan", "--model", "tiny", "--concurrency", "4", "--seq-len", "8", "--bogus"], "--bogus"),
    ],
)
def test_bad_input_exits_2_with_one_error_line(
    args: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Bad input exits 2 with exactly one `kvstress: error:` line naming the problem, no traceback.
    (In this process: each case as a process of its own cost seconds of imports; the script
    itself is the next test's.)"""
    assert main(args) == 2
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("kvstress: error: ")
    assert says in lines[0]
    assert "Traceback" not in err
    assert out == ""


def test_the_script_exits_2_with_one_error_line() -> None:
    """`python -m kvstress` on bad input: exit 2, one line, no traceback, nothing on stdout."""
    done = _cli("plan", "--model", "nope", "--concurrency", "4", "--seq-len", "8")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [done.stderr.strip()] and "'nope'" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_json_output_is_one_object_with_the_plan() -> None:
    """`plan --json` prints only a JSON object with the known Llama-2 answer."""
    done = _cli(*LLAMA2, "--json")
    assert (done.returncode, done.stderr) == (0, "")
    data = json.loads(done.stdout)
    assert data["bytes_per_token"] == 524288
    assert data["block_bytes"] == 8388608
    assert (data["n_min"], data["n_pool"]) == (8192, 12288)
    assert data["pool_bytes"] == 96 << 30
    assert (data["model"], data["concurrency"], data["seq_len"]) == ("llama-2-7b", 64, 2048)
    assert (data["block_tokens"], data["frag"], data["burst"]) == (16, 0.2, 0.25)


def test_no_command_prints_help_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    """`kvstress` alone prints the help, listing plan, and exits 2."""
    assert main([]) == 2
    out = capsys.readouterr().out
    assert out.startswith("usage: kvstress")
    assert "plan" in out


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    """`kvstress plan --help` prints the plan options and exits 0."""
    assert main(["plan", "--help"]) == 0
    assert "--device-memory" in capsys.readouterr().out


def test_version_prints_the_version(capsys: pytest.CaptureFixture[str]) -> None:
    """`kvstress --version` prints `kvstress <version>` and exits 0."""
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"kvstress {kvstress.__version__}"


def test_a_length_past_the_cards_context_is_planned_with_a_warning(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The arithmetic is still printed, and stderr says the model cannot attend that far."""
    assert main(["plan", "--model", "llama-2-7b", "--concurrency", "4", "--seq-len", "100000"]) == 0
    captured = capsys.readouterr()
    assert "N_pool" in captured.out
    assert captured.err.strip() == (
        "kvstress: warning: --seq-len 100,000 is past llama-2-7b's context of 4,096 tokens"
    )
    assert main(LLAMA2) == 0 and capsys.readouterr().err == ""


def test_human_output_is_a_table_of_the_plan(capsys: pytest.CaptureFixture[str]) -> None:
    """The human output shows block size in MiB, N_min, N_pool, the split and the pool in GiB."""
    assert main(LLAMA2) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert "8.0 MiB" in out
    assert "8,192 blocks" in out
    assert "12,288 blocks" in out
    assert "9,831 / 2,457 blocks" in out
    assert "96.00 GiB" in out
    assert not any(line.startswith("fits") for line in lines)
    # Labels hold single spaces only, so the first double space ends the label column.
    value_columns = {len(line) - len(line.split("  ", 1)[1].lstrip()) for line in lines}
    assert len(value_columns) == 1


def test_device_memory_adds_the_fit(capsys: pytest.CaptureFixture[str]) -> None:
    """With --device-memory 80 the table says the pool does not fit and 53 requests would."""
    assert main([*LLAMA2, "--device-memory", "80"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("fits") and line.split()[1] == "no" for line in lines)
    assert any(line.startswith("max concurrency") and "53" in line for line in lines)


def test_list_shows_every_model_with_its_geometry(capsys: pytest.CaptureFixture[str]) -> None:
    """`plan --list` prints a header and one row per card, with its KV heads and dtype."""
    assert main(["plan", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == [
        "model",
        "layers",
        "heads",
        "kv_heads",
        "head_dim",
        "dtype",
        "max_context",
        "bytes/token",
    ]
    assert [line.split()[0] for line in lines[1:]] == list_cards()
    llama3 = next(line.split() for line in lines if line.startswith("llama-3-8b"))
    assert llama3[1:6] == ["32", "32", "8", "128", "bfloat16"]


def test_list_json_is_a_list_of_cards(capsys: pytest.CaptureFixture[str]) -> None:
    """`plan --list --json` prints the cards as JSON objects with bytes_per_token."""
    assert main(["plan", "--list", "--json"]) == 0
    cards = json.loads(capsys.readouterr().out)
    assert [card["name"] for card in cards] == list_cards()
    assert {card["name"]: card["bytes_per_token"] for card in cards}["llama-3-8b"] == 131072


def test_malformed_user_card_is_one_error_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A broken card in KVSTRESS_MODELS exits 2 with one line naming the file and the field."""
    (tmp_path / "bad.toml").write_text('name = "bad"\nlayers = 0\n')
    monkeypatch.setenv("KVSTRESS_MODELS", str(tmp_path))
    assert main(["plan", "--model", "bad", "--concurrency", "1", "--seq-len", "1"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1
    assert "bad.toml" in err[0] and "missing field" in err[0]


def test_interrupt_exits_130_with_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A KeyboardInterrupt during a command exits 130 with one `kvstress: interrupted` line."""

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("kvstress.cli._plan.plan", interrupted)
    assert main(LLAMA2) == 130
    assert capsys.readouterr().err == "kvstress: interrupted\n"


def test_multi_line_error_is_printed_on_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A ValueError whose message spans lines still gives exactly one stderr line."""

    def refuses(*args: object, **kwargs: object) -> None:
        raise ValueError("first\nsecond")

    monkeypatch.setattr("kvstress.cli._plan.plan", refuses)
    assert main(LLAMA2) == 2
    assert capsys.readouterr().err == "kvstress: error: first second\n"


def test_a_lingering_thread_does_not_change_the_exit_status() -> None:
    """A thread the run abandoned (a stuck pool, torch mid-call at Ctrl-C) must not turn the exit
    into an abort at interpreter shutdown: the script flushes, then leaves with main()'s status."""
    script = (
        "import sys, threading, torch\n"
        "from kvstress.cli import entry\n"
        "def churn():\n"
        "    block = torch.zeros(1 << 16)\n"
        "    while True:\n"
        "        block.add_(1)\n"
        "threading.Thread(target=churn, daemon=True).start()\n"
        f"sys.argv = ['kvstress', *{LLAMA2!r}]\n"
        "entry()\n"
    )
    env = {key: value for key, value in os.environ.items() if key != "KVSTRESS_MODELS"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "llama-2-7b" in done.stdout  # a pipe is block-buffered: this is the flush
    assert done.stderr == ""


def test_each_command_is_listed_with_its_own_help() -> None:
    """The top level names every command with the help its module gives it, without importing
    the modules of commands that do not run (several import torch: ``kvstress --help`` and
    ``kvstress report`` took seconds)."""
    from kvstress.cli import _main

    def helps(parser: argparse.ArgumentParser) -> dict[str, str | None]:
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        return {choice.dest: choice.help for choice in action._choices_actions}

    assert helps(_main.build_parser(None)) == helps(_main.build_parser("*"))
    assert list(helps(_main.build_parser(None))) == list(_main._COMMANDS)


def test_the_help_and_a_report_load_no_other_command() -> None:
    """``kvstress --help`` imports no command's module; ``kvstress report`` only its own (and no
    torch), in a fresh interpreter."""
    code = (
        "import sys\n"
        "from kvstress.cli._main import _COMMANDS, main\n"
        "main(sys.argv[1:])\n"
        "modules = {module for module, _ in _COMMANDS.values()} | {'torch'}\n"
        "print(sorted(m for m in sys.modules if m in modules))\n"
    )
    for argv, loaded in ((["--help"], []), (["report", "--help"], ["kvstress.cli._report"])):
        out = subprocess.run(
            [sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=60, check=False
        ).stdout
        assert out.strip().splitlines()[-1] == repr(loaded), out
