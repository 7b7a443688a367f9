"""One pass of the SLA monitor: look at every subject that can have something due, record each
reminder and breach once, escalate what must be escalated.

Which subjects can still produce a new reminder or breach, and so are read each pass:

1. **Open subjects old enough**: open job runs and workflow runs whose definition has an SLA
   policy and that are at least as old as that policy's earliest reminder or deadline
   (``core.sla.earliest_offset``), waiting runs past their queue deadline and running runs
   past their execution timeout. Each read walks a partial index of open rows only, so the
   finished history, however long, costs nothing. This is how a breach is found *while* the
   run is still running.
2. **Subjects that ended since the last pass**: a run can also end between two passes after
   its deadline passed (or an attempt can time out and be retried in between). Every such end
   is a transition, so the monitor reads the transitions after its cursor (a durable row in
   ``outbox_cursors``) and judges each subject as it was when it left its open status
   (``core.sla``: "seen open at or after the deadline"). A finished run is judged once, by the
   transition that finished it, and never read again; after a restart the cursor resumes where
   it stopped, so downtime loses nothing. The first pass on a database without a cursor
   starts at the newest transition: history from before the monitor existed is not re-judged.
   On PostgreSQL a transaction can commit a lower id after a higher one, and a transition's
   ``at`` is application time, not commit time (a worker writing settlements again after a
   database blip stamps old instants on new ids), so the cursor follows what has committed:
   it never passes a missing id (a transaction still open) unless the id was already issued
   ``GAP_GRACE`` ago on the monitor's own clock (a mark row records the head id seen and
   when), after which the gap is taken for a rolled-back transaction. Transitions past the
   cursor are read again next pass and skipped by id.

Recording is once-only by the unique (tenant, subject, kind, phase) key: ``INSERT ... ON
CONFLICT DO NOTHING`` tells the one monitor that inserted the record to write its event
(``sla_breach`` or ``sla_reminder``) and, for a breach, its audit entry, all in one
transaction, so two monitors (or one that crashed after committing) never double anything.
Escalations are compare-and-sets (``service.sla_record``), recorded on the breach
(``escalated``), so they happen once too and are retried while the subject stays open.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from jobgate.core import encoding
from jobgate.core.models import JobRun
from jobgate.core.policies import SlaPolicy
from jobgate.core.records import BreachRecord, DefinitionPolicies, Left, WorkflowSubject
from jobgate.core.sla import (
    RUNS_CURSOR,
    WORKFLOWS_CURSOR,
    Observation,
    SlaGroups,
    SubjectKind,
    due,
    earliest_offset,
    eco_number,
    evidence_anchor,
)
from jobgate.core.states import RunStatus
from jobgate.service.engine import Engine
from jobgate.service.sla_record import Settled, Subject, record
from jobgate.store.sqlstore import StoreTx

log = logging.getLogger("jobgate.sla")

PAGE = 500  # open subjects per read
PAGES_PER_PASS = 20  # per arm; a longer list continues where it stopped on the next pass
CURSOR_WINDOW = 5000  # transition ids per read
WINDOWS_PER_PASS = 20
GAP_GRACE = timedelta(seconds=30)  # how long a missing transition id may still commit (PostgreSQL)

DefinitionKey = tuple[str, str, int]


@dataclass
class MonitorState:
    """What a monitor keeps between passes. A fresh one is always correct (the cursors and the
    records are in the database); it only saves reads."""

    policies: dict[DefinitionKey, DefinitionPolicies] = field(default_factory=dict)
    resume: dict[str, tuple[int, str] | None] = field(default_factory=dict)  # open-subject page keys
    seen: dict[str, set[int]] = field(default_factory=dict)  # transition ids past the cursor, judged
    unknown_policies: set[str] = field(default_factory=set)  # logged once
    settled: Settled = field(default_factory=dict)  # subjects with nothing new to record (sla_record)


@dataclass(frozen=True)
class CheckResult:
    subjects: int  # subjects judged this pass
    reminders: int
    breaches: int
    escalations: int
    behind: bool = False  # more transitions or open subjects wait for the next pass


def check(engine: Engine, now: datetime | None = None, *, state: MonitorState | None = None) -> CheckResult:
    """One pass (see the module docstring). Safe to run from several processes at once."""
    now = now or engine.clock.now()
    state = state if state is not None else MonitorState()
    policies = _refresh_policies(engine, state)
    sla_of = _resolver(engine, state)
    sla_defs = sorted({p.job_definition_id for p in policies.values() if sla_of(p) is not None})
    subjects = _Subjects(state, sla_of)
    if sla_defs or any(p.timeout_policy or p.step_timeouts for p in policies.values()):
        groups = _groups(policies.values(), sla_of, now)
        run_scan = _scan(engine, state, now, workflows=False, sla_defs=sla_defs)
        flow_scan = _scan(engine, state, now, workflows=True, sla_defs=sla_defs)
        _ended_runs(engine, run_scan, subjects)
        _ended_workflows(flow_scan, subjects)
        open_behind = _open_runs(engine, state, now, groups, subjects)
        open_behind = _open_workflows(engine, state, now, groups, subjects) or open_behind
        behind = open_behind or run_scan.behind or flow_scan.behind
    else:  # no definition has a deadline: nothing can breach, the cursors just follow the head
        run_scan, flow_scan = _skip(engine, workflows=False), _skip(engine, workflows=True)
        behind = False
    judged = subjects.all()
    reminders, breaches, escalations = record(engine, judged, now, state.settled)
    seen = {(s.tenant_id, s.subject_id) for s in judged}
    state.settled = {key: pairs for key, pairs in state.settled.items() if key in seen}  # bounded by what is open
    _advance(engine, state, now, run_scan)
    _advance(engine, state, now, flow_scan)
    return CheckResult(len(judged), reminders, breaches, escalations, behind)


def breaches(
    engine: Engine,
    tenant_id: str,
    *,
    phase: str | None = None,
    kind: str | None = None,
    subject_id: str | None = None,
    job_definition_ids: tuple[str, ...] | None = None,
    before: tuple[datetime, str] | None = None,
    limit: int = 100,
) -> list[BreachRecord]:
    """A tenant's reminders and breaches, newest first (read as that tenant)."""
    with engine.store.read(tenant_id=tenant_id) as tx:
        return tx.sla.breaches_list(
            tenant_id,
            phase=phase,
            kind=kind,
            subject_id=subject_id,
            job_definition_ids=job_definition_ids,
            before=before,
            limit=limit,
        )


