"""``python -m kvstress``: the command line, as the ``kvstress`` script runs it."""

from kvstress.cli import entry

if __name__ == "__main__":
    entry()
