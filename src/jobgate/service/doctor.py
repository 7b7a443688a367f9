"""``jobgate doctor``: is this deployment healthy, and if not, what to look at first.

Each check gives green, amber or red with one line saying why. Gathering the facts is one
read transaction; judging them is pure (``judge_*``), so the thresholds are tested without a
database. Scoped to a tenant (the API), the queue and outbox checks count that tenant's rows
only; workers, the leader and the schema are the cluster's and shown to every operator.
The audit-anchoring check arrives with the evidence work (audit log and anchoring).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

from jobgate.core.capabilities import Capability, advertised
from jobgate.core.errors import JobgateError
from jobgate.core.records import LockInfo
from jobgate.evidence.keys import signer_for, trusted_keys
from jobgate.scheduling.records import StoredSchedule
from jobgate.service.cluster import GONE_AFTER, SCHEDULER_LEADER, STALE_AFTER, lock_state, worker_state
from jobgate.service.engine import Engine
from jobgate.store.base import WorkerInfo
from jobgate.store.migrate import HEAD

log = logging.getLogger("jobgate.doctor")

QUEUE_WAIT_AMBER = timedelta(minutes=1)
QUEUE_WAIT_RED = timedelta(minutes=15)
OUTBOX_AGE_AMBER = timedelta(minutes=1)
OUTBOX_AGE_RED = timedelta(minutes=15)


class Level(StrEnum):
    GREEN = "green"
    AMBER = "amber"
    RED = "red"


@dataclass(frozen=True)
class Check:
    name: str
    level: Level
    detail: str


@dataclass(frozen=True)
class Facts:
    now: datetime
    revision: str | None
    due: int
    oldest_due: datetime | None
    workers: list[WorkerInfo]
    leader: LockInfo | None
    schedules: int  # active schedules only a scheduler leader fires (timed, configuration, safe mode)
    outbox: int
    oldest_outbox: datetime | None
    outages: list[LockInfo] = field(default_factory=list)  # open dependency outages (runtime.dependencies)
    failing: list[StoredSchedule] = field(default_factory=list)  # schedules whose plan or fire failed
    unanchored: list[tuple[str, datetime]] = field(default_factory=list)  # per tenant, its oldest unanchored entry
    anchor_window: timedelta = timedelta(hours=1)
    rls_bypassed_by: str | None = None  # PostgreSQL: a role row-level security never binds
    waiting: dict[str, tuple[str, str, int]] = field(default_factory=dict)  # SCHEDULED runs by definition digest
    tenant_id: str | None = None
    signed_by: str | None = None  # the key that signed the latest anchor of some tenant (None: unsigned)


def _age(now: datetime, then: datetime) -> str:
    seconds = max(0.0, (now - then).total_seconds())
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def judge_schema(revision: str | None) -> Check:
    if revision == HEAD:
        return Check("migrations", Level.GREEN, f"schema at {HEAD}")
    if revision is None:
        return Check("migrations", Level.RED, "no schema: the database was never migrated")
    return Check("migrations", Level.RED, f"schema at {revision}, this version needs {HEAD}")


def judge_tenancy(dialect: str, bypassed_by: str | None) -> Check | None:
    """PostgreSQL: red when jobgate connects as a role row-level security does not bind (a
    superuser or BYPASSRLS): tenant separation then rests on its queries alone. None on SQLite."""
    if dialect != "postgresql":
        return None
    if bypassed_by is not None:
        return Check(
            "tenant separation",
            Level.RED,
            f"connected as {bypassed_by}, which PostgreSQL exempts from row-level security (superuser or "
            "BYPASSRLS): connect as an ordinary role that owns jobgate's schema",
        )
    return Check("tenant separation", Level.GREEN, "row-level security binds this connection's role")


def judge_queue(now: datetime, due: int, oldest_due: datetime | None) -> Check:
    if due == 0 or oldest_due is None:
        return Check("queue", Level.GREEN, "no run is waiting")
    waited = now - oldest_due
    text = f"{due} due, the oldest waiting {_age(now, oldest_due)}"
    level = Level.RED if waited >= QUEUE_WAIT_RED else Level.AMBER if waited >= QUEUE_WAIT_AMBER else Level.GREEN
    return Check("queue", level, text)


GONE_AFTER_TEXT = f"{GONE_AFTER.total_seconds() / 60:g} minutes"


def judge_workers(now: datetime, workers: list[WorkerInfo], due: int, embedded: bool) -> Check:
    states = [worker_state(w, now, STALE_AFTER) for w in workers]
    alive, stale, gone = states.count("alive"), states.count("stale"), states.count("gone")
    text = f"{alive} alive, {stale} stale" + (f", {gone} gone (silent over {GONE_AFTER_TEXT})" if gone else "")
    if alive == 0 and not embedded:
        return Check("workers", Level.RED if due else Level.AMBER, f"{text}: nothing is executing runs")
    if stale:
        return Check("workers", Level.AMBER, f"{text}: the rescuer returns their runs after the lease expires")
    return Check("workers", Level.GREEN, text)


def judge_capable_workers(
    now: datetime, workers: list[WorkerInfo], waiting: dict[str, tuple[str, str, int]], tenant_id: str | None = None
) -> Check:
    """Definitions no live worker can execute (``runtime.capabilities``): every live worker that
    probed the version found it cannot run it here (its code does not import, its runner or
    target is not configured), and none can. Red when runs of it are waiting (they wait until
    a capable worker starts; none is burnt), amber when none is."""
    alive = [w for w in workers if worker_state(w, now, STALE_AFTER) == "alive"]
    by_digest: dict[str, list[Capability]] = {}
    for w in alive:
        for digest, entry in w.capabilities.items():
            found = advertised(entry)
            if tenant_id is None or found.tenant_id == tenant_id:
                by_digest.setdefault(digest, []).append(found)
    stranded = sorted(
        (found[0].job_definition_id, waiting.get(digest, ("", "", 0))[2], found[0].reason or "")
        for digest, found in by_digest.items()
        if not any(c.runnable for c in found)
    )
    if not stranded:
        probed = len(by_digest)
        return Check("capable workers", Level.GREEN, f"every definition the live workers probed ({probed}) runs")
    waiting_runs = sum(n for _, n, _ in stranded)
    named = "; ".join(f"{job} ({n} waiting): {reason}" for job, n, reason in stranded[:5])
    more = f"; and {len(stranded) - 5} more" if len(stranded) > 5 else ""
    level = Level.RED if waiting_runs else Level.AMBER
    return Check("capable workers", level, f"no live worker can run {named}{more}")


def judge_leader(now: datetime, leader: LockInfo | None, schedules: int) -> Check:
    if leader is not None and lock_state(leader, now) == "held":
        return Check("scheduler leader", Level.GREEN, f"held by {leader.owner}")
    if schedules == 0:
        return Check("scheduler leader", Level.GREEN, "no leader, and no schedule needs one")
    detail = f"no scheduler holds the lease: {schedules} active timed schedules are not firing"
    return Check("scheduler leader", Level.RED, detail)


def judge_outbox(now: datetime, pending: int, oldest: datetime | None) -> Check:
    if pending == 0 or oldest is None:
        return Check("outbox", Level.GREEN, "every event delivered")
    waited = now - oldest
    text = f"{pending} undelivered, the oldest from {_age(now, oldest)} ago"
    level = Level.RED if waited >= OUTBOX_AGE_RED else Level.AMBER if waited >= OUTBOX_AGE_AMBER else Level.GREEN
    return Check("outbox", level, text)


def judge_dependencies(now: datetime, outages: list[LockInfo]) -> Check:
    """Declared dependencies that are down: their runs wait in the queue (seed §58: a warning),
    and are dead-lettered once they waited their bound."""
    if not outages:
        return Check("dependencies", Level.GREEN, "no declared dependency is down")
    parts = []
    for m in sorted(outages, key=lambda m: m.acquired_at):
        name = m.name  # the dependency's
        seen = f"seen by {m.owner}" if m.expires_at > now else "no worker is checking it now"
        parts.append(f"{name} down for {_age(now, m.acquired_at)} ({seen})")
    return Check("dependencies", Level.AMBER, "; ".join(parts) + ": runs that declare it wait")


def judge_schedules(now: datetime, failing: list[StoredSchedule]) -> Check:
    """Schedules whose plan or fire failed: they are backing off (the others fire regardless)."""
    if not failing:
        return Check("schedules", Level.GREEN, "no schedule is failing")
    parts = []
    for item in sorted(failing, key=lambda i: (i.schedule.tenant_id, i.schedule.schedule_id)):
        retry = "" if item.retry_at is None else f", next try in {_age(item.retry_at, now)}"
        parts.append(f"{item.schedule.schedule_id} ({item.failures} in a row: {item.last_error}{retry})")
    return Check("schedules", Level.AMBER, f"{len(failing)} failing: " + "; ".join(parts))


def judge_anchoring(now: datetime, unanchored: list[tuple[str, datetime]], window: timedelta) -> Check:
    """Audit entries no anchor covers yet can be rewritten with the chain (seed §30-31): amber
    once the oldest has waited more than two anchor windows (the anchor job is not running, or
    failing)."""
    if not unanchored:
        return Check("anchoring", Level.GREEN, "every audit entry is anchored")
    tenant, oldest = min(unanchored, key=lambda u: u[1])
    text = f"the oldest unanchored audit entry ({tenant}) is {_age(now, oldest)} old"
    if now - oldest > 2 * window:
        return Check("anchoring", Level.AMBER, f"{text}: more than two anchor windows; is the anchor job running?")
    return Check("anchoring", Level.GREEN, f"{text} (anchored every {_age(now, now - window)})")


def judge_evidence_key(key_id: str | None, key_error: str | None, trusted: int, signed_by: str | None) -> Check:
    """The key that signs anchors (``evidence.keys``): red when it cannot be read, or when it is
    missing and the anchors are signed (anchoring then refuses to write unsigned anchors, and a
    verification with no key to check them fails); amber when the deployment signs nothing."""
    if key_error is not None:
        return Check("evidence key", Level.RED, f"cannot be used: {key_error}")
    if key_id is not None:
        return Check("evidence key", Level.GREEN, f"{key_id} signs the anchors")
    if signed_by is not None:
        where = f"; {trusted} trusted public key(s) still verify them" if trusted else ""
        return Check(
            "evidence key",
            Level.RED,
            f"missing, and the anchors are signed (by {signed_by!r}): anchoring stops until it is restored{where}",
        )
    return Check("evidence key", Level.AMBER, "none: anchors are not signed (jobgate keys evidence --create)")


def gather(engine: Engine, tenant_id: str | None) -> Facts:
    now = engine.clock.now()
    with engine.store.read(tenant_id=tenant_id) as tx:
        revision = tx.schema_revision()
        due, oldest_due = tx.runs_due_summary(tenant_id, now)
        workers = tx.workers_list()
        leader = tx.lock_get(SCHEDULER_LEADER)
        stored = tx.schedules_list(tenant_id)
        outbox, oldest_outbox = tx.outbox_summary(tenant_id)
        outages = tx.outages_open()
        unanchored = tx.oldest_unanchored(tenant_id)
        bypassing = tx.role_bypassing_rls()
        waiting = tx.runs_waiting_by_digest(tenant_id)
        latest = [tx.anchors.last(t) for t in ([tenant_id] if tenant_id else tx.audit_tenants())]
    failing = [s for s in stored if s.failures]
    # what only a leader fires: active schedules with slots (or watching the configuration or safe
    # mode); event, queue, policy and alert schedules fire where their input arrives
    needing_leader = [
        s for s in stored if not s.schedule.paused and not (s.schedule.kind.evented or s.schedule.kind.conditional)
    ]
    signed_by = next((a.key_id for a in latest if a is not None and a.signature is not None), None)
    return Facts(
        now, revision, due, oldest_due, workers, leader, len(needing_leader), outbox, oldest_outbox, outages, failing,
        unanchored, engine.config.evidence.anchor_window, bypassing, waiting, tenant_id, signed_by,
    )  # fmt: skip


def run_checks(engine: Engine, *, tenant_id: str | None = None, embedded_worker: bool = False) -> list[Check]:
    """Every check; a database that cannot be reached is one red check, not an exception."""
    try:
        f = gather(engine, tenant_id)
    except Exception as exc:  # the message can name hosts and users: it goes to the log only
        log.warning("doctor: database unreachable", exc_info=True)
        return [Check("database", Level.RED, f"unreachable: {type(exc).__name__} (details in the log)")]
    checks = [
        Check("database", Level.GREEN, f"reachable ({engine.store.dialect})"),
        judge_schema(f.revision),
        judge_queue(f.now, f.due, f.oldest_due),
        judge_workers(f.now, f.workers, f.due, embedded_worker),
        judge_capable_workers(f.now, f.workers, f.waiting, f.tenant_id),
        judge_leader(f.now, f.leader, f.schedules),
        judge_outbox(f.now, f.outbox, f.oldest_outbox),
        judge_dependencies(f.now, f.outages),
        judge_schedules(f.now, f.failing),
        judge_anchoring(f.now, f.unanchored, f.anchor_window),
        _evidence_key_check(engine, f.signed_by),
    ]
    tenancy = judge_tenancy(engine.store.dialect, f.rls_bypassed_by)
    return checks if tenancy is None else [checks[0], checks[1], tenancy, *checks[2:]]


def _evidence_key_check(engine: Engine, signed_by: str | None) -> Check:
    try:
        signer = signer_for(engine.config)
        trusted_keys(engine.config)  # a trusted key under the signing key's own id is refused
    except JobgateError as exc:
        return judge_evidence_key(None, f"{exc.field}: {exc.message}" if exc.field else exc.message, 0, signed_by)
    trusted = len(engine.config.evidence.trusted_keys)
    return judge_evidence_key(None if signer is None else signer.key_id, None, trusted, signed_by)


def worst(checks: list[Check]) -> Level:
    levels = {c.level for c in checks}
    return Level.RED if Level.RED in levels else Level.AMBER if Level.AMBER in levels else Level.GREEN