# ---------------------------------------------------------------- policies
def _refresh_policies(engine: Engine, state: MonitorState) -> dict[DefinitionKey, DefinitionPolicies]:
    """Stored versions are immutable: each one's policy names are read once per monitor."""
    with engine.store.read() as tx:
        keys = tx.sla.definition_keys()
        missing = [k for k in keys if k not in state.policies]
        for p in tx.sla.definition_policies(missing) if missing else []:
            state.policies[(p.tenant_id, p.job_definition_id, p.version)] = p
    return state.policies


Resolve = Callable[[DefinitionPolicies], SlaPolicy | None]


def _resolver(engine: Engine, state: MonitorState) -> Resolve:
    """A definition's SLA policy in today's configuration (an unknown name is logged once)."""
    configured = engine.config.sla_policies

    def sla_of(p: DefinitionPolicies) -> SlaPolicy | None:
        if p.sla_policy is None:
            return None
        policy = configured.get(p.sla_policy)
        if policy is None and p.sla_policy not in state.unknown_policies:
            state.unknown_policies.add(p.sla_policy)
            log.warning(
                "definition %s names SLA policy %r, which this configuration does not define; not monitored",
                p.job_definition_id,
                p.sla_policy,
                extra={"action": "sla_policy_unknown"},
            )
        return policy

    return sla_of


def _groups(policies: Iterable[DefinitionPolicies], sla_of: Resolve, now: datetime) -> list[tuple[list[str], int]]:
    """Definition ids grouped by the creation instant before which their subjects may have
    something due (``earliest_offset`` of their policy)."""
    by_offset: dict[timedelta, set[str]] = {}
    for p in policies:
        policy = sla_of(p)
        if policy is not None:
            by_offset.setdefault(earliest_offset(policy), set()).add(p.job_definition_id)
    return [(sorted(ids), encoding.to_us(now - offset)) for offset, ids in sorted(by_offset.items())]


# ---------------------------------------------------------------- subjects
class _Subjects:
    """The subjects of one pass by (tenant, id), each with its policies resolved once."""

    def __init__(self, state: MonitorState, sla_of: Resolve) -> None:
        self.state = state
        self.sla_of = sla_of
        self.by_key: dict[tuple[str, str], tuple[Subject, SlaPolicy | None]] = {}

    def _get(
        self, kind: SubjectKind, tenant_id: str, subject_id: str, key: DefinitionKey, job_class: str,
        eco: str | None,
    ) -> tuple[Subject, SlaPolicy | None]:  # fmt: skip
        found = self.by_key.get((tenant_id, subject_id))
        if found is None:
            p = self.state.policies.get(key)
            names = (None, None) if p is None else (p.sla_policy, p.timeout_policy)
            subject = Subject(kind, tenant_id, subject_id, job_class, key[1], eco, *names)
            found = self.by_key[(tenant_id, subject_id)] = (subject, None if p is None else self.sla_of(p))
        return found

    def run(self, run: JobRun) -> tuple[Subject, SlaPolicy | None]:
        key = (run.tenant_id, run.job_definition_id, run.definition_version)
        eco = eco_number(run.scope, run.params)
        return self._get(SubjectKind.RUN, run.tenant_id, run.job_run_id, key, str(run.job_class), eco)

    def workflow(self, w: WorkflowSubject) -> tuple[Subject, SlaPolicy | None]:
        key = (w.tenant_id, w.job_definition_id, w.definition_version)
        eco = eco_number(w.scope, w.params)
        return self._get(SubjectKind.WORKFLOW, w.tenant_id, w.workflow_run_id, key, w.job_class, eco)

    def all(self) -> list[Subject]:
        return [s for s, _ in self.by_key.values()]


