"""What may be shown of a sink's address: scheme and host, never the rest.

A sink URL comes from configuration and can carry secrets anywhere past its host: a user and
password, a token in the query, and for Slack-style webhooks the path itself. Whatever jobgate
stores, logs, writes to a local file or returns to a tenant names a sink by ``shown_url`` (or,
for a file, by its file name alone: the server's folders are not the tenant's business).
"""

from __future__ import annotations

from pathlib import PurePath

from jobgate.core.addresses import shown_url

__all__ = ["shown_file", "shown_sink", "shown_url"]

FILE = "file:"
_OLD_HTTP = "http:"  # names stored before redaction was tightened: ``http:<url without query>``


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
