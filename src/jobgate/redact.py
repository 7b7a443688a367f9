"""What may be shown of a sink's address: scheme and host, never the rest.

A sink URL comes from configuration and can carry secrets anywhere past its host: a user and
password, a token in the query, and for Slack-style webhooks the path itself. Whatever jobgate
stores, logs, writes to a local file or returns to a tenant names a sink by ``shown_url`` (or,
for a file, by its file name alone: the server's folders are not the tenant's business).
"""

from __future__ import annotations

from pathlib import PurePath
from urllib.parse import urlsplit

FILE = "file:"
_OLD_HTTP = "http:"  # names stored before redaction was tightened: ``http:<url without query>``


def shown_url(url: str) -> str:
    """``scheme://host[:port]`` of ``url``: no user, password, path, query or fragment."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:  # not a URL one can take apart: show nothing of it
        return "<unparsable url>"
    if ":" in host:  # an IPv6 literal keeps its brackets
        host = f"[{host}]"
    netloc = host if port is None else f"{host}:{port}"
    return f"{parts.scheme}://{netloc}" if parts.scheme else netloc


def shown_file(path: str | PurePath) -> str:
    """``file:<name>``: the file's name, not the folders of the host it is on."""
    return FILE + PurePath(path).name


def shown_sink(name: str) -> str:
    """A stored sink name as it may be shown; names stored by older versions (a full path,
    ``http:`` and a URL with its path) are reduced the same way. Idempotent."""
    if name.startswith(FILE):
        return shown_file(name.removeprefix(FILE))
    if name.startswith(_OLD_HTTP) and "://" in name.removeprefix(_OLD_HTTP):
        name = name.removeprefix(_OLD_HTTP)
    if "://" in name:
        return shown_url(name)
    return name
