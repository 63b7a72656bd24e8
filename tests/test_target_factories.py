"""A pool named by a factory that is not its class: a function in another module (a user's
config layer) or a ``functools.partial``. The controlled strategies make the pool's own modules
cooperative, found from the class of the pool the factory builds; before, they took the
factory's module only, and a correct pool's real ``Condition`` answered a timed acquire at
once on virtual time (a false ``timeout-early``, PCT, 0.016 s)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
import torch

from kvstress.fuzz import fuzz, load_target, parse_mix
from kvstress.mutants import ThreadConditionPool


def make_condition_pool(
    num_blocks: int, block_shape: Any, *, dtype: Any = torch.float32, device: Any = None
) -> Any:
    """A factory function in this module; the pool's class lives in kvstress.mutants."""
    return ThreadConditionPool(num_blocks, block_shape, dtype=dtype, device=device)


half_condition_pool = functools.partial(ThreadConditionPool, dtype=torch.float16)


@pytest.mark.parametrize("name", ["make_condition_pool", "half_condition_pool"])
def test_a_pool_built_by_a_factory_elsewhere_is_driven_cooperatively(name: str, tmp_path: Path) -> None:
    target = load_target(f"{__name__}:{name}")
    assert "kvstress.mutants._ordinary_threads" in target.pool_modules
    outcome = fuzz(target, budget_s=3.0, seed=0, mix=parse_mix("pct,random"), report_dir=tmp_path)
    assert outcome.finding is None, outcome.finding.violation.details()


def test_loading_a_pool_that_ignores_its_timeout_does_not_hang(tmp_path: Path) -> None:
    """The backend probe (every block taken, then a 1 ms wait for one more) is bounded: an async
    pool whose acquire ignores its timeout hung ``kvstress fuzz`` for ever, before any report
    (a blind sweep); it loads, and the search reports it."""
    import time

    started = time.monotonic()
    target = load_target("pools.ignores_timeout:IgnoresTimeoutPool")
    assert time.monotonic() - started < 10
    outcome = fuzz(target, budget_s=5, seed=0, report_dir=tmp_path)
    assert outcome.finding is not None
    assert outcome.finding.violation.invariant in ("hang", "timeout-late", "lost-wakeup")


def test_a_module_that_exits_as_it_is_imported_is_bad_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``sys.exit`` at a pool module's import is one clear error, not kvstress's own exit
    status (it became rc 1, "violation found", with no report)."""
    from kvstress.fuzz import TargetError

    (tmp_path / "leaves_at_import.py").write_text("import sys\nsys.exit('leaving')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(TargetError, match=r"cannot import .leaves_at_import..*SystemExit: leaving"):
        load_target("leaves_at_import:Pool")


class _BlocksInInit(ThreadConditionPool):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        import threading

        threading.Event().wait()  # never returns


def test_a_constructor_that_blocks_is_refused_not_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """Building the first pool is bounded: a constructor that blocks hung ``kvstress fuzz`` for
    ever, before any output."""
    from kvstress.fuzz import TargetError, _target

    monkeypatch.setattr(_target, "BUILD_BOUND_S", 0.5)
    with pytest.raises(TargetError, match=r"did not return within 0\.5 s: its constructor blocks"):
        load_target(f"{__name__}:_BlocksInInit")
