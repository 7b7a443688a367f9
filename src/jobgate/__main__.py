"""``python -m jobgate`` runs the command line."""

from jobgate.cli.app import main

main()
