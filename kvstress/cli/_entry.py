"""The ``kvstress`` script's first step: import the command line, Ctrl-C included.

Loading the command line imports torch, which takes a second or more; a Ctrl-C meanwhile must
end the run as one during a command does (one ``kvstress: interrupted`` line, status 130), not
with a traceback from inside an import. Raising there is unsafe: torch's C++ initialisation
aborts the process when an exception comes through it (``terminate called after throwing an
instance of 'pybind11::error_already_set'``), and other code may swallow it. So while the
command line loads, Ctrl-C only sets a flag, and the run stops as soon as the import returns.
"""

from __future__ import annotations

import signal
import sys
import threading
from typing import NoReturn


def entry() -> NoReturn:
    """The ``kvstress`` script and ``python -m kvstress``: see ``kvstress.cli._main.entry``."""
    interrupted = threading.Event()
    ours = threading.current_thread() is threading.main_thread() and (
        signal.getsignal(signal.SIGINT) is signal.default_int_handler
    )

    def on_sigint(signum: int, frame: object) -> None:
        interrupted.set()  # no exception: see the module's docstring

    if ours:
        signal.signal(signal.SIGINT, on_sigint)
    try:
        from kvstress.cli import _main

        chosen = _main.chosen_command(sys.argv[1:])
        if chosen is not None:
            _main.command_module(chosen)  # its module loads here (torch, for most)
        run = _main.entry
    except KeyboardInterrupt:
        interrupted.set()
    finally:
        if ours:
            signal.signal(signal.SIGINT, signal.default_int_handler)
    if interrupted.is_set():
        print("kvstress: interrupted", file=sys.stderr)
        sys.exit(130)
    run()
