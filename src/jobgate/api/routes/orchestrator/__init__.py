"""Seed 004's HTTP API as a compatibility surface over jobgate's services.

Served at ``/api/orchestrator/…`` (the documented place, in the OpenAPI description) and,
for API callers, at the seed's own paths (``/scenarios``, ``/jobs``, ``/results``,
``/schedules``, ``/tokens``, ``/requests``) so a client written for that server works
unchanged. ``/schedules`` and ``/requests`` are also console pages; ``seed_path`` decides
which face a request at the bare path is for (see there). Every route reuses the handler
or service of its ``/api/v1`` counterpart under the same access rule: a second face, never
a second set of rules.
"""

from __future__ import annotations

from jobgate.api.routes.orchestrator import admin, jobs, requests, scenarios
from jobgate.api.routes.orchestrator.paths import PREFIX, SEED_PATH, seed_path

ROUTERS = (scenarios.router, jobs.router, admin.router, requests.router)

__all__ = ["PREFIX", "ROUTERS", "SEED_PATH", "seed_path"]
