"""interleaving_table: one column per worker, rows in the order operations returned."""

from __future__ import annotations

from kvstress._violation import Operation
from kvstress.scenarios import interleaving_table


def test_rows_follow_returns_and_mark_operations_in_flight() -> None:
    """Each operation sits in its worker's column at its return; others in flight show their
    call the first time (a bar alone did not say which call it was: a blind user's), then |."""
    history = [
        Operation(0, "b0", "acquire", {"timeout": 0.05}, 0.0, 0.3, "ok", 1),
        Operation(1, "b1", "acquire", {"timeout": 0.0}, 0.1, 0.2, "info", None),
        Operation(2, "b1", "acquire", {"timeout": 0.0}, 0.21, 0.25, "info", None),
        Operation(3, "b1", "release", {"block": 1}, 0.4, None, "pending"),
    ]
    lines = interleaving_table(history, ["b0", "b1"]).splitlines()
    assert lines[0].split("|")[1].strip() == "b0"
    gave_up = "acquire(0) -> None (info)".ljust(30)
    assert lines[2] == "| " + "acquire(0.05) ...".ljust(30) + " | " + gave_up + " |"
    assert lines[3] == "| " + "|".ljust(30) + " | " + gave_up + " |"
    assert lines[4].split("|")[1].strip() == "acquire(0.05) -> 1"
    assert lines[5].split("|")[2].strip() == "release(1) ..."


def test_the_failing_operation_is_marked_and_what_followed_is_cut() -> None:
    """With ``failed``, that row is marked and later operations (the unwinding) are left out."""
    history = [
        Operation(0, "b0", "acquire", {"timeout": 0.05}, 0.0, 0.1, "ok", 1),
        Operation(1, "b1", "acquire", {"timeout": 0.2}, 0.05, 0.3, "info", "cancelled"),
        Operation(2, "b0", "mark_in_use", {"block": 1}, 0.4, 0.5, "ok"),
    ]
    text = interleaving_table(history, ["b0", "b1"], failed=0)
    assert text.splitlines()[-1].endswith("<- failed here")
    assert "mark_in_use" not in text
    assert "acquire(0.2) ..." in text


def test_long_cells_wrap_inside_their_column_and_nothing_is_cut() -> None:
    """A cell longer than the column goes on over more lines of its row, every character kept."""
    history = [
        Operation(0, "b0", "check", {}, 0.0, 0.1, "ok", {"free_ids": list(range(40))}),
        Operation(1, "b1", "acquire", {"timeout": 0.05}, 0.05, 0.2, "info", "cancelled (in flight)"),
    ]
    lines = interleaving_table(history, ["b0", "b1"]).splitlines()
    assert {len(line) for line in lines} == {len(lines[0])}  # every line keeps the columns aligned
    b0 = "".join(line.split("|")[1].strip() + " " for line in lines[2:]).split()
    assert " ".join(b0).replace("| ", "").startswith("check() -> {'free_ids': [0, 1, 2,")
    assert "39]}" in " ".join(b0)
    b1 = " ".join(line.split("|")[2].strip() for line in lines[2:] if line.split("|")[2].strip() != "|")
    assert "acquire(0.05) -> cancelled (in flight) (info)" in " ".join(b1.split())
    assert not any("~" in line for line in lines)


def test_switch_points_are_listed_under_the_table() -> None:
    """Given switch points, the table ends with them numbered, in order."""

    class Point:
        def __init__(self, text: str) -> None:
            self.text = text

        def describe(self) -> str:
            return self.text

    history = [Operation(0, "b0", "acquire", {"timeout": 0.0}, 0.0, 0.1, "ok", 0)]
    text = interleaving_table(history, ["b0"], switches=[Point("first"), Point("second")])
    assert text.splitlines()[-3:] == [
        "switch points (where each worker was paused when another ran):",
        "  1. first",
        "  2. second",
    ]


def test_a_double_release_reads_as_one() -> None:
    """A release through an ended tenancy's handle read ``release(0, True)``."""
    from kvstress.scenarios._table import cell_text

    double = Operation(0, "h0", "release", {"block": 0, "double": True}, 0.0, 0.1, "ok", True)
    assert cell_text(double) == "release(0), a double release -> True"
