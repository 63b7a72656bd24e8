"""The HTML failure page: well formed, self-contained, a lane per worker, a bar per operation, escaped."""

from __future__ import annotations

import copy
import itertools
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from kvstress.reports._html import render_html

HOSTILE = "<script>alert(1)</script>"
QUOTES = '"><img src=x onerror=alert(2)>'
_VOID = {"meta", "br", "hr", "img", "input", "link", "source", "wbr"}


@dataclass
class Node:
    """One parsed element: its tag, attributes, children and the text directly inside it."""

    tag: str
    attrs: dict[str, str]
    children: list[Node] = field(default_factory=list)
    text: str = ""

    def walk(self) -> Iterator[Node]:
        """This node and every node below it, in document order."""
        yield self
        for child in self.children:
            yield from child.walk()

    def find(self, tag: str, cls: str | None = None) -> list[Node]:
        """Every node below (or at) this one with ``tag`` and, if given, class ``cls``."""
        return [n for n in self.walk() if n.tag == tag and (cls is None or cls in n.classes)]

    @property
    def classes(self) -> list[str]:
        """The ``class`` attribute, split."""
        return self.attrs.get("class", "").split()

    def all_text(self) -> str:
        """The text of this node and everything below it."""
        return self.text + "".join(child.all_text() for child in self.children)


class Collector(HTMLParser):
    """Builds a tree of ``Node`` and records any end tag that does not close the open element."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {})
        self.stack = [self.root]
        self.errors: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {name: value or "" for name, value in attrs})
        self.stack[-1].children.append(node)
        if tag not in _VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack[-1].children.append(Node(tag, {name: value or "" for name, value in attrs}))

    def handle_endtag(self, tag: str) -> None:
        if self.stack[-1].tag != tag:
            self.errors.append(f"</{tag}> closes <{self.stack[-1].tag}>")
            return
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.stack[-1].text += data


def parse(page: str) -> Node:
    """The page's tree; fails the test if it is not well nested or leaves an element open."""
    collector = Collector()
    collector.feed(page)
    collector.close()
    assert collector.errors == []
    assert [node.tag for node in collector.stack] == ["#document"]
    return collector.root


def op(
    index: int, worker: str, name: str, start: float, end: float | None, outcome: str, **kw: Any
) -> dict[str, Any]:
    """One history entry as the JSON report holds it."""
    return {
        "index": index,
        "worker": worker,
        "name": name,
        "args": kw.get("args", {}),
        "start": start,
        "end": end,
        "outcome": outcome,
        "result": kw.get("result"),
        "observed": kw.get("observed", {}),
    }


