"""A caller's W3C ``traceparent`` header: kept with the run's trigger so the run joins the
caller's trace; an invalid one is ignored (a new trace), never refused."""

from __future__ import annotations

import pytest
from tests.api.conftest import ACME_JOB, World

from jobgate.core.tokens import Role

GIVEN = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/api/v1/runs", {"job_definition_id": ACME_JOB}),
        ("/api/v1/schedule", {"job_definition_id": ACME_JOB, "trigger": {"trigger_type": "manual"}}),
    ],
)
@pytest.mark.parametrize(
    ("header", "adopted"),
    [(GIVEN, GIVEN), (GIVEN.upper(), None), ("garbage", None), (None, None)],
)
def test_a_valid_traceparent_header_is_adopted_by_the_run(
    world: World, path: str, body: dict[str, object], header: str | None, adopted: str | None
) -> None:
    headers = world.headers("acme", Role.ADMIN)
    if header is not None:
        headers["traceparent"] = header
    answer = world.client.post(path, json=body, headers=headers)
    assert answer.status_code in (200, 201), answer.text
    run_id = answer.json()["job_run_id"] if "job_run_id" in answer.json() else answer.json()["run"]["job_run_id"]
    with world.engine.store.read() as tx:
        run = tx.run_get(run_id)
        trigger = tx.run_trigger(run_id) or {}
    assert run is not None and run.traceparent == adopted
    assert trigger.get("policy_context", {}) == ({} if adopted is None else {"traceparent": adopted})
