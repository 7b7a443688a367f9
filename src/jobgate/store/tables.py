"""The schema, declared once in SQLAlchemy Core for both backends.

Instants are stored as integer microseconds since the Unix epoch (UTC): exact, cheap to
compare in the claim index, and identical on SQLite and PostgreSQL. JSON documents are
stored as canonical JSON text so a digest computed from a stored document equals the digest
computed when it was written. Every tenant-owned table carries ``tenant_id``.

The migration history in ``migrations/`` must build exactly this schema; a test diffs them.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    Float,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)

from jobgate.core.states import RunStatus

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "pk": "pk_%(table_name)s",
}
metadata = MetaData(naming_convention=NAMING)

_STATUSES = ", ".join(f"'{s.value}'" for s in RunStatus)
# A workflow run is never held (its steps' runs are): its statuses are the run statuses but HELD.
_WORKFLOW_STATUSES = ", ".join(f"'{s.value}'" for s in RunStatus if s is not RunStatus.HELD)
CLAIMABLE_SQL = "status IN ('SCHEDULED', 'RETRY_WAIT')"
HELD_SQL = "status = 'HELD'"
QUEUE_DEADLINE_SQL = f"{CLAIMABLE_SQL} AND queue_deadline_at IS NOT NULL"
LEASED_SQL = "status IN ('DISPATCHED', 'RUNNING')"

definitions = Table(
    "definitions",
    metadata,
    Column("tenant_id", String(64), primary_key=True),
    Column("job_definition_id", String(200), primary_key=True),
    Column("version", Integer, primary_key=True),
    Column("digest", String(80), nullable=False),
    Column("job_code", String(200), nullable=False),
    Column("job_class", String(64), nullable=False),
    Column("content", Text, nullable=False),
    Column("source", Text),
    Column("created_at", BigInteger, nullable=False),
    # Who applied this version, and who minted their credential (four eyes, migration 0017).
    Column("applied_by", String(200)),
    Column("applied_lineage", Text),
    UniqueConstraint("tenant_id", "job_definition_id", "digest"),
)

definition_heads = Table(
    "definition_heads",
    metadata,
    Column("tenant_id", String(64), primary_key=True),
    Column("job_definition_id", String(200), primary_key=True),
    Column("current_version", Integer, nullable=False),
    Column("status", String(16), nullable=False),
    Column("updated_at", BigInteger, nullable=False),
    CheckConstraint("status IN ('draft', 'active', 'suspended', 'retired')", name="status"),
)

config_snapshots = Table(
    "config_snapshots",
    metadata,
    Column("config_snapshot_id", String(80), primary_key=True),
    Column("tenant_id", String(64), nullable=False),
    Column("profile", String(200), nullable=False),
    Column("config_digest", String(80), nullable=False),
    Column("content", Text, nullable=False),
    Column("created_at", BigInteger, nullable=False),
)

job_runs = Table(
    "job_runs",
    metadata,
    Column("job_run_id", String(64), primary_key=True),
    Column("tenant_id", String(64), nullable=False),
    Column("idempotency_key", String(80), nullable=False, unique=True),
    Column("job_definition_id", String(200), nullable=False),
    Column("definition_version", Integer, nullable=False),
    Column("definition_digest", String(80), nullable=False),
    Column("job_class", String(64), nullable=False),
    # A slot's name: as wide as ``slot`` (migration 0032; SQLite keeps any length as declared).
    Column("trigger_id", String(200).with_variant(String(300), "postgresql"), nullable=False),
    Column("trigger_type", String(32), nullable=False),
    Column("trigger", Text, nullable=False),
    Column("scope", Text, nullable=False),
    Column("params", Text, nullable=False),
    Column("workflow_run_id", String(64)),
    Column("config_snapshot_id", String(80), nullable=False),
    Column("config_digest", String(80), nullable=False),
    Column("status", String(16), nullable=False),
    Column("attempt", Integer, nullable=False, server_default="0"),
    Column("max_attempts", Integer, nullable=False),
    Column("priority", String(16), nullable=False),
    Column("priority_rank", Integer, nullable=False),
    Column("queue", String(100), nullable=False),
    Column("retry_policy", String(200), nullable=False),
    Column("retry_policy_doc", Text),
    Column("concurrency_limit", Integer),
    Column("rate_limit_per_second", Float),
    Column("execution_timeout_us", BigInteger),
    Column("requested_by", String(200)),
    Column("created_at", BigInteger, nullable=False),
    Column("due_at", BigInteger, nullable=False),
    Column("queue_deadline_at", BigInteger),
    Column("started_at", BigInteger),
    Column("ended_at", BigInteger),
    Column("next_retry_at", BigInteger),
    Column("error_code", String(200)),
    Column("error_message", Text),
    Column("result", Text),
    Column("result_ref", Text),
    Column("lease_owner", String(200)),
    Column("lease_token", BigInteger, nullable=False, server_default="0"),
    Column("lease_expires_at", BigInteger),
    Column("stop_requested", Boolean, nullable=False, server_default="0"),
    Column("progress", Float),
    Column("progress_message", Text),
    Column("artifact_path", Text),
    Column("artifact_sha256", String(80)),
    Column("artifact_size", BigInteger),
    # Governance at the start of every attempt (migration 0017): why a HELD run waits and since
    # when, and who reviewed the run as a second person (an approved request, a requeue).
    Column("hold_reason", String(64)),
    Column("held_at", BigInteger),
    Column("reviewed_by", String(200)),
    # The schedule slot (``schedule_id@instant``, a batch window's ``@start/end``) a scheduled or
    # backfilled run is the one run of (migrations 0018, 0026). Its own unique index (with the
    # job), not the idempotency key: the key includes the configuration digest (seed §24), and a
    # slot has one run whatever the configuration did.
    Column("slot", String(300)),
    # How many transitions the run has (every writer of one adds to it), and the history chain
    # (``core.seals.history_step``) over its first ``history_extent``, kept by the writers that
    # know it (migration 0021): a worker extends it from what its claim returned and seals the
    # run at its end without reading its transitions back. A cache, never evidence: a seal's
    # history is recomputed from the transitions themselves when verified.
    Column("transition_count", Integer, nullable=False, server_default="0"),
    Column("history_hash", String(80)),
    Column("history_extent", Integer),
    # The run this one retries (migration 0024): the retry contract finds a source run's one
    # retry by it, and the lineage reads derive their edges from it alone. The same value is in
    # the sealed trigger's payload, which verification compares it with.
    Column("retry_of", String(64)),
    CheckConstraint(f"status IN ({_STATUSES})", name="status"),
    CheckConstraint("attempt >= 0 AND attempt <= max_attempts", name="attempt_bounds"),
    CheckConstraint(f"({LEASED_SQL}) = (lease_owner IS NOT NULL)", name="lease_iff_leased"),
    # The claim index: only claimable rows, in claim order. Terminal runs never touch it.
    Index(
        "ix_job_runs_claim",
        "queue",
        "priority_rank",
        "due_at",
        sqlite_where=text(CLAIMABLE_SQL),
        postgresql_where=text(CLAIMABLE_SQL),
    ),
    Index(
        "ix_job_runs_leased",
        "lease_expires_at",
        sqlite_where=text(LEASED_SQL),
        postgresql_where=text(LEASED_SQL),
    ),
    Index("ix_job_runs_tenant_created", "tenant_id", "created_at"),
    # Active runs per definition (concurrency limits): only leased rows, so status changes
    # between pending and terminal states never touch it.
    Index(
        "ix_job_runs_active_definition",
        "job_definition_id",
        sqlite_where=text(LEASED_SQL),
        postgresql_where=text(LEASED_SQL),
    ),
    Index("ix_job_runs_definition_created", "job_definition_id", "created_at"),
    # Waiting runs with a queue deadline (the rescuer's sweep for runs that waited too long):
    # without it the sweep read the whole backlog, 5.5 ms per pass behind 20,000 waiting runs.
    Index(
        "ix_job_runs_queue_deadline",
        "queue_deadline_at",
        sqlite_where=text(QUEUE_DEADLINE_SQL),
        postgresql_where=text(QUEUE_DEADLINE_SQL),
    ),
    # Held runs (the rescuer looks at them again each pass): only they are in it.
    Index("ix_job_runs_held", "held_at", sqlite_where=text(HELD_SQL), postgresql_where=text(HELD_SQL)),
    Index(
        "ix_job_runs_retry_of",
        "tenant_id",
        "retry_of",
        sqlite_where=text("retry_of IS NOT NULL"),
        postgresql_where=text("retry_of IS NOT NULL"),
    ),
    Index(
        "ux_job_runs_slot",
        "tenant_id",
        "job_definition_id",
        "slot",
        unique=True,
        sqlite_where=text("slot IS NOT NULL"),
        postgresql_where=text("slot IS NOT NULL"),
    ),
)

run_transitions = Table(
    "run_transitions",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("job_run_id", String(64), nullable=False),
    Column("tenant_id", String(64), nullable=False),
    Column("from_status", String(16)),
    Column("to_status", String(16), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("reason", String(64), nullable=False),
    Column("actor", String(200), nullable=False),
    Column("at", BigInteger, nullable=False),
    Column("detail", Text),
    Index("ix_run_transitions_run", "job_run_id", "id"),
)

dead_letters = Table(
    "dead_letters",
    metadata,
    Column("dead_letter_id", String(80), primary_key=True),
    Column("job_run_id", String(64), nullable=False),
    Column("tenant_id", String(64), nullable=False),
    Column("job_class", String(64), nullable=False),
    Column("reason", String(64), nullable=False),
    Column("last_error_code", String(200)),
    Column("attempts", Integer, nullable=False),
    Column("requires_manual_review", Boolean, nullable=False),
    Column("created_at", BigInteger, nullable=False),
    Column("resolved_at", BigInteger),
    Column("resolution", Text),
    Index("ix_dead_letters_tenant_open", "tenant_id", "resolved_at"),
    Index("ix_dead_letters_run", "job_run_id"),  # a run's letters, for its seal (migration 0019)
)

outbox = Table(
    "outbox",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("job_run_id", String(64)),
    Column("tenant_id", String(64), nullable=False),
    Column("event_type", String(100), nullable=False),
    Column("payload", Text, nullable=False),
    Column("created_at", BigInteger, nullable=False),
    Column("delivered_at", BigInteger),
    Index(
        "ix_outbox_pending",
        "id",
        sqlite_where=text("delivered_at IS NULL"),
        postgresql_where=text("delivered_at IS NULL"),
    ),
    # SQLite delivers by cursor over ids: they must never be reused, even after deletions.
    sqlite_autoincrement=True,
)

rate_limits = Table(
    "rate_limits",
    metadata,
    Column("key", String(300), primary_key=True),
    Column("tat", BigInteger, nullable=False),
)

workers = Table(
    "workers",
    metadata,
    Column("worker_id", String(200), primary_key=True),
    Column("host", String(200), nullable=False),
    Column("pid", Integer, nullable=False),
    Column("concurrency", Integer, nullable=False),
    Column("queues", Text, nullable=False),
    Column("started_at", BigInteger, nullable=False),
    Column("heartbeat_at", BigInteger, nullable=False),
    Column("stopped_at", BigInteger),
    # Run leases this worker renewed, counted in the renewing transaction (migration 0015).
    Column("lease_renewals", BigInteger, nullable=False, server_default="0"),
    # What it can execute here, by definition digest (migration 0022; runtime.capabilities).
    Column("capabilities", Text),
)

# Named, fenced, expiring locks (seed 000 §25): the outbox publisher's, and later the
# scheduler leader's and the workflow locks. ``token`` grows with every new holder.
locks = Table(
    "locks",
    metadata,
    Column("name", String(200), primary_key=True),
    Column("owner", String(200), nullable=False),
    Column("token", BigInteger, nullable=False),
    Column("acquired_at", BigInteger, nullable=False),
    Column("expires_at", BigInteger, nullable=False),
)

# How far the outbox has been delivered, where ids commit in order (SQLite: one writer at a
# time). Delivery then writes one row per batch instead of one per event.
outbox_cursors = Table(
    "outbox_cursors",
    metadata,
    Column("name", String(100), primary_key=True),
    Column("delivered_through", BigInteger, nullable=False),
    Column("updated_at", BigInteger, nullable=False),
)

# Schedules (issue 3). ``watermark`` is the instant through which every slot of the schedule
# has been decided (fired or recorded as missed): the scheduler advances it in the same
# transaction as the runs it creates, so a restart plans again from exactly there.
schedules = Table(
    "schedules",
    metadata,
    Column("tenant_id", String(64), primary_key=True),
    Column("schedule_id", String(200), primary_key=True),
    Column("job_definition_id", String(200), nullable=False),
    Column("kind", String(32), nullable=False),
    Column("timezone", String(64), nullable=False),
    Column("cron", String(200)),
    Column("every_us", BigInteger),
    Column("anchor", BigInteger, nullable=False),
    Column("params", Text, nullable=False),
    Column("misfire", String(32), nullable=False),
    Column("misfire_grace_us", BigInteger, nullable=False),
    Column("max_catchup", Integer, nullable=False),
    Column("overlap", String(32), nullable=False),
    Column("paused", Boolean, nullable=False),
    Column("event_type", String(200)),  # event schedules (migration 0003)
    Column("payload_params", Text, nullable=False, server_default="[]"),
    # Policy and alert schedules (migration 0004): the condition, and whether an episode is open.
    Column("condition", String(300)),
    Column("episode_open", Boolean, nullable=False, server_default=text("false")),
    Column("episodes", Integer, nullable=False, server_default="0"),
    # Adaptive schedules (migration 0005): the bounds a recommendation may move the interval in.
    Column("min_every_us", BigInteger),
    Column("max_every_us", BigInteger),
    # Configuration schedules (migration 0006): the profile watched, the snapshot last answered.
    Column("config_profile", String(200)),
    Column("config_digest_seen", String(80)),
    # ... and the keys of the profile it watches, a JSON list (migration 0007); empty: all.
    Column("config_watch", Text),
    Column("watermark", BigInteger, nullable=False),
    Column("source", String(32), nullable=False),
    Column("created_at", BigInteger, nullable=False),
    Column("updated_at", BigInteger, nullable=False),
    # Why a paused schedule is paused (migration 0018): ``unapproved`` resumes by itself when its
    # definition's current version is approved; anything else (an operator) only by hand.
    Column("pause_reason", String(32)),
    # A schedule whose plan or fire failed (migration 0018): failures in a row, the last error (a
    # user-facing message, never a trace), and when the scheduler tries it again (back-off).
    Column("failures", Integer, nullable=False, server_default="0"),
    Column("last_error", Text),
    Column("retry_at", BigInteger),
)

# Slots a schedule owed but did not fire (downtime, pause): recorded, never silently dropped.
schedule_misses = Table(
    "schedule_misses",
    metadata,
    Column("tenant_id", String(64), primary_key=True),
    Column("schedule_id", String(200), primary_key=True),
    Column("fire_at", BigInteger, primary_key=True),
    Column("reason", String(32), nullable=False),
    Column("recorded_at", BigInteger, nullable=False),
    Column("event_id", String(200)),  # the event a paused schedule recorded (migration 0028)
    Index(
        "ix_schedule_misses_event",
        "tenant_id",
        "schedule_id",
        "event_id",
        sqlite_where=text("event_id IS NOT NULL"),
        postgresql_where=text("event_id IS NOT NULL"),
    ),
)

# Recorded facts (policy triggers): numeric observations by name, the latest of which a policy
# schedule's condition is evaluated against.
facts = Table(
    "facts",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("tenant_id", String(64), nullable=False),
    Column("name", String(200), nullable=False),
    Column("value", Float, nullable=False),
    Column("recorded_at", BigInteger, nullable=False),
    Column("source", String(200), nullable=False),
    Index("ix_facts_name", "tenant_id", "name", "id"),
)

# Every change a recommender made (or tried to make) to an adaptive schedule (seed 000 §52).
schedule_changes = Table(
    "schedule_changes",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("tenant_id", String(64), nullable=False),
    Column("schedule_id", String(200), nullable=False),
    Column("changed_at", BigInteger, nullable=False),
    Column("field", String(64), nullable=False),
    Column("old_value", Text),
    Column("new_value", Text, nullable=False),
    Column("accepted", Boolean, nullable=False),
    Column("source", String(200), nullable=False),
    Column("reason", Text),
    Index("ix_schedule_changes_schedule", "tenant_id", "schedule_id", "id"),
)

# One row: a value the triggers of migration 0033 set to a new random number with every change to
# definitions, their heads, approvals and safe-mode periods (SQLite; ``store.sql.governance_cache``).
governance_epoch = Table(
    "governance_epoch",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("epoch", BigInteger, nullable=False),
    CheckConstraint("id = 1", name="one_row"),
)

# Safe mode (seed 000 §39-40), per tenant: one row per activation, closed by its deactivation.
# The open row, if any, is the current state; the rows together are its history.
safe_mode_periods = Table(
    "safe_mode_periods",
    metadata,
    Column("tenant_id", String(64), primary_key=True),
    Column("activation", Integer, primary_key=True),
    Column("activated_at", BigInteger, nullable=False),
    Column("activated_by", String(200), nullable=False),
    Column("reason", Text, nullable=False),
    Column("deactivated_at", BigInteger),
    Column("deactivated_by", String(200)),
    Column("deactivation_reason", Text),
    Column("actions", Text),  # JSON: the safe-mode actions in force for this period (migration 0010)
)

# API tokens (migration 0009): only the SHA-256 of each secret; the id is public.
api_tokens = Table(
    "api_tokens",
    metadata,
    Column("token_id", String(16), primary_key=True),
    Column("tenant_id", String(64), nullable=False),
    Column("role", String(16), nullable=False),
    Column("jobs", Text),  # JSON list of definitions the token is limited to; NULL: all
    Column("label", String(200), nullable=False),
    Column("secret_hash", String(64), nullable=False),
    Column("created_by", String(200), nullable=False),
    Column("created_at", BigInteger, nullable=False),
    Column("expires_at", BigInteger),
    Column("revoked_at", BigInteger),
    Column("revoked_by", String(200)),
    # The person the token belongs to (NULL: the token is a principal of its own, as before
    # migration 0017), and the principals whose tokens minted it, nearest first (JSON list).
    Column("principal", String(200)),
    Column("minted_by", Text),
    Index("ix_api_tokens_tenant", "tenant_id", "created_at"),
)

# Console sessions signed out before their expiry (migration 0027): the cookie is stateless, so
# a session ends early only by being named here; a row is kept until the session would expire.
ended_sessions = Table(
    "ended_sessions",
    metadata,
    Column("session_id", String(64), primary_key=True),  # SHA-256 (hex) of the session's own secret
    Column("tenant_id", String(64), nullable=False),
    Column("ended_at", BigInteger, nullable=False),
    Column("expires_at", BigInteger, nullable=False),
    Index("ix_ended_sessions_expiry", "expires_at"),
)

# Runs retention deleted (migration 0029): what makes a trigger's run its own, kept after the row
# is gone, so a retired run's idempotency key or slot never makes a second run ("one run per
# slot, ever"), and a period's evidence can say which of its runs were retired.
retired_runs = Table(
    "retired_runs",
    metadata,
    Column("job_run_id", String(64), primary_key=True),
    Column("tenant_id", String(64), nullable=False),
    Column("job_definition_id", String(200), nullable=False),
    Column("idempotency_key", String(80), nullable=False),
    Column("slot", String(300)),
    Column("status", String(16), nullable=False),
    Column("created_at", BigInteger, nullable=False),
    Column("ended_at", BigInteger),
    Column("retired_at", BigInteger, nullable=False),
    Index("ix_retired_runs_key", "idempotency_key"),
    Index(
        "ix_retired_runs_slot",
        "tenant_id",
        "job_definition_id",
        "slot",
        sqlite_where=text("slot IS NOT NULL"),
        postgresql_where=text("slot IS NOT NULL"),
    ),
    Index("ix_retired_runs_created", "tenant_id", "created_at"),
)

# Governance and evidence (migration 0010) ------------------------------------------------

audit_log = Table(
    "audit_log",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("tenant_id", String(64), nullable=False),
    Column("seq", BigInteger, nullable=False),  # position in the tenant's chain, from 1
    Column("at", BigInteger, nullable=False),
    Column("actor", String(200), nullable=False),
    Column("action", String(100), nullable=False),
    Column("target_type", String(64), nullable=False),
    Column("target_id", String(200), nullable=False),
    Column("reason", Text),
    Column("payload", Text, nullable=False),  # canonical JSON
    Column("prev_hash", String(80), nullable=False),
    Column("entry_hash", String(80), nullable=False),
    UniqueConstraint("tenant_id", "seq", name="uq_audit_log_tenant_seq"),
    Index("ix_audit_log_tenant_at", "tenant_id", "at"),
    Index("ix_audit_log_target", "tenant_id", "target_type", "target_id"),
    Index("ix_audit_log_action", "tenant_id", "action", "seq"),  # the last seal batch (migration 0019)
)

# The head of each tenant's chain: appending locks this row, so concurrent appends queue.
audit_heads = Table(
    "audit_heads",
    metadata,
    Column("tenant_id", String(64), primary_key=True),
    Column("seq", BigInteger, nullable=False),
    Column("entry_hash", String(80), nullable=False),
)

# Every approval ever given, never rewritten except to revoke it (migration 0017): approving a
# digest again adds a row, so the history keeps the first approver. A digest is approved while
# one of its rows is not revoked; the newest such row names the code identity it binds.
definition_approvals = Table(
    "definition_approvals",
    metadata,
    Column("approval_id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("tenant_id", String(64), nullable=False),
    Column("job_definition_id", String(200), nullable=False),
    Column("digest", String(80), nullable=False),
    Column("version", Integer, nullable=False),
    Column("code_digest", String(80)),
    Column("code_identity", Text),  # JSON: the named parts the code digest covers
    Column("approved_by", String(200), nullable=False),
    Column("approved_at", BigInteger, nullable=False),
    Column("note", Text),
    Column("revoked_at", BigInteger),
    Column("revoked_by", String(200)),
    Index("ix_definition_approvals_digest", "tenant_id", "job_definition_id", "digest", "approval_id"),
)

run_requests = Table(
    "run_requests",
    metadata,
    Column("request_id", String(64), primary_key=True),
    Column("tenant_id", String(64), nullable=False),
    Column("job_definition_id", String(200), nullable=False),
    Column("params", Text, nullable=False),
    Column("title", String(200), nullable=False),
    Column("reason", Text, nullable=False),
    Column("requested_by", String(200), nullable=False),
    Column("status", String(16), nullable=False),
    Column("created_at", BigInteger, nullable=False),
    Column("tested_at", BigInteger),
    Column("tested_by", String(200)),
    Column("verdict", Text),  # the last dry run's verdict, JSON
    Column("decided_at", BigInteger),
    Column("decided_by", String(200)),
    Column("decision_note", Text),
    Column("job_run_id", String(64)),
    # The version the proposal named, then the one its last dry run saw: approval runs exactly
    # it (migration 0017). And who minted the proposer's credential (four eyes).
    Column("digest", String(80)),
    Column("version", Integer),
    Column("requester_lineage", Text),
    CheckConstraint("status IN ('pending', 'approved', 'rejected')", name="status"),
    Index("ix_run_requests_tenant", "tenant_id", "status", "created_at"),
)

# Trust gates (migration 0011): which runs hold a licensed slot, and the row that serialises
# taking one (locked by every creation of a licensed run, so the licence's concurrency limit
# holds across the cluster).
licence_slots = Table(
    "licence_slots",
    metadata,
    Column("job_run_id", String(64), primary_key=True),
    Column("tenant_id", String(64), nullable=False),
    Column("created_at", BigInteger, nullable=False),
)

gate_counters = Table(
    "gate_counters",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("updated_at", BigInteger, nullable=False),
)

# Anchoring (migration 0012): each tenant's Merkle roots over its audit entries, chained.
anchors = Table(
    "anchors",
    metadata,
    Column("tenant_id", String(64), primary_key=True),
    Column("anchor_seq", BigInteger, primary_key=True),  # 1, 2, ... per tenant
    Column("mode", String(16), nullable=False),  # batch | direct
    Column("window_start", BigInteger, nullable=False),
    Column("window_end", BigInteger, nullable=False),
    Column("first_seq", BigInteger, nullable=False),  # the audit entries covered: [first_seq, last_seq]
    Column("last_seq", BigInteger, nullable=False),
    Column("leaf_count", Integer, nullable=False),
    Column("root", String(80), nullable=False),
    Column("prev_chain", String(80), nullable=False),
    Column("chain", String(80), nullable=False),  # SHA-256(prev_chain | root)
    Column("created_at", BigInteger, nullable=False),
    Column("sink", String(200), nullable=False),
    # The evidence key's signature of the anchor (migration 0019), NULL when made without a key.
    Column("key_id", String(64)),
    Column("signature", Text),
    # The RFC 3161 token a timestamping authority gave the anchor (migration 0020), base64 DER.
    Column("timestamp_token", Text),
    # The end of a tenant's last batch window, read at every audit append (migration 0031).
    Index("ix_anchors_mode_window", "tenant_id", "mode", "window_end"),
)

# Seals (migration 0019, ``core.seals``): the hash of every record auditors read, written with the
# change that made it. Rows are never updated: the ``records.sealed`` audit entries chain them as
# id ranges (``store.sql.seals``).
record_seals = Table(
    "record_seals",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("tenant_id", String(64), nullable=False),
    Column("kind", String(32), nullable=False),
    Column("record_id", String(300), nullable=False),
    Column("event", String(16), nullable=False),  # sealed | retired | deleted
    Column("extent", Integer),  # runs and workflows: how many transitions the seal covers
    Column("identity", String(80), nullable=False),
    Column("outcome", String(80)),
    Column("history", String(80)),
    Column("seal", String(80), nullable=False),
    Column("content", Text),  # the value lists as sealed: names the column and both values of a change
    Column("sealed_at", BigInteger, nullable=False),
    Index("ix_record_seals_record", "tenant_id", "kind", "record_id", "id"),
    Index("ix_record_seals_tenant", "tenant_id", "id"),
)

# The values many seals kept, packed (migration 0025, ``core.seals.pack_contents``): a seal row
# whose ``content`` is ``{"packed": n}`` finds them in row ``n``. Diagnosis only.
seal_values = Table(
    "seal_values",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("tenant_id", String(64), nullable=False),
    Column("packed", LargeBinary, nullable=False),
)

# Workflows (migration 0013): one row per workflow run, one per step of it, and every state
# change of either, in order (the workflow state sequence replay hashes, seed 000 §14).
_ACTIVE_WORKFLOW_SQL = "status IN ('CREATED', 'SCHEDULED', 'DISPATCHED', 'RUNNING')"
_OPEN_STEP_SQL = "status IN ('PENDING', 'RUNNING', 'STOPPING', 'COMPENSATING')"

workflow_runs = Table(
    "workflow_runs",
    metadata,
    Column("workflow_run_id", String(64), primary_key=True),
    Column("tenant_id", String(64), nullable=False),
    Column("idempotency_key", String(80), nullable=False, unique=True),
    Column("job_definition_id", String(200), nullable=False),
    Column("definition_version", Integer, nullable=False),
    Column("definition_digest", String(80), nullable=False),
    Column("job_class", String(64), nullable=False),
    Column("status", String(16), nullable=False),
    Column("phase", String(16), nullable=False),  # forward | compensating
    Column("params", Text, nullable=False),
    Column("scope", Text, nullable=False),
    Column("trigger", Text, nullable=False),
    Column("config_snapshot_id", String(80), nullable=False),
    Column("config_digest", String(80), nullable=False),
    Column("requested_by", String(200)),
    Column("created_at", BigInteger, nullable=False),
    Column("started_at", BigInteger),
    Column("ended_at", BigInteger),
    Column("error_code", String(200)),
    Column("error_message", Text),
    Column("cancel_requested", Boolean, nullable=False, server_default="0"),
    Column("version", Integer, nullable=False, server_default="0"),  # compare-and-set on every advance
    CheckConstraint(f"status IN ({_WORKFLOW_STATUSES})", name="status"),
    Index(
        "ix_workflow_runs_active",
        "created_at",
        sqlite_where=text(_ACTIVE_WORKFLOW_SQL),
        postgresql_where=text(_ACTIVE_WORKFLOW_SQL),
    ),
    Index("ix_workflow_runs_tenant_created", "tenant_id", "created_at"),
)

workflow_steps = Table(
    "workflow_steps",
    metadata,
    Column("workflow_run_id", String(64), primary_key=True),
    Column("step_id", String(100), primary_key=True),
    Column("tenant_id", String(64), nullable=False),
    Column("position", Integer, nullable=False),
    Column("status", String(24), nullable=False),
    Column("job_run_id", String(64)),
    Column("compensation_run_id", String(64)),
    Column("outputs", Text),
    Column("completed_order", Integer),  # compensation runs in reverse of this
    Column("started_at", BigInteger),
    Column("ended_at", BigInteger),
    Column("error_code", String(200)),
    Index(
        "ix_workflow_steps_open",
        "workflow_run_id",
        sqlite_where=text(_OPEN_STEP_SQL),
        postgresql_where=text(_OPEN_STEP_SQL),
    ),
    Index("ix_workflow_steps_run", "job_run_id"),
)

workflow_transitions = Table(
    "workflow_transitions",
    metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("workflow_run_id", String(64), nullable=False),
    Column("tenant_id", String(64), nullable=False),
    Column("seq", Integer, nullable=False),
    Column("step_id", String(100)),  # None: the workflow's own status
    Column("from_status", String(24)),
    Column("to_status", String(24), nullable=False),
    Column("reason", String(64), nullable=False),
    Column("actor", String(200), nullable=False),
    Column("at", BigInteger, nullable=False),
    Column("detail", Text),
    UniqueConstraint("workflow_run_id", "seq"),
)

# SLA monitoring (migration 0014): each reminder and breach once per subject, kind and phase.
sla_breaches = Table(
    "sla_breaches",
    metadata,
    Column("sla_breach_id", String(64), primary_key=True),
    Column("tenant_id", String(64), nullable=False),
    Column("subject_kind", String(16), nullable=False),  # run | workflow
    Column("subject_id", String(64), nullable=False),
    Column("job_class", String(64), nullable=False),
    Column("job_definition_id", String(200), nullable=False),  # a token limited to definitions sees its own
    Column("eco_number", String(200)),  # seed §23, from the subject's scope or params
    Column("kind", String(32), nullable=False),  # execution_timeout, queue_timeout, sla_deadline, ...
    Column("phase", String(16), nullable=False),  # reminder | breach
    Column("sla_policy", String(200), nullable=False),
    Column("deadline", BigInteger, nullable=False),
    Column("detected_at", BigInteger, nullable=False),
    Column("severity", String(16), nullable=False),
    Column("requires_escalation", Boolean, nullable=False),
    Column("escalated", Boolean, nullable=False, server_default="0"),
    UniqueConstraint("tenant_id", "subject_id", "kind", "phase"),
    Index("ix_sla_breaches_tenant_detected", "tenant_id", "detected_at"),
)

# Telemetry rollups (migration 0015): one publication per tenant and period, never two.
telemetry_publications = Table(
    "telemetry_publications",
    metadata,
    Column("tenant_id", String(64), primary_key=True),
    Column("period", String(32), primary_key=True),
    Column("period_start", BigInteger, nullable=False),
    Column("period_end", BigInteger, nullable=False),
    Column("figures", Text, nullable=False),  # canonical JSON, the seed §51 shape
    Column("digest", String(80), nullable=False),
    Column("published_at", BigInteger, nullable=False),
    Column("sink", String(200), nullable=False),
    Column("job_run_id", String(64)),
)

# The pack registry (migration 0023, seed 001 §6): versioned packs by (tenant, id, version), and
# their definitions as blobs keyed by SHA-256 (``core.packs``); both only ever inserted.
packs = Table(
    "packs",
    metadata,
    Column("tenant_id", String(64), primary_key=True),
    Column("pack_id", String(100), primary_key=True),
    Column("version", String(64), primary_key=True),
    Column("digest", String(80), nullable=False),
    Column("manifest", Text, nullable=False),  # canonical JSON, what the digest covers
    Column("origin", String(16), nullable=False),  # publish | import
    Column("created_at", BigInteger, nullable=False),
    Column("created_by", String(200), nullable=False),
)

pack_blobs = Table(
    "pack_blobs",
    metadata,
    Column("tenant_id", String(64), primary_key=True),
    Column("digest", String(80), primary_key=True),
    Column("content", Text, nullable=False),
    Column("created_at", BigInteger, nullable=False),
)