def make_report() -> dict[str, Any]:
    """A dirty-read report from a virtual-time run: equal and denormal-close times, every outcome."""
    history = [
        op(0, "harness", "reset", 0.0, 0.0, "ok"),
        op(1, "w0", "acquire", 0.0, 1e-320, "ok", args={"n": 2}, result=[3, 4]),
        op(2, "w1", "acquire", 0.0, 2e-320, "info", args={"n": 1, "timeout": 0.5}),
        op(3, "w2", "release", 1e-320, 2e-320, "raised", args={"block": 3}, result="DoubleRelease: block 3"),
        op(4, "w0", "read", 2e-320, 3e-320, "ok", args={"block": 4}, result="nonzero", observed={"sum": 7.0}),
        op(5, "w1", "acquire", 3e-320, None, "pending", args={"n": 1}),
    ]
    blocks = [
        {"id": 3, "state": "FREE", "refcount": 0, "holders": [], "in_free_queue": True},
        {"id": 4, "state": "HELD", "refcount": 1, "holders": ["w0"], "in_free_queue": False},
        {"id": 5, "state": "unseen", "refcount": None, "holders": [], "in_free_queue": None},
    ]
    return {
        "schema": "kvstress.failure/1",
        "invariant": "dirty-read",
        "message": "block 4 was handed to w0 with non-zero data (sum 7.0)",
        "pool": "kvstress.pool:BlockPool",
        "mode": "async",
        "backend": "trio",
        "strategy": "pct",
        "seed": 1234,
        "schedule": "ks1:pct:1234:0.1.2.0.1",
        "elapsed_s": 0.0123,
        "history": history,
        "failed_op": 4,
        "blocks": blocks,
        "metrics": {"steps": 17, "preemptions": 2, "per_worker": {"w0": 3}},
        "versions": {"kvstress": "0.1.0", "python": "3.11.7", "torch": "2.13.0", "device": "cpu"},
        "replay": "kvstress replay --pool kvstress.pool:BlockPool 'ks1:pct:1234:0.1.2.0.1'",
        "program": "state = PoolMachine()\nstate.acquire(n=2)\nstate.read(block=4)\nstate.teardown()",
        "table": "| w0            | w1           |\n| acquire(2) -> [3, 4] |  |  <- failed here"
        "\nswitch points (where each worker was paused when another ran):\n  1. b2 in ...",
        "switches": [
            {
                "worker": "b2",
                "to": "b1",
                "operation": "release(1)",
                "op_index": 3,
                "file": "mypools.py",
                "line": 57,
                "source": "self._free.append(blk)",
            }
        ],
        "switches_note": None,
        "blocks_at": "as the check failed (w0: read(block=4)), the other workers paused",
        "scenario": [
            [["acquire", 0.01], ["share", 1], ["release", None]],
            [["acquire", 0.2], ["cancel", 0], ["sleep", None]],
        ],
        "reproduction": {"reproduced": 3, "replays": 4},
        "config": {"blocks": 8, "workers": 3},
        "created": "2025-01-01T00:00:00+00:00",
    }


@pytest.fixture(scope="module")
def page() -> str:
    """The rendered page of the realistic report."""
    return render_html(make_report())


@pytest.fixture(scope="module")
def tree(page: str) -> Node:
    """The parsed page."""
    return parse(page)


def bars(tree: Node) -> dict[int, Node]:
    """Each operation's bar, by operation index."""
    return {int(group.attrs["data-index"]): group.find("div", "bar")[0] for group in tree.find("div", "op")}


def rows(tree: Node) -> dict[int, tuple[int, int]]:
    """Each operation's grid rows (first, and the one after its last), by operation index."""
    return {
        int(g.attrs["data-index"]): (int(g.attrs["data-row"]), int(g.attrs["data-row-end"]))
        for g in tree.find("div", "op")
    }


def test_the_title_and_heading_name_the_invariant(tree: Node) -> None:
    """The <title>, the <h1> and the message paragraph carry the invariant id and the message."""
    assert "dirty-read" in tree.find("title")[0].all_text()
    assert "dirty-read" in tree.find("h1")[0].all_text()
    assert "non-zero data" in tree.find("p", "message")[0].all_text()


def test_the_summary_shows_run_facts(tree: Node) -> None:
    """The summary lists pool, mode with backend, strategy, seed, versions and the reproduction rate."""
    summary = tree.find("table", "kv")[0].all_text()
    for fact in (
        "kvstress.pool:BlockPool",
        "async (trio)",
        "pct",
        "1234",
        "torch 2.13.0",
        "3/4 replays (75%)",
    ):
        assert fact in summary


def test_the_timeline_has_one_lane_per_worker_harness_last(tree: Node) -> None:
    """One timeline grid (no picture); its lane headers are the workers in order, harness last."""
    assert tree.find("svg") == []
    (timeline,) = tree.find("div", "timeline")
    labels = [label.text for label in timeline.find("div", "lane-label")]
    assert labels == ["w0", "w1", "w2", "harness"]


