"""Experiment 3: contiguous first fit against paged blocks, seeded, side by side."""

from __future__ import annotations

import dataclasses
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from kvstress.bench._fragmentation import (
    FragmentationConfig,
    _Arena,
    draw_stream,
    fragmentation_table,
    run_fragmentation,
)
from kvstress.cli._main import main

SMALL = FragmentationConfig(requests=400, memory_tokens=16384, max_tokens=1024, median_tokens=64, seed=3)


def test_first_fit_takes_the_first_hole_that_fits() -> None:
    """The arena hands out the lowest hole long enough, and freeing reopens it."""
    arena = _Arena(10)
    assert [arena.allocate(3), arena.allocate(3), arena.allocate(3)] == [0, 3, 6]
    arena.free(3)
    assert arena.largest_hole() == 3
    assert arena.allocate(4) == -1  # 4 free tokens in all (3 + 1), but no run of 4: external
    assert arena.allocate(2) == 3 and arena.allocate(1) == 5 and arena.allocate(1) == 9
    assert arena.largest_hole() == 0


def test_the_same_seed_gives_the_same_numbers() -> None:
    """Two runs of one config are equal to the last field; another seed differs."""
    assert run_fragmentation(SMALL) == run_fragmentation(SMALL)
    assert fragmentation_table(run_fragmentation(SMALL)) == fragmentation_table(run_fragmentation(SMALL))
    other = run_fragmentation(dataclasses.replace(SMALL, seed=4))
    assert other.paged != run_fragmentation(SMALL).paged


def test_the_stream_is_heavy_tailed_and_capped() -> None:
    """Lengths stay in 1..max_tokens, and the P99 is several times the median."""
    lengths = sorted(r.tokens for r in draw_stream(SMALL))
    assert lengths[0] >= 1 and lengths[-1] <= SMALL.max_tokens
    assert lengths[int(0.99 * len(lengths))] > 4 * lengths[len(lengths) // 2]


@pytest.mark.parametrize("reserve", ["max", "final"])
def test_every_request_is_admitted_or_rejected_once(reserve: str) -> None:
    """On both sides, admitted + rejected is the whole stream, and memory ends empty."""
    result = run_fragmentation(dataclasses.replace(SMALL, reserve=reserve))
    for side in (result.contiguous, result.paged):
        assert side.admitted + side.rejected == SMALL.requests
        assert side.series[-1][1:] == (0, 0)
        assert all(0 <= stored <= reserved <= SMALL.memory_tokens for _, stored, reserved in side.series)


def test_paged_wastes_only_the_last_block_and_never_fragments_externally() -> None:
    """Paged: no external fragmentation, never blocked by it, waste under a block per request."""
    result = run_fragmentation(SMALL)
    paged = result.paged
    assert paged.external_fragmentation == 0.0 and paged.blocked_by_fragmentation == 0
    assert paged.internal_fragmentation < 0.15


def test_max_reservation_admits_far_fewer_than_paged() -> None:
    """Reserving max_tokens contiguously wastes most of the memory: fewer admitted, lower peak."""
    result = run_fragmentation(SMALL)
    contiguous, paged = result.contiguous, result.paged
    assert contiguous.internal_fragmentation > 0.5 > paged.internal_fragmentation
    assert contiguous.admitted < paged.admitted
    assert contiguous.peak_concurrency <= SMALL.memory_tokens // SMALL.max_tokens < paged.peak_concurrency


def test_final_length_reservation_shows_external_fragmentation() -> None:
    """With exact lengths, contiguous has no internal waste, but holes block requests that would fit."""
    contiguous = run_fragmentation(dataclasses.replace(SMALL, reserve="final")).contiguous
    assert contiguous.internal_fragmentation == 0.0
    assert contiguous.external_fragmentation > 0.1 and contiguous.blocked_by_fragmentation > 0


@pytest.mark.parametrize(
    ("field", "value"),
    [("requests", 0), ("block_tokens", 0), ("sigma", -1.0), ("reserve", "some"), ("median_tokens", 99999)],
)
def test_bad_config_names_the_field(field: str, value: Any) -> None:
    """A bad value raises ValueError that names the field and the value."""
    with pytest.raises(ValueError, match=field) as info:
        FragmentationConfig(**{field: value})
    assert repr(value) in str(info.value)


def test_cli_prints_the_table_and_writes_an_svg(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """kvstress bench fragmentation prints both sides; --plot writes a well-formed SVG."""
    plot = tmp_path / "f.svg"
    assert main(["bench", "fragmentation", "--requests", "300", "--seed", "2", "--plot", str(plot)]) == 0
    out = capsys.readouterr().out
    assert "contiguous" in out and "paged" in out and "external fragmentation" in out
    assert ET.fromstring(plot.read_text()).tag.endswith("svg")
    assert main(["bench", "fragmentation", "--requests", "300", "--seed", "2"]) == 0
    assert capsys.readouterr().out == out.replace(f"wrote {plot}\n", "")


@pytest.mark.parametrize(
    "args",
    [
        ["--block-tokens", "0"],
        ["--median-tokens", "5000"],
        ["--reserve", "half"],
        ["--requests", "x"],
        ["--plot", "out.png"],
        ["--plot", "/no/such/folder/f.svg"],
    ],
)
def test_bad_input_exits_2_with_one_error_line(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """Bad input: exit 2 and one ``kvstress: error:`` line on stderr, nothing run."""
    assert main(["bench", "fragmentation", *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("kvstress: error: ") and captured.err.count("\n") == 1
