"""The ``kvstress`` command line: one module per subcommand.

``entry`` is light: it takes over Ctrl-C before the heavy imports (torch) begin.
"""

from typing import TYPE_CHECKING, Any

from kvstress.cli._entry import entry as entry

if TYPE_CHECKING:
    from kvstress.cli._main import main as main


def __getattr__(name: str) -> Any:
    if name != "main":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from kvstress.cli._main import main

    return main