def test_each_operation_is_one_bar_with_its_whole_label(tree: Node) -> None:
    """There is one bar per operation, coloured by outcome class, its label whole (nothing cut)."""
    groups = tree.find("div", "op")
    assert len(tree.find("div", "bar")) == len(groups) == 6
    outcomes = {int(g.attrs["data-index"]): [c for c in g.classes if c.startswith("op-")] for g in groups}
    assert outcomes[2] == ["op-info"] and outcomes[3] == ["op-raised"] and outcomes[5] == ["op-pending"]
    assert bars(tree)[3].all_text() == "release(block=3) raised DoubleRelease: block 3"


def test_the_failing_operation_is_marked(tree: Node) -> None:
    """Only the failed_op's bar has class failed and data-failed, with a red marker inside it."""
    marked = [index for index, bar in bars(tree).items() if "failed" in bar.classes]
    assert marked == [4]
    assert bars(tree)[4].attrs["data-failed"] == "true"
    assert len(tree.find("span", "failed-marker")) == 1


def test_a_pending_operation_reaches_the_bottom_dashed(tree: Node) -> None:
    """The operation with no end is drawn pending (dashed) and reaches the last row of the grid."""
    pending = bars(tree)[5]
    assert "pending" in pending.classes and pending.attrs["data-pending"] == "true"
    assert rows(tree)[5][1] == max(end for _, end in rows(tree).values())
    assert not any("pending" in b.classes for i, b in bars(tree).items() if i != 5)


def test_equal_and_denormal_times_keep_their_order(tree: Node) -> None:
    """Times 1e-320 apart are laid out in event order: later starts sit lower, every bar has height."""
    first = {i: start for i, (start, _) in rows(tree).items()}
    assert first[0] < first[1] < first[2] < first[3] < first[4] < first[5]
    assert all(end > start for start, end in rows(tree).values())


def test_one_workers_operations_never_share_a_row(tree: Node) -> None:
    """In one lane, each operation begins at or after the row where the one before it ended."""
    report = make_report()
    by_worker: dict[str, list[tuple[int, int]]] = {}
    for index, span in sorted(rows(tree).items()):
        by_worker.setdefault(report["history"][index]["worker"], []).append(span)
    for spans in by_worker.values():
        assert all(later[0] >= earlier[1] for earlier, later in itertools.pairwise(spans))


def test_the_block_table_has_a_row_per_block(tree: Node) -> None:
    """The blocks table has one body row per block and shows holders and queue membership."""
    (table,) = tree.find("table", "blocks")
    rows = table.find("tbody")[0].find("tr")
    assert len(rows) == 3
    assert [cell.all_text() for cell in rows[1].find("td")][:5] == ["4", "HELD", "1", "w0", "false"]


def test_replay_schedule_program_and_table_are_shown(tree: Node) -> None:
    """The replay command and schedule, the minimal program and the interleaving table are in <pre>."""
    pres = [pre.all_text() for pre in tree.find("pre")]
    report = make_report()
    table = report["table"].split("\nswitch points")[0]  # the switch points have a section of their own
    for text in (report["replay"], report["schedule"], report["program"], table):
        assert text in pres


def test_the_scenario_is_a_program_per_worker_and_its_json_is_folded(tree: Node) -> None:
    """Each worker's program is one row of steps; the raw JSON sits in a closed <details>."""
    (table,) = tree.find("table", "scenario")
    cells = [
        [c.all_text() for c in row.find("th") + row.find("td")] for row in table.find("tbody")[0].find("tr")
    ]
    assert cells == [["b0", "acquire(0.01) share(b1) release"], ["b1", "acquire(0.2) cancel(b0) sleep"]]
    (details,) = tree.find("details")
    assert "open" not in details.attrs and '"acquire"' in details.find("pre")[0].all_text()


def test_switch_points_are_listed_with_their_source_line(tree: Node) -> None:
    """Each switch point names the worker, its operation, file:line and the line of code."""
    (points,) = tree.find("ol", "switches")
    first = points.find("li")[0]
    assert [node.all_text() for node in first.children] == [
        "b2",
        "release(1)",
        "mypools.py:57",
        "self._free.append(blk)",
    ]
    assert first.text == " in , paused at : ; b1 runs next"  # the words between them
    assert "switch points (" not in "".join(pre.all_text() for pre in tree.find("pre"))


