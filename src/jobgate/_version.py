"""The version, one place: the package metadata reads it (pyproject: dynamic), the code imports it."""

__version__ = "0.1.0"
