"""``python -m jobgate.cli.entry``: the console script without relying on PATH."""

from jobgate.cli.root import main

if __name__ == "__main__":
    main()