def test_a_report_without_switch_points_says_why() -> None:
    """A stress report's note is shown instead of an empty list."""
    report = {**make_report(), "switches": None, "switches_note": "not recorded: free-running"}
    page = render_html(report)
    assert "Switch points: not recorded: free-running." in page and 'class="switches"' not in page


def test_the_block_table_says_which_moment_and_explains_unseen(tree: Node) -> None:
    """The blocks come with the moment they show, the expected columns, and what unseen means."""
    text = "".join(note.all_text() for note in tree.find("p", "note"))
    assert "as the check failed (w0: read(block=4))" in text
    assert "no acquire returned this block" in text
    (table,) = tree.find("table", "blocks")
    assert [th.all_text() for th in table.find("th")][-2:] == ["expected state", "expected refcount"]


def test_the_page_loads_nothing_external(page: str, tree: Node) -> None:
    """No script element, no src or href, no @import and no http(s) address anywhere in the page."""
    assert tree.find("script") == []
    assert not any(name in ("src", "href") for node in tree.walk() for name in node.attrs)
    for needle in ("@import", "url(http", "http://", "https://", "<link"):
        assert needle not in page


def hostile_report() -> dict[str, Any]:
    """The realistic report with attacker-written strings in a worker name, message, args, blocks."""
    report = copy.deepcopy(make_report())
    report["message"] = HOSTILE
    report["history"][1]["worker"] = HOSTILE
    report["history"][1]["args"] = {"key": HOSTILE, QUOTES: QUOTES}
    report["history"][3]["result"] = QUOTES
    report["blocks"][1]["holders"] = [HOSTILE]
    report["metrics"] = {HOSTILE: QUOTES}
    report["program"] = HOSTILE
    report["pool"] = QUOTES
    return report


def test_hostile_strings_appear_only_escaped() -> None:
    """Script tags and quote-breaking strings come back as text, never as elements or attributes."""
    page = render_html(hostile_report())
    tree = parse(page)
    assert "<script" not in page.lower() and "<img" not in page.lower()
    assert tree.find("script") == [] and tree.find("img") == []
    assert not any(name.startswith("on") for node in tree.walk() for name in node.attrs)
    assert HOSTILE in [lane.attrs["data-worker"] for lane in tree.find("div", "lane-label")]
    assert HOSTILE in tree.find("p", "message")[0].all_text()
    assert "&lt;script&gt;" in page


@pytest.mark.parametrize(
    "missing",
    [
        {"history": None, "blocks": None, "schedule": None, "program": None, "table": None},
        {"history": [], "blocks": [], "metrics": {}, "failed_op": None, "reproduction": None},
        {"versions": None, "elapsed_s": None, "backend": None, "scenario": None, "config": None},
    ],
)
def test_missing_optional_fields_still_render(missing: dict[str, Any]) -> None:
    """A report with optional fields None or empty still renders a well-formed page."""
    report = {**make_report(), **missing}
    tree = parse(render_html(report))
    assert "dirty-read" in tree.find("h1")[0].all_text()


def test_a_minimal_report_renders() -> None:
    """Only schema, invariant and message: no timeline, and the sections say nothing was recorded."""
    page = render_html({"schema": "kvstress.failure/1", "invariant": "hang", "message": "w1 hung"})
    tree = parse(page)
    assert tree.find("div", "timeline") == [] and tree.find("table", "blocks") == []
    assert "No history recorded." in page and "No blocks recorded." in page


