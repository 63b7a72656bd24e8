"""The ``kvstress`` command line: one module per subcommand."""

from kvstress.cli._main import entry as entry
from kvstress.cli._main import main as main