def _judge(subject: Subject, obs: Observation, policy: SlaPolicy | None) -> None:
    for d in due(obs, policy):
        subject.dues.setdefault((d.kind, d.phase), d)


def _observe_run(
    run: JobRun, policy: SlaPolicy | None, *, status: RunStatus, at: datetime, live: bool, attempt: int,
    starts: dict[tuple[str, int], datetime],
) -> Observation:  # fmt: skip
    return Observation(
        status=status,
        at=at,
        live=live,
        created_at=run.created_at,
        attempt=attempt,
        first_started_at=run.started_at,
        attempt_started_at=starts.get((run.job_run_id, attempt)) if status is RunStatus.RUNNING else None,
        queue_deadline_at=run.queue_deadline_at,
        execution_timeout=run.execution_timeout,
        evidence_anchor=evidence_anchor(policy, run.params, run.created_at),
    )


def _observe_workflow(
    w: WorkflowSubject, policy: SlaPolicy | None, *, status: RunStatus, at: datetime, live: bool
) -> Observation:
    anchor = evidence_anchor(policy, w.params, w.created_at)
    return Observation(status=status, at=at, live=live, created_at=w.created_at, evidence_anchor=anchor)


def _may_have_timed_out(run: JobRun, status: RunStatus, at: datetime) -> bool:
    """Necessary for an execution-timeout breach: the first attempt started no later than the
    current one, so a run younger than its timeout since its first start has none."""
    return (
        status is RunStatus.RUNNING
        and run.execution_timeout is not None
        and run.started_at is not None
        and at - run.started_at >= run.execution_timeout
    )


def _open_runs(engine: Engine, state: MonitorState, now: datetime, groups: SlaGroups, subjects: _Subjects) -> bool:
    """Judge the open runs that may have something due; True if some wait for the next pass."""
    found: list[JobRun] = []
    with engine.store.read() as tx:
        for arm, waiting in (("runs:waiting", True), ("runs:leased", False)):
            for _ in range(PAGES_PER_PASS):
                page = tx.sla.open_runs_due(
                    waiting=waiting, now=now, sla_groups=groups, after=state.resume.get(arm), limit=PAGE
                )
                found += page
                last = page[-1] if len(page) == PAGE else None
                state.resume[arm] = None if last is None else (encoding.to_us(last.created_at), last.job_run_id)
                if last is None:
                    break
        wanted = {(r.job_run_id, r.attempt) for r in found if _may_have_timed_out(r, r.status, now)}
        starts = tx.sla.attempt_starts(wanted) if wanted else {}
    for run in found:
        subject, policy = subjects.run(run)
        subject.run = run  # read open now: what an escalation compares and sets against
        _judge(
            subject,
            _observe_run(run, policy, status=run.status, at=now, live=True, attempt=run.attempt, starts=starts),
            policy,
        )
    return any(state.resume.get(arm) is not None for arm in ("runs:waiting", "runs:leased"))


def _open_workflows(engine: Engine, state: MonitorState, now: datetime, groups: SlaGroups, subjects: _Subjects) -> bool:
    found: list[WorkflowSubject] = []
    with engine.store.read() as tx:
        for _ in range(PAGES_PER_PASS):
            page = tx.sla.open_workflows_due(sla_groups=groups, after=state.resume.get("workflows"), limit=PAGE)
            found += page
            last = page[-1] if len(page) == PAGE else None
            state.resume["workflows"] = (
                None if last is None else (encoding.to_us(last.created_at), last.workflow_run_id)
            )
            if last is None:
                break
    for w in found:
        subject, policy = subjects.workflow(w)
        subject.workflow = w
        _judge(subject, _observe_workflow(w, policy, status=w.status, at=now, live=True), policy)
    return state.resume.get("workflows") is not None


# ---------------------------------------------------------------- subjects that ended
@dataclass
class _Scan:
    """What one cursor read covered. ``cursor``: the durable value it started from (None: there
    was none yet); ``safe``: how far the cursor may now move; ``found``: the transitions judged."""

    workflows: bool
    cursor: int | None
    safe: int
    found: list[tuple[Left, Any]] = field(default_factory=list)
    behind: bool = False
    mark: int | None = None  # PostgreSQL: the head id seen now, to record as the next horizon mark


