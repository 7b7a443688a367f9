"""Where seed 004's API is served: ``/api/orchestrator``, and its bare paths for API callers."""

from __future__ import annotations

import re
from collections.abc import Mapping

PREFIX = "/api/orchestrator"

# The first path segments the seed's API owns; those the console also serves need negotiation.
SEED_SEGMENTS = frozenset({"scenarios", "jobs", "results", "schedules", "tokens", "requests"})
SHARED_WITH_CONSOLE = frozenset({"schedules", "requests"})
# A cheap first look (every request passes it): the path starts with one of those segments.
SEED_PATH = re.compile(r"/(?:" + "|".join(sorted(SEED_SEGMENTS)) + r")(?:/|$)")


def seed_path(path: str, headers: Mapping[str, str], *, session_cookie: str) -> str | None:
    """The ``/api/orchestrator`` path a request at a bare seed path is for, or None when it is
    not one (or is the console's).

    A request is an API call when it carries ``Authorization`` (a bearer token or LDAP basic
    credentials, which the console never sends), or when it neither holds a console session
    nor asks for HTML (a script, not a browser). Only then does a path the console also serves
    go to the API; the others always do.
    """
    segment = path.split("/", 2)[1] if path.startswith("/") else ""
    if segment not in SEED_SEGMENTS:
        return None
    if segment in SHARED_WITH_CONSOLE:
        api_call = "authorization" in headers or (
            f"{session_cookie}=" not in headers.get("cookie", "") and "text/html" not in headers.get("accept", "")
        )
        if not api_call:
            return None
    return PREFIX + path
