"""Memory over time for both sides of the fragmentation run, as a self-contained SVG (no library)."""

from __future__ import annotations

from collections.abc import Callable
from html import escape

from kvstress.bench._fragmentation import FragmentationResult, SideResult

_WIDTH, _HEIGHT = 900, 440
_LEFT, _RIGHT, _TOP, _BOTTOM = 80, 20, 50, 50
_COLORS = {"contiguous": "#d62728", "paged": "#1f77b4"}
_MAX_POINTS = 600  # per line: enough for the eye, small enough to open anywhere


def fragmentation_svg(result: FragmentationResult) -> str:
    """Tokens stored (solid) and memory reserved (dashed) over time, contiguous and paged."""
    sides = (result.contiguous, result.paged)
    budget = result.config.memory_tokens
    x_max = max(s.finished_at for s in sides) or 1.0
    width, height = _WIDTH - _LEFT - _RIGHT, _HEIGHT - _TOP - _BOTTOM

    def point(t: float, tokens: int) -> str:
        return f"{_LEFT + width * t / x_max:.1f},{_TOP + height * (1 - tokens / budget):.1f}"

    title = (
        f"memory over time: {result.config.requests} requests, contiguous ({result.config.reserve}) vs paged"
    )
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_WIDTH}" height="{_HEIGHT}" '
        f'viewBox="0 0 {_WIDTH} {_HEIGHT}" font-family="sans-serif" font-size="12">',
        f'<rect width="{_WIDTH}" height="{_HEIGHT}" fill="white"/>',
        f'<text x="{_WIDTH / 2}" y="24" text-anchor="middle" font-size="15">{escape(title)}</text>',
        f'<rect x="{_LEFT}" y="{_TOP}" width="{width}" height="{height}" fill="none" stroke="#444"/>',
    ]
    for step in range(5):
        share = step / 4
        y = _TOP + height * (1 - share)
        parts.append(f'<text x="{_LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{share:.0%}</text>')
        x = _LEFT + width * share
        parts.append(
            f'<text x="{x:.1f}" y="{_TOP + height + 18}" text-anchor="middle">{x_max * share:,.0f}</text>'
        )
    parts.append(
        f'<text x="{_LEFT + width / 2}" y="{_HEIGHT - 10}" text-anchor="middle">ticks; '
        "solid: tokens stored, dashed: memory reserved (share of the budget)</text>"
    )
    for index, side in enumerate(sides):
        parts += _lines(side, point, index)
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _lines(side: SideResult, point: Callable[[float, int], str], index: int) -> list[str]:
    series = side.series[:: max(1, len(side.series) // _MAX_POINTS)] + side.series[-1:]
    color = _COLORS[side.name]
    stored = " ".join(point(t, s) for t, s, _ in series)
    reserved = " ".join(point(t, r) for t, _, r in series)
    y = _TOP + 16 + 16 * index
    return [
        f'<polyline fill="none" stroke="{color}" stroke-width="1.2" points="{stored}"/>',
        f'<polyline fill="none" stroke="{color}" stroke-dasharray="4 3" points="{reserved}"/>',
        f'<text x="{_WIDTH - _RIGHT - 10}" y="{y}" text-anchor="end" fill="{color}">'
        f"{escape(side.name)}: utilisation {side.utilisation:.1%}</text>",
    ]
