"""The ``jobgate`` command line: parse, call a service, render. No rules live here."""

from jobgate.cli.root import cli, main

__all__ = ["cli", "main"]
