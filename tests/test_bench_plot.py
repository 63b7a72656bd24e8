"""The SVG plot: a well-formed document with one mark per request, crosses for failures, both paths."""

from __future__ import annotations

import dataclasses
import xml.etree.ElementTree as ET

import pytest

from kvstress.bench import LoadSpec, Outcome, WorkloadConfig, WorkloadReport, latency_svg, run_workload
from kvstress.capacity import load_card

SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def report() -> WorkloadReport:
    load = LoadSpec(requests=8, concurrency=2, max_tokens=64, hold_ms=1)
    return run_workload(WorkloadConfig(load_card("tiny"), load, device="cpu"))


def test_the_plot_is_well_formed_svg_with_a_group_per_path(report: WorkloadReport) -> None:
    """The document parses as SVG and has one group of marks per path, one mark per request."""
    root = ET.fromstring(latency_svg(report))
    assert root.tag == f"{SVG}svg"
    groups = {group.get("class"): group for group in root.iter(f"{SVG}g")}
    assert set(groups) == {"pooled", "per-request"}
    for group in groups.values():
        assert len(list(group)) == 8


def test_failed_requests_are_crosses(report: WorkloadReport) -> None:
    """A request that did not complete is drawn as a cross (a path), not a dot."""
    assert report.pooled is not None
    failed = dataclasses.replace(report.pooled.results[0], outcome=Outcome.OOM)
    pooled = dataclasses.replace(report.pooled, results=(failed, *report.pooled.results[1:]))
    root = ET.fromstring(latency_svg(dataclasses.replace(report, pooled=pooled)))
    group = next(g for g in root.iter(f"{SVG}g") if g.get("class") == "pooled")
    assert [mark.tag for mark in group].count(f"{SVG}path") == 1
