"""``python -m jobgate`` runs the command line."""

from jobgate.cli.root import main

main()
