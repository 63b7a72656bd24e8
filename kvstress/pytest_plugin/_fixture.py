"""The ``kvstress`` fixture: ``kvstress.check(MyPool)`` runs the search of ``kvstress fuzz``.

A finding fails the test with ``InvariantViolation`` naming the invariant, the JSON report and
the command that replays it, and adds the JUnit XML properties ``kvstress_invariant`` and
``kvstress_report`` to the test. Everything the check needs from the session (budget, seed,
report directory) comes from the plugin's options.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from kvstress._violation import InvariantViolation, Operation
from kvstress.pytest_plugin._options import SETTINGS, Settings, check_budget, check_seed
from kvstress.pytest_plugin._seeds import seed_for

if TYPE_CHECKING:
    from kvstress.fuzz import FuzzOutcome

# The search (and torch under it) is imported by the first check, not when pytest loads the
# plugin: every pytest run in an environment with kvstress installed loads it.


def factory_spec(factory: str | Callable[..., Any]) -> str:
    """The ``MODULE:ATTR`` name the fuzzer imports ``factory`` by (a string is passed through).

    ValueError for a factory defined inside a function: the fuzzer imports the pool by name, and
    no name reaches it. TypeError for anything that is neither a string nor a named callable.
    """
    if isinstance(factory, str):
        return factory  # load_target checks the form and names what is wrong
    module = getattr(factory, "__module__", None)
    qualname = getattr(factory, "__qualname__", None)
    if not callable(factory) or not isinstance(module, str) or not isinstance(qualname, str):
        raise TypeError(
            f"kvstress.check: factory must be a pool class or factory function, or a 'MODULE:ATTR' string, "
            f"got {factory!r} ({type(factory).__name__})"
        )
    if "<locals>" in qualname:
        raise ValueError(
            f"kvstress.check: factory {qualname} (in {module}) is defined inside a function, so the fuzzer "
            "cannot import it by name; define it at module level or pass a 'MODULE:ATTR' string"
        )
    return f"{module}:{qualname}"


class PoolChecker:
    """The value of the ``kvstress`` fixture: fuzzes pools for one test."""

    def __init__(self, settings: Settings, node: pytest.Item) -> None:
        self._settings = settings
        self._node = node

    @property
    def session_seed(self) -> int:
        """The session's seed (``--kvstress-seed``), the same on every xdist worker."""
        return self._settings.session_seed

    @property
    def seed(self) -> int:
        """This test's seed, derived from the session seed and the test's node id."""
        return seed_for(self._settings.session_seed, self._node.nodeid)

    @property
    def budget_s(self) -> float:
        """Default seconds per check (``--kvstress-budget``)."""
        return self._settings.budget_s

    @property
    def report_dir(self) -> Path:
        """Where failure reports are written (``--kvstress-report-dir``, absolute)."""
        return self._settings.report_dir

    def check(
        self,
        factory: str | Callable[..., Any],
        *,
        budget: float | None = None,
        num_blocks: int = 2,
        block_shape: Sequence[int] = (2, 4),
        seed: int | None = None,
        backend: str = "asyncio",
        strategy: str = "auto",
        isolate: bool = True,
    ) -> FuzzOutcome:
        """Fuzz the pool ``factory`` builds for ``budget`` seconds, as ``kvstress fuzz`` does.

        ``factory`` is a module-level pool class or factory function, or ``"MODULE:ATTR"``.
        ``budget`` defaults to ``--kvstress-budget``, ``seed`` to this test's seed; ``strategy``
        is ``auto`` or a comma-separated list, as for ``kvstress fuzz --strategy``. Returns what
        the search did; raises ``InvariantViolation`` on a finding (its report already written),
        and ``ValueError`` (``kvstress.fuzz.TargetError`` for the pool) on bad arguments.

        ``isolate`` (the default) runs the search in a child process, as ``kvstress fuzz`` does:
        a pool that kills its process (a segfault, ``os._exit``) then fails this test with a
        ``crash`` report instead of killing the pytest worker; it costs one process start
        (about a second). ``isolate=False`` runs it in this process.
        """
        __tracebackhide__ = True  # the failure belongs to the test that called check
        from kvstress._blame import InternalError
        from kvstress.fuzz import TargetError, fuzz, load_target, parse_mix
        from kvstress.fuzz._isolate import Job, default_memory_limit, supervise
        from kvstress.fuzz._target import check_target_args

        spec = factory_spec(factory)
        budget_s = self.budget_s if budget is None else check_budget(budget, "kvstress.check: budget")
        run_seed = self.seed if seed is None else check_seed(seed, "kvstress.check: seed")
        mix = parse_mix(strategy)
        if not isinstance(isolate, bool):
            raise ValueError(f"kvstress.check: isolate must be True or False, got {isolate!r}")
        if isolate:
            # The pool is loaded in the child only: a constructor that kills its process fails
            # this test with a crash report, not the pytest worker.
            blocks, shape = check_target_args(spec, num_blocks, block_shape, backend)
            job = Job(
                spec,
                blocks,
                shape,
                backend,
                budget_s,
                run_seed,
                tuple(mix),
                str(self.report_dir),
                memory_limit=default_memory_limit(),
            )
            result = supervise(job, [0])
            if result.refused is not None:
                raise TargetError(result.refused)
            if result.outcome.interrupted:
                raise KeyboardInterrupt  # pytest must stop too
            if result.death is not None and result.death.internal:
                raise InternalError(
                    f"kvstress failed in its own code, not the pool's: {result.death.internal}; "
                    f"traceback in {result.internal} (a bug in kvstress: please report it)"
                )
            if result.outcome.report is not None:
                raise self._reported(result.outcome.report, run_seed)
            return result.outcome
        target = load_target(spec, num_blocks=num_blocks, block_shape=block_shape, backend=backend)
        outcome = fuzz(
            target,
            budget_s=budget_s,
            seed=run_seed,
            mix=mix,
            report_dir=self.report_dir,
            stream=0,
            raise_interrupt=True,  # pytest must stop too
        )
        if outcome.finding is not None:
            raise self._violation(outcome.finding.violation, outcome.report, run_seed)
        return outcome

    def _reported(self, path: Path, seed: int) -> InvariantViolation:
        """The violation a child's report describes, with its history."""
        from kvstress.reports import load_report

        report = load_report(path)
        history = tuple(Operation(**op) for op in report["history"] if isinstance(op, dict))
        return self._violation(
            InvariantViolation(report["invariant"], report["message"], history), path, seed
        )

    def _violation(self, found: InvariantViolation, path: Path | None, seed: int) -> InvariantViolation:
        if path is None:  # fuzz writes a report with every finding; without one, keep the finding
            return found
        from kvstress.reports import load_report, replay_line

        report = load_report(path)
        # What record_property does, without its xunit2 warning: under `-W error` that warning
        # would replace the violation as the test's failure.
        self._node.user_properties.append(("kvstress_invariant", report["invariant"]))
        self._node.user_properties.append(("kvstress_report", str(path)))
        lines = [report["message"]]
        if report.get("table"):
            lines += ["interleaving:", report["table"]]
        lines += [
            f"report: {path}",
            replay_line(report),
            f"seed: {seed} (kvstress.check(..., seed={seed}) repeats this search)",
        ]
        return InvariantViolation(report["invariant"], "\n".join(lines), found.history, found.blocks)


def _checker(request: pytest.FixtureRequest) -> PoolChecker:
    node = request.node
    if not isinstance(node, pytest.Item):
        raise TypeError(f"the kvstress fixture is function-scoped, but was requested by {node!r}")
    return PoolChecker(request.config.stash[SETTINGS], node)


@pytest.fixture
def kvstress(request: pytest.FixtureRequest) -> PoolChecker:
    """Fuzz a pool from a test: ``kvstress.check(MyPool)`` fails the test on a broken invariant."""
    return _checker(request)


@pytest.fixture
def kvstress_fuzz(request: pytest.FixtureRequest) -> PoolChecker:
    """The ``kvstress`` fixture under a name that does not hide ``import kvstress`` in the same
    module: ``kvstress_fuzz.check(MyPool)``."""
    return _checker(request)