def _browser() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.mark.skipif(_browser() is None, reason="no headless Chromium or Chrome installed")
def test_a_headless_browser_renders_a_screenshot(tmp_path: Path, page: str) -> None:
    """Headless Chromium opens the page offline and writes a non-empty PNG screenshot."""
    browser = _browser()
    assert browser is not None
    (tmp_path / "report.html").write_text(page, encoding="utf-8")
    shot = tmp_path / "report.png"
    command = [browser, "--headless", "--no-sandbox", "--disable-gpu", f"--screenshot={shot}"]
    subprocess.run(
        [*command, "--window-size=1400,1000", (tmp_path / "report.html").as_uri()], timeout=60, check=True
    )
    assert shot.exists() and shot.stat().st_size > 0


def wide_report() -> dict[str, Any]:
    """A long failing run: five workers, 80 operations with long labels, the failing one last."""
    history = []
    for index in range(80):
        worker = f"worker-with-a-long-name-{index % 5}"
        args = {"timeout": 0.05, "note": "x" * (index % 40)}
        history.append(
            op(index, worker, "acquire", index * 1.0, index + 0.5, "info", args=args, result="cancelled")
        )
    return {**make_report(), "history": history, "failed_op": 79}


@pytest.mark.skipif(_browser() is None, reason="no headless Chromium or Chrome installed")
def test_the_failing_label_is_whole_inside_a_1400_px_window(tmp_path: Path) -> None:
    """In Chromium at 1,400 px, the page does not scroll sideways and the failing label is wholly visible."""
    browser = _browser()
    assert browser is not None
    # The page itself has no script; this copy gets one that writes its measurements into the DOM.
    probe = (
        "<script>const bar=document.querySelector('.bar.failed');const r=bar.getBoundingClientRect();"
        "document.body.setAttribute('data-probe',JSON.stringify({left:r.left,right:r.right,"
        "clipped:bar.scrollWidth>bar.clientWidth,page:document.documentElement.scrollWidth,"
        "view:window.innerWidth}));</script>"
    )
    page = render_html(wide_report()).replace("</body>", probe + "</body>")
    (tmp_path / "wide.html").write_text(page, encoding="utf-8")
    command = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--window-size=1400,1000",
        "--dump-dom",
    ]
    dom = subprocess.run(
        [*command, (tmp_path / "wide.html").as_uri()], timeout=60, check=True, capture_output=True, text=True
    ).stdout
    found = parse_probe(dom)
    assert found["view"] == 1400
    assert found["page"] <= found["view"]
    assert 0 <= found["left"] < found["right"] <= found["view"] and not found["clipped"]


def parse_probe(dom: str) -> dict[str, Any]:
    """The measurements the probe script left in ``<body data-probe=...>``."""
    import json

    body = parse(dom).find("body")[0]
    return dict(json.loads(body.attrs["data-probe"]))


def test_a_free_running_findings_replay_line_says_it_measures_a_rate() -> None:
    """The console printed a stress finding's replay as it prints an exact one, and the replay
    then said "not reproduced (0/10 tries)" (a blind user)."""
    from kvstress.reports import replay_line

    exact = {"replay": "kvstress replay r.json", "reproduction": None}
    assert replay_line(exact) == "replay: kvstress replay r.json"
    rate = {"replay": "kvstress replay r.json", "reproduction": {"reproduced": 0, "replays": 5}}
    assert replay_line(rate).startswith("replay: kvstress replay r.json (free-running")
    assert "0/5 times" in replay_line(rate)


def test_a_finding_whose_first_replay_diverged_says_a_replay_may_not_reproduce_it() -> None:
    """Pools that sort or zero in an executor's thread: 5 of 6 findings said "not reproduced"
    on replay, and the console had said nothing (a blind user's)."""
    from kvstress.reports import replay_line
    from kvstress.scenarios._switches import switch_fields

    diverged = {"replay": "kvstress replay r.json", **switch_fields("scenario", None, None)}
    assert "did not follow the schedule" in replay_line(diverged)
    followed = {"replay": "kvstress replay r.json", **switch_fields("scenario", None, ())}
    assert replay_line(followed) == "replay: kvstress replay r.json"
