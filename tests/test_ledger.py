"""The ledger: references are given up when release is called and taken when acquire returns."""

from __future__ import annotations

from kvstress.harness._ledger import Ledger


def test_take_share_and_give_up() -> None:
    """A tenancy ends only when its last reference is given up, and is counted as ended."""
    ledger = Ledger(2)
    assert ledger.take("h0", 1, object()) is None
    ledger.share(1, "h1")
    assert ledger.holders_of(1) == ("h0", "h1")
    assert ledger.give_up("h0", 1) is False
    assert ledger.give_up("h1", 1) is True
    assert ledger.holders_of(1) == () and ledger.ended[1] == 1


def test_take_of_a_held_block_returns_the_clash() -> None:
    """Taking a block someone holds reports that tenancy instead of opening a second one."""
    ledger = Ledger(1)
    ledger.take("h0", 0, object())
    clash = ledger.take("h1", 0, object())
    assert clash is not None and clash.holders == ("h0",)


def test_tenancies_are_numbered_per_block() -> None:
    """Each new tenancy of a block gets the next number, so old references go stale."""
    ledger = Ledger(1)
    ledger.take("h0", 0, object())
    first = ledger.open[0].number
    ledger.give_up("h0", 0)
    ledger.take("h0", 0, object())
    assert ledger.open[0].number == first + 1
    assert ledger.unheld_seen() == []


def test_canaries_are_exact_small_integers() -> None:
    """Canary values stay within 1..250 so every float dtype holds them exactly."""
    ledger = Ledger(1)
    values = {ledger.next_canary() for _ in range(600)}
    assert values <= {float(v) for v in range(1, 251)} and len(values) == 250
