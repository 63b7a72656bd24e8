"""``python -m kvstress``: the command line, as the ``kvstress`` script runs it."""

import sys

from kvstress.cli import main

if __name__ == "__main__":
    sys.exit(main())
