"""What may be shown of a URL from configuration: scheme, host and port, never the rest (pure).

A URL in ``jobgate.yaml`` (a sink, a webhook, an HTTP target) can carry secrets anywhere past
its host: a user and password, a token in the query, and for Slack-style webhooks the path
itself. Whatever jobgate stores, logs or shows names such a URL by ``shown_url``.
"""

from __future__ import annotations

from urllib.parse import urlsplit


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
