"""Seed 004 scenario files: an ``orchestrator:`` header followed by a body a runner executes.

A scenario is a text file whose top-level ``orchestrator`` mapping declares its name, runner,
permissions and params; the whole file, header included, is the template the runner gets
rendered into ``{{tmpfile}}`` (a runner that does not know the header ignores it, as seed
004 says). It maps onto an ordinary definition document so every later stage (approval,
store, worker) sees one shape:

    job_definition_id = job_code = canonical_name = orchestrator.name
    job_class         = orchestrator.job_class, default MAINTENANCE_JOB
    trigger_type      = manual, also_triggered_by = [cron, event] (its schedules and pub/sub
                        events are attached separately, as in seed 004)
    runner            = orchestrator.runner, else the configuration's ``default_runner``
    body              = the file's raw text

Because ``body`` is the raw text, the digest covers every byte of the file, comments
included. For the same reason a header has no ``status``: status is lifecycle, kept out of
digests, and a scenario's text is all digest; a loaded scenario is active. The runner
actually used is written into the content too, so changing ``default_runner`` changes the
digest and needs a new approval: silently reassigning a scenario to another runner must
invalidate its approval (seed 004, "Scenario approval").

The body need not be YAML. When the file starts with the header, only the header is
parsed: it ends at the first line at column 0 after which the text before it parses as
a mapping with the single key ``orchestrator``. A Python script can therefore be a scenario
by writing its header in YAML flow style, which is also a valid (inert) Python statement;
see ``demo/definitions/demo-report.yaml``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jobgate.core.errors import ValidationError
from jobgate.core.models import JobClass
from jobgate.definitions.schema import LoadedDefinition, parse_definition
from jobgate.documents import Reader, join, parse_yaml

if TYPE_CHECKING:  # only for annotations: jobgate.config imports this package's documents module
    from jobgate.config import JobgateConfig

HEADER_KEY = "orchestrator"
HEADER_FIELDS = (
    "name",
    "description",
    "runner",
    "permissions",
    "params",
    "job_class",
    "priority",
    "retry_policy",
    "timeout_policy",
    "sla_policy",
    "config_profile",
    "queue",
    "tenant_id",
    "concurrency_limit",
    "rate_limit_per_second",
    "audit_required",
    "dal_anchor_required",
    "version_note",
    "dependencies",
    "also_triggered_by",
)
# What starts a seed 004 scenario besides a manual run: its cron entries (the schedule seed
# file) and pub/sub events. Written into its content, so its approval covers it; a header
# naming ``also_triggered_by`` (``[]``: manual runs and requests only) replaces it.
SCENARIO_TRIGGERS = ("cron", "event")
DEFAULT_SCENARIO_CLASS = JobClass.MAINTENANCE_JOB
_FROM_NAME = ("job_definition_id", "job_code", "canonical_name")


def starts_with_header(text: str) -> bool:
    """True when the first significant line (not blank, a comment or ``---``) opens the header."""
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or stripped == "---" or stripped.startswith("%"):
            continue
        return line.startswith(f"{HEADER_KEY}:")
    return False


def split_header(text: str, source: str) -> Any:
    """Parse only the leading ``orchestrator:`` header and return its value.

    Candidate ends are the starts of lines at column 0 (not blank, not comments) and the end
    of the text; the first prefix that parses as ``{orchestrator: ...}`` wins. If none does,
    the error of the first candidate is raised: for a block-style header that is the line
    where the header is malformed.
    """
    lines = text.splitlines(keepends=True)
    offsets, position, opened = [], 0, False
    for line in lines:
        significant = line[:1] not in ("", " ", "\t", "\n", "\r", "#")
        if significant and opened:
            offsets.append(position)
        if significant and line.startswith(f"{HEADER_KEY}:"):
            opened = True
        position += len(line)
    offsets.append(len(text))
    first_error: ValidationError | None = None
    for end in offsets:
        try:
            value = parse_yaml(text[:end], source=source)
        except ValidationError as exc:
            first_error = first_error or exc
            continue
        if isinstance(value, dict) and list(value) == [HEADER_KEY]:
            return value[HEADER_KEY]
    assert first_error is not None  # the full text is the last candidate and did not parse
    raise first_error


def parse_scenario(text: str, header: Any, source: str, config: JobgateConfig) -> LoadedDefinition:
    """Map a scenario's header and raw text onto a definition and validate it.

    Errors name the header field the author wrote (``orchestrator.params[0].pattern``), not
    the definition field it became.
    """
    r = Reader(source)
    head = r.mapping(header, HEADER_KEY)
    r.only_keys(head, HEADER_KEY, HEADER_FIELDS)
    document: dict[str, Any] = {key: head.get("name") for key in _FROM_NAME}
    document["job_class"] = head.get("job_class", DEFAULT_SCENARIO_CLASS.value)
    document["trigger_type"] = "manual"
    runner = head.get("runner", config.default_runner)
    if runner is None:
        r.fail(join(HEADER_KEY, "runner"), "required: the configuration names no default_runner")
    document["runner"] = runner
    document["also_triggered_by"] = list(SCENARIO_TRIGGERS)
    for key in HEADER_FIELDS:
        if key not in ("name", "runner", "job_class") and key in head:
            document[key] = head[key]
    if not document["also_triggered_by"]:
        del document["also_triggered_by"]  # manual only: the same content as a definition without it
    document["body"] = text
    try:
        return parse_definition(document, source, config)
    except ValidationError as exc:
        raise ValidationError(exc.message, field=_header_field(exc.field), source=source) from None


def _header_field(field: str | None) -> str | None:
    """``params[0].pattern`` -> ``orchestrator.params[0].pattern``; ``job_code`` -> ``orchestrator.name``."""
    if field is None or field == "body":
        return field
    cut = min((i for i in (field.find("."), field.find("[")) if i >= 0), default=len(field))
    head, rest = field[:cut], field[cut:]
    if head in _FROM_NAME:
        head = "name"
    return f"{HEADER_KEY}.{head}{rest}" if head in HEADER_FIELDS else field
