"""The fields a job definition document may have: the seed's (seed 000 §12) and jobgate's.

Kept apart from the schema's rules (``jobgate.definitions.schema``) so that ``@jobgate.job``
can name an unknown field at import time without loading configuration and registries."""

SEED_FIELDS = (
    "job_definition_id",
    "job_code",
    "job_class",
    "canonical_name",
    "description",
    "trigger_type",
    "schedule_expression",
    "target_engine_meid",
    "target_engine_cmi",
    "workflow_steps",
    "priority",
    "retry_policy",
    "timeout_policy",
    "sla_policy",
    "config_profile",
    "idempotency_policy",
    "dal_anchor_required",
    "audit_required",
    "status",
)
JOBGATE_FIELDS = (
    "handler",
    "runner",
    "body",
    "params",
    "permissions",
    "queue",
    "tenant_id",
    "concurrency_limit",
    "rate_limit_per_second",
    "version_note",
    "signature",
    "workflow",
    "dependencies",
    "code",
    "schedule_timezone",
    "schedule_misfire",
    "also_triggered_by",
)
DEFINITION_FIELDS = SEED_FIELDS + JOBGATE_FIELDS
