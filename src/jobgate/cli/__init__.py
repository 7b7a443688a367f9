"""The ``jobgate`` command line: parse, call a service, render. No rules live here."""

from jobgate.cli.app import cli, main

__all__ = ["cli", "main"]