def _cursor_name(workflows: bool) -> str:
    return WORKFLOWS_CURSOR if workflows else RUNS_CURSOR


def _mark_name(workflows: bool) -> str:
    return _cursor_name(workflows) + ":horizon"


def _skip(engine: Engine, *, workflows: bool) -> _Scan:
    with engine.store.read() as tx:
        cursor = tx.sla.cursor_get(_cursor_name(workflows))
        head = tx.sla.max_id(workflows)
    return _Scan(workflows, cursor, max(head, cursor or 0))


def _scan(engine: Engine, state: MonitorState, now: datetime, *, workflows: bool, sla_defs: list[str]) -> _Scan:
    """The transitions after the cursor that ended something, window by window; those judged
    by an earlier pass (past the cursor, not yet settled) are skipped."""
    seen = state.seen.setdefault(_cursor_name(workflows), set())
    with engine.store.read() as tx:
        cursor = tx.sla.cursor_get(_cursor_name(workflows))
        head = tx.sla.max_id(workflows)
        if cursor is None:  # a first start: from now on, not the history before the monitor
            return _Scan(workflows, None, head)
        reach = min(head, cursor + WINDOWS_PER_PASS * CURSOR_WINDOW)
        safe, mark = reach, None  # SQLite: ids become visible in order, so all read are in
        if not engine.store.ordered_ids:  # PostgreSQL: before the rows, how far all have committed
            safe, mark = _committed_through(tx, workflows, cursor, reach, head, now)
        after = cursor
        found: list[tuple[Left, Any]] = []
        for _ in range(WINDOWS_PER_PASS):
            if after >= head:
                break
            upto = min(after + CURSOR_WINDOW, head)
            left = tx.sla.workflows_left if workflows else tx.sla.runs_left
            batch: list[tuple[Left, Any]] = list(left(after=after, upto=upto, sla_definitions=sla_defs))
            found += [(t, subject) for t, subject in batch if t.id not in seen]
            after = upto
    return _Scan(workflows, cursor, min(safe, after), found, after < head, mark)


def _committed_through(
    tx: StoreTx, workflows: bool, cursor: int, reach: int, head: int, now: datetime
) -> tuple[int, int | None]:
    """How far the cursor may move on PostgreSQL, and the head to record as the new horizon
    mark (None: keep the one recorded). Every id up to the first missing one has committed.
    Past a missing id only when it is covered by a mark at least ``GAP_GRACE`` old: it was
    issued that long ago and has not committed since, so it is taken for rolled back."""
    recorded = tx.sla.mark_get(_mark_name(workflows))
    base, mark = cursor, None
    if recorded is None or recorded[1] > now:  # none yet, or from a clock that has gone back
        mark = head
    elif now - recorded[1] >= GAP_GRACE:
        base, mark = max(cursor, min(recorded[0], reach)), head
    return tx.sla.contiguous_through(workflows=workflows, after=base, upto=reach), mark


def _ended_runs(engine: Engine, scan: _Scan, subjects: _Subjects) -> None:
    pairs: list[tuple[Left, JobRun]] = scan.found
    wanted = {(r.job_run_id, t.attempt) for t, r in pairs if _may_have_timed_out(r, t.from_status, t.at)}
    starts: dict[tuple[str, int], datetime] = {}
    if wanted:
        with engine.store.read() as tx:
            starts = tx.sla.attempt_starts(wanted)
    for t, run in pairs:
        subject, policy = subjects.run(run)
        obs = _observe_run(run, policy, status=t.from_status, at=t.at, live=False, attempt=t.attempt, starts=starts)
        _judge(subject, obs, policy)


def _ended_workflows(scan: _Scan, subjects: _Subjects) -> None:
    pairs: list[tuple[Left, WorkflowSubject]] = scan.found
    for t, w in pairs:
        subject, policy = subjects.workflow(w)
        _judge(subject, _observe_workflow(w, policy, status=t.from_status, at=t.at, live=False), policy)


def _advance(engine: Engine, state: MonitorState, now: datetime, scan: _Scan) -> None:
    """After the pass's records committed: move the durable cursor as far as is settled, and
    remember the ids judged beyond it (read again next pass, not judged again)."""
    name = _cursor_name(scan.workflows)
    if scan.cursor is None or scan.safe > scan.cursor or scan.mark is not None:
        with engine.store.write() as tx:
            if scan.cursor is None or scan.safe > scan.cursor:
                tx.sla.cursor_put(name, scan.safe, now)
            if scan.mark is not None:
                tx.sla.mark_put(_mark_name(scan.workflows), scan.mark, now)
    seen = state.seen.setdefault(name, set())
    seen.update(t.id for t, _ in scan.found)
    state.seen[name] = {i for i in seen if i > scan.safe}
