"""``python -m jobgate`` runs the command line."""

from jobgate.cli.main import main

main()
