"""Acquire latency over time for both paths, as a self-contained SVG (no plotting library needed).

Each request is a dot at (its start, from its path's start; the time it spent getting memory),
on a log scale; a request that failed (rejected, gave up, out of memory) is a cross.
"""

from __future__ import annotations

import math
from html import escape

from kvstress._format import human_seconds
from kvstress.bench._report import PathReport, WorkloadReport
from kvstress.bench._result import Outcome

_WIDTH, _HEIGHT = 900, 440
_LEFT, _RIGHT, _TOP, _BOTTOM = 80, 20, 50, 50
_COLORS = {"pooled": "#1f77b4", "per-request": "#d62728"}
_FLOOR_S = 1e-7  # an acquire that took no measurable time is drawn here


def latency_svg(report: WorkloadReport) -> str:
    """The SVG document: both paths' acquire latencies against time, with axes and a legend."""
    paths = [path for path in (report.pooled, report.per_request) if path is not None]
    points = [(r.start_s, max(r.acquire_s, _FLOOR_S)) for path in paths for r in path.results]
    x_max = max((x for x, _ in points), default=1.0) or 1.0
    low = math.floor(math.log10(min((y for _, y in points), default=1e-6)))
    high = max(low + 1, math.ceil(math.log10(max((y for _, y in points), default=1e-3))))
    frame = _Frame(x_max, low, high)
    title = f"acquire latency over time: {report.setup.model} on {report.setup.device}"
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{_HEIGHT}" '
        f'viewBox="0 0 {_WIDTH} {_HEIGHT}" font-family="sans-serif" font-size="12">',
        f'<rect width="{_WIDTH}" height="{_HEIGHT}" fill="white"/>',
        f'<text x="{_WIDTH / 2}" y="24" text-anchor="middle" font-size="15">{escape(title)}</text>',
        *frame.axes(),
    ]
    for index, path in enumerate(paths):
        parts += _series(path, frame)
        parts += _legend(path, index)
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


class _Frame:
    """Maps (seconds since start, seconds of latency) to the plot area, y on a log10 scale."""

    def __init__(self, x_max: float, low: int, high: int) -> None:
        self.x_max, self.low, self.high = x_max, low, high
        self.width = _WIDTH - _LEFT - _RIGHT
        self.height = _HEIGHT - _TOP - _BOTTOM

    def x(self, seconds: float) -> float:
        return _LEFT + self.width * seconds / self.x_max

    def y(self, seconds: float) -> float:
        share = (math.log10(seconds) - self.low) / (self.high - self.low)
        return _TOP + self.height * (1 - share)

    def axes(self) -> list[str]:
        bottom, right = _TOP + self.height, _LEFT + self.width
        box = f'x="{_LEFT}" y="{_TOP}" width="{self.width}" height="{self.height}"'
        lines = [f'<rect {box} fill="none" stroke="#444"/>']
        for decade in range(self.low, self.high + 1):
            y, label = self.y(10.0**decade), human_seconds(10.0**decade)
            lines.append(f'<line x1="{_LEFT}" y1="{y:.1f}" x2="{right}" y2="{y:.1f}" stroke="#ddd"/>')
            lines.append(f'<text x="{_LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{label}</text>')
        for step in range(6):
            seconds = self.x_max * step / 5
            x = self.x(seconds)
            lines.append(f'<text x="{x:.1f}" y="{bottom + 18}" text-anchor="middle">{seconds:.2f} s</text>')
        lines.append(
            f'<text x="{_LEFT + self.width / 2}" y="{_HEIGHT - 10}" text-anchor="middle">'
            "request start, seconds since its path started</text>"
        )
        lines.append(
            f'<text x="18" y="{_TOP + self.height / 2}" text-anchor="middle" '
            f'transform="rotate(-90 18 {_TOP + self.height / 2})">time to get memory (log)</text>'
        )
        return lines


def _series(path: PathReport, frame: _Frame) -> list[str]:
    color = _COLORS.get(path.name, "#333")
    marks = []
    for result in path.results:
        x, y = frame.x(result.start_s), frame.y(max(result.acquire_s, _FLOOR_S))
        if result.outcome is Outcome.COMPLETED:
            marks.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2" fill="{color}" fill-opacity="0.6"/>')
        else:
            marks.append(
                f'<path d="M{x - 3:.1f},{y - 3:.1f}l6,6m0,-6l-6,6" stroke="{color}" stroke-width="1.2"/>'
            )
    return [f'<g class="{escape(path.name)}">', *marks, "</g>"]


def _legend(path: PathReport, index: int) -> list[str]:
    color = _COLORS.get(path.name, "#333")
    x, y = _LEFT + 10 + index * 260, _TOP - 12
    failed = len(path.results) - len(path.completed)
    label = f"{path.name}: {len(path.completed)} done, {failed} failed (x)"
    return [
        f'<circle cx="{x}" cy="{y - 4}" r="4" fill="{color}"/>',
        f'<text x="{x + 8}" y="{y}">{escape(label)}</text>',
    ]
