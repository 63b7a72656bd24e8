"""Concurrency for the workload: each phase of the stream served by its own set of worker threads."""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from kvstress.bench._load import LoadSpec, Phase, Request
from kvstress.bench._result import RequestResult

Serve = Callable[[Request, float], RequestResult]


@dataclass(frozen=True, slots=True)
class Served:
    """What a path served, in request order; ``wall_s`` from the first request to the last one's end."""

    results: tuple[RequestResult, ...]
    wall_s: float
    interrupted: bool


def serve_all(serve: Serve, stream: Sequence[Request], load: LoadSpec, *, sync: Callable[[], None]) -> Served:
    """Serve ``stream`` phase by phase: ``load.concurrency`` workers, or ``load.burst`` for the burst.

    The burst's requests all start at once. ``sync`` runs before the clock stops (a CUDA
    synchronize, so queued device work is counted). A KeyboardInterrupt stops the workers from
    taking new requests; those in flight finish, and ``interrupted`` is set. A worker's own
    exception is raised here once the phase's threads have stopped.
    """
    origin = time.perf_counter()
    results: list[RequestResult] = []
    interrupted = False
    for phase, group in itertools.groupby(stream, key=lambda request: request.phase):
        requests = list(group)
        workers = load.burst if phase is Phase.BURST else load.concurrency
        if not _serve_phase(serve, requests, min(workers, len(requests)), origin, results):
            interrupted = True
            break
    sync()
    ordered = tuple(sorted(results, key=lambda result: result.index))
    return Served(ordered, time.perf_counter() - origin, interrupted)


def _serve_phase(
    serve: Serve, requests: list[Request], workers: int, origin: float, results: list[RequestResult]
) -> bool:
    """Serve ``requests`` on ``workers`` threads; False when interrupted."""
    todo = deque(requests)  # popleft and append are atomic: the threads share them without a lock
    stop = threading.Event()
    errors: list[BaseException] = []

    def work() -> None:
        while not stop.is_set():
            try:
                request = todo.popleft()
            except IndexError:
                return
            try:
                results.append(serve(request, origin))
            except BaseException as exc:  # handed to the main thread, which raises it
                errors.append(exc)
                stop.set()
                return

    threads = [threading.Thread(target=work, name=f"kvstress-bench-{n}", daemon=True) for n in range(workers)]
    for thread in threads:
        thread.start()
    try:
        _wait(threads)
    except KeyboardInterrupt:
        stop.set()
        for thread in threads:
            thread.join()
        return False
    if errors:
        raise errors[0]
    return True


def _wait(threads: Iterable[threading.Thread]) -> None:
    # Where Ctrl-C reaches the run: the main thread spends the run here.
    for thread in threads:
        thread.join()
