"""What a submission is: one trigger for one definition, as asked, as prepared, as stored.

These values pass between the trigger pipeline (``service.pipeline``), the admission shell
(``service.admission``) and the callers that trigger runs (scheduler, requests, workflows,
manual runs, the API and the CLI).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from jobgate.core.audit import Acting
from jobgate.core.canonical import canonical_json
from jobgate.core.errors import GovernanceRefusal, ValidationError
from jobgate.core.governance import ApprovalFact, Facts, Moment
from jobgate.core.models import ConfigSnapshot, ExecutionWindow, JobRun, Scope, TriggerType
from jobgate.service.gates import EPOCH
from jobgate.store.base import RunCreate

SYSTEM_ACTOR = "system"
SYSTEM_TENANT = "_system"  # the deployment's own audit chain (the scheduler policy)

# What a batch learnt of approvals, by (tenant, definition, digest): the active approval's fact
# (with the code digest it binds, recorded in each run it admits), or None (not approved).
Approved = dict[tuple[str, str, str], ApprovalFact | None]


def approval_fact(active: Mapping[tuple[str, str, str], str | None], key: tuple[str, str, str]) -> ApprovalFact | None:
    """The admission rule's approval fact for ``key`` from ``StoreTx.approvals_active``'s answer."""
    return ApprovalFact(key[2], active[key], EPOCH) if key in active else None


_ORIGIN_TEXT = re.compile(r"[\x21-\x7e]{1,200}")  # printable, no spaces: identifiers of other systems


@dataclass(frozen=True)
class EventOrigin:
    """Where an event came from and the policy it was raised under (seed 000 §18): the source
    engine's MEID and CMI and the policy context are recorded in each run's trigger; the signal
    id and ECO number are domain keys of its scope (seed §41: what the run is about)."""

    source_engine_meid: str | None = None
    source_engine_cmi: str | None = None
    signal_id: str | None = None
    eco_number: str | None = None
    policy_context: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("source_engine_meid", "source_engine_cmi", "signal_id", "eco_number"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, str) and _ORIGIN_TEXT.fullmatch(value)):
                raise ValidationError("1 to 200 printable characters without spaces", field=name)
        if not isinstance(self.policy_context, dict):
            raise ValidationError("a JSON object", field="policy_context")
        try:
            canonical_json(self.policy_context)
        except ValueError as exc:
            raise ValidationError(str(exc), field="policy_context") from None

    def scope_keys(self) -> tuple[tuple[str, str], ...]:
        return tuple((k, v) for k, v in (("eco_number", self.eco_number), ("signal_id", self.signal_id)) if v)


@dataclass(frozen=True)
class SubmitRequest:
    """One trigger for one definition. ``request_id`` makes a manual submission idempotent."""

    job_definition_id: str
    trigger_type: TriggerType = TriggerType.MANUAL
    params: dict[str, Any] = field(default_factory=dict)
    scope: Scope = field(default_factory=Scope)
    requested_by: str | None = None
    reason: str | None = None
    request_id: str | None = None
    trigger_id: str | None = None
    source_event_id: str | None = None
    event_type: str | None = None
    source_engine_meid: str | None = None  # seed §18: the engine an event came from
    source_engine_cmi: str | None = None
    payload: dict[str, Any] = field(default_factory=dict)
    policy_context: dict[str, Any] = field(default_factory=dict)
    due_at: datetime | None = None
    window: ExecutionWindow | None = None  # batch runs: the [start, end) they cover, part of the key
    retry_of: str | None = None  # the terminal run this one retries: the key derives from it alone
    # A caller's idempotency key (API ``Idempotency-Key``): the run's key derives from it and
    # the tenant alone, so the same key always finds the same run, whatever else changed.
    client_key: str | None = None
    role: str | None = None  # the requester's role, when a token asked (scheduler policy ceilings)
    via_request: bool = False  # set only by an approved four-eyes request (safe mode's manual review)
    workflow_run_id: str | None = None  # a workflow step's run: the workflow it belongs to
    # A workflow step runs the version of its definition the workflow pinned at its start, under
    # a key derived from the workflow and the step alone (never from a caller's key: a caller
    # cannot claim a step's run by choosing an Idempotency-Key).
    definition_version: int | None = None
    run_key: str | None = None
    # A workflow step may name its own policies instead of its definition's (seed 000 §8 steps).
    retry_policy: str | None = None
    timeout_policy: str | None = None
    # When the admission rule is asked (``core.governance.Moment``); None: a trigger, or a
    # workflow step when ``workflow_run_id`` is set.
    moment: Moment | None = None
    # A schedule's slot (``schedule_id@instant``): the one run it may ever have, whatever the
    # key (which includes the configuration digest) says. Set by the scheduler and by backfill.
    slot: str | None = None


class RefusedSubmission(GovernanceRefusal):
    """A refusal under the write lock that creates runs, naming the submission it refused: the
    ``run.refused`` audit entry is about that request, not the batch's first (a revocation of
    the second definition of a batch was once recorded against the first)."""

    def __init__(self, refusal: GovernanceRefusal, request: SubmitRequest | None) -> None:
        super().__init__(refusal.message, code=refusal.code, rule=refusal.rule, field=refusal.field)
        self.request = request


@dataclass(frozen=True)
class SubmitResult:
    run: JobRun
    created: bool


@dataclass(frozen=True)
class PreparedSubmission:
    """A validated submission, built and ready to store. ``licensed``: its definition declares
    permissions, so the run holds one of the licence's concurrent slots while open. ``facts``:
    what the admission rule admitted it on; under the write lock they are gathered again."""

    create: RunCreate
    snapshot: ConfigSnapshot
    licensed: bool = False
    request: SubmitRequest | None = None
    facts: Facts | None = None
    actor: str | None = None
    # The request it was prepared for (``core.audit.ACTING``), read in the caller's own thread: a
    # group commit's leader may store it, and its audit entry must name this caller's credential.
    acting: Acting | None = None
