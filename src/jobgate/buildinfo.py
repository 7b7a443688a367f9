"""What this jobgate is: its version, the database schema it needs and the Python it runs on.

Shown by ``jobgate --version`` and served anonymously at ``/api/v1/buildinfo`` (and
``/buildinfo.json``, seed 001 §5.4), so an operator or a support ticket can say exactly which
build answered without a token. Nothing about the deployment (paths, database, hosts).
"""

from __future__ import annotations

import platform

from jobgate import __version__
from jobgate.store.migrate import HEAD

NAME = "jobgate"


def build_info() -> dict[str, str]:
    return {"name": NAME, "version": __version__, "schema": HEAD, "python": platform.python_version()}


def version_line() -> str:
    info = build_info()
    return f"{info['name']} {info['version']} (schema {info['schema']}, Python {info['python']})"
