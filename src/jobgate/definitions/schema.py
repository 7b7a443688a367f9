"""The job definition document (seed 000 §12 plus jobgate's executor fields) and its rules.

``parse_definition`` turns one parsed document into a ``LoadedDefinition`` or raises a
``ValidationError`` naming the file, the dotted field and the rule. It is pure: the only
inputs are the document, its source name and the configuration the names are resolved in.

The digest is computed over the document *as written* (canonical JSON, ``status`` removed),
not over a copy with defaults filled in: what an admin approves is exactly what the author
wrote, and a later change of a default in code cannot silently change the digest of every
definition on disk. ``status`` is lifecycle (suspending is not a content change), so it is
kept outside the digest. What names mean on this host (which command a runner is, what a
policy's delays are) lives in configuration and is resolved here, not copied into content.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from jobgate.core.canonical import canonical_json, digest
from jobgate.core.classes import JobClassSpec, is_builtin, job_class_name, known_classes
from jobgate.core.definition_fields import DEFINITION_FIELDS
from jobgate.core.errors import ValidationError
from jobgate.core.idempotency import IDEMPOTENCY_POLICIES
from jobgate.core.models import (
    DEFAULT_QUEUE,
    DEFAULT_TENANT,
    DefinitionStatus,
    ExecutorSpec,
    JobDefinition,
    ParamSpec,
    Priority,
    TriggerType,
)
from jobgate.core.params import (
    PARAM_TYPES,
    RESERVED,
    ParamValueError,
    canonical,
    check_pattern,
    param_value,
    placeholders,
)
from jobgate.core.ratelimit import check_rate
from jobgate.documents import (
    HANDLER_PATTERN,
    HANDLER_RULE,
    Reader,
    check_json_value,
    join,
    kind_of,
)
from jobgate.registry import RunnerSpec
from jobgate.scheduling import cron
from jobgate.scheduling.intervals import interval_seconds
from jobgate.scheduling.model import zone_problem

if TYPE_CHECKING:  # only for annotations: jobgate.config imports this package's documents module
    from jobgate.config import JobgateConfig

EXECUTOR_FIELDS = ("target_engine_meid", "handler", "runner", "workflow")
# A workflow definition fired as a job (cron, event, manual) runs this: it starts the workflow run.
WORKFLOW_STARTER = "jobgate.workflows.starter:start_workflow_job"
PARAM_FIELDS = ("name", "required", "pattern", "default", "description", "type", "choices", "minimum", "maximum")

DEFAULT_RETRY_POLICY = "no_retry_v1"
DEFAULT_CONFIG_PROFILE = "default"
SCHEDULED_TRIGGERS = frozenset({TriggerType.CRON, TriggerType.INTERVAL, TriggerType.BATCH_WINDOW})

PARAM_NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CRON_FIELD = re.compile(r"[0-9A-Za-z*/,?#-]+")
_RESERVED_LIST = ", ".join(sorted(RESERVED))
_INTERVAL_RULE = (
    "must be a whole number of seconds, optionally with unit s, m, h or d, optionally after 'every:' "
    "(e.g. 900, 15m or every: 15m)"
)
MISFIRE_CHOICES = ("fire_once", "fire_all", "skip")
_CRON_RULE = "must be a 5-field cron expression (minute hour day-of-month month day-of-week)"


@dataclass(frozen=True)
class LoadedDefinition:
    """A validated definition read from ``source``, not yet stored.

    ``definition.version`` is 0 ("not stored yet"): the store assigns versions, since the same
    digest loaded twice is the same version. ``definition.content`` is the canonical document
    the digest covers (the body template included, under ``body``).
    """

    definition: JobDefinition
    body_template: str | None
    status: DefinitionStatus
    source: str

    @property
    def job_definition_id(self) -> str:
        return self.definition.job_definition_id

    @property
    def digest(self) -> str:
        return self.definition.digest

    @property
    def permissions(self) -> tuple[str, ...]:
        """Capabilities a trust gate must grant before a run (seed 004 ``permissions``)."""
        return tuple(self.definition.content.get("permissions") or ())

    @property
    def workflow_steps(self) -> tuple[str, ...]:
        return tuple(self.definition.content.get("workflow_steps") or ())

    @property
    def schedule_expression(self) -> str | None:
        value = self.definition.content.get("schedule_expression")
        return value if isinstance(value, str) else None


def is_cron_shaped(expression: str) -> bool:
    """Five fields of cron characters; the cron evaluator gives the final word on ranges."""
    fields = expression.split()
    return len(fields) == 5 and all(_CRON_FIELD.fullmatch(f) for f in fields)


_CODE_ENTRY = re.compile(r"(package|distribution):[A-Za-z0-9_.\-]+|[^:\x00-\x1f]+")


def _code_list(r: Reader, value: Any) -> None:
    """``code:``: packages (``package:NAME``), installed distributions (``distribution:NAME``) or
    paths (a file or folder; relative to the configuration's folder) whose files the approval binds."""
    entries = r.strings(value, "code", unique=True)
    if not entries:
        r.fail("code", "name at least one package, distribution or path (or leave code out)")
    for i, entry in enumerate(entries):
        if not _CODE_ENTRY.fullmatch(entry):
            r.fail(join("code", i), "package:NAME, distribution:NAME or a path")


def parse_definition(document: Any, source: str, config: JobgateConfig) -> LoadedDefinition:
    """Validate one definition document against ``config`` and build its ``LoadedDefinition``."""
    r = Reader(source)
    if not isinstance(document, dict):
        r.fail(None, f"a definition must be a mapping of fields, not {kind_of(document)}")
    if "orchestrator" in document:
        r.fail("orchestrator", "a scenario header is only read from a scenario file's text (its digest)")
    r.only_keys(document, "", DEFINITION_FIELDS)
    check_json_value(document, field="", source=source, error=ValidationError)
    doc: dict[str, Any] = {k: v for k, v in document.items() if v is not None}

    if "job_definition_id" not in doc:
        r.fail("job_definition_id", "required: a stable id (e.g. TGJOBDEF-REPLAY-SAMPLING-001)")
    job_id = r.name(doc["job_definition_id"], "job_definition_id")
    job_code = r.string(doc["job_code"], "job_code") if "job_code" in doc else job_id
    canonical_name = job_code
    if "canonical_name" in doc:
        canonical_name = r.string(doc["canonical_name"], "canonical_name")
    if "job_class" not in doc:
        r.fail("job_class", f"required ({known_classes(config.job_classes)})")
    job_class = job_class_name(r.string(doc["job_class"], "job_class"))
    class_spec = config.job_classes.get(job_class)  # declared in jobgate.yaml (jobgate.core.classes)
    if class_spec is None and not is_builtin(job_class):
        r.fail("job_class", f"unknown job class {job_class!r} ({known_classes(config.job_classes)})")
    class_priority = (None if class_spec is None else class_spec.default_priority) or Priority.NORMAL
    trigger_type = r.choice(doc.get("trigger_type", TriggerType.MANUAL.value), "trigger_type", TriggerType)
    _check_schedule(r, doc, trigger_type)
    also_triggered_by = _also_triggered_by(r, doc.get("also_triggered_by", []), trigger_type)
    priority = r.choice(doc.get("priority", class_priority.value), "priority", Priority)
    status = r.choice(doc.get("status", DefinitionStatus.ACTIVE.value), "status", DefinitionStatus)
    retry_policy = r.known(
        doc.get("retry_policy", DEFAULT_RETRY_POLICY), "retry_policy", "retry policy", config.retry_policies
    )
    timeout_policy = None
    if "timeout_policy" in doc:
        timeout_policy = r.known(doc["timeout_policy"], "timeout_policy", "timeout policy", config.timeout_policies)
    sla_policy = None
    if "sla_policy" in doc:
        sla_policy = r.known(doc["sla_policy"], "sla_policy", "SLA policy", config.sla_policies)
    profile = r.known(
        doc.get("config_profile", DEFAULT_CONFIG_PROFILE), "config_profile", "config profile", config.profiles
    )
    for key in ("description", "version_note"):
        if key in doc:
            r.text(doc[key], key)
    idempotency_policy = r.string(doc.get("idempotency_policy", "trigger"), "idempotency_policy")
    if idempotency_policy not in IDEMPOTENCY_POLICIES:
        r.fail("idempotency_policy", f"one of: {', '.join(IDEMPOTENCY_POLICIES)}")
    if "workflow_steps" in doc:
        r.strings(doc["workflow_steps"], "workflow_steps")
    if "dependencies" in doc:  # checks configured on this host: runs wait while one is down
        from jobgate.health.rules import check_declared  # here: jobgate.health imports this package

        check_declared(r, doc["dependencies"], config)
    if "permissions" in doc:
        r.strings(doc["permissions"], "permissions", unique=True)
    if "code" in doc:  # what the approval's code digest covers (jobgate.governance.code)
        _code_list(r, doc["code"])
    flags = {key: r.boolean(doc.get(key, False), key) for key in ("audit_required", "dal_anchor_required")}
    if class_spec is not None and class_spec.audit_material:  # its runs are audit-material, whatever it says
        if "audit_required" in doc and not flags["audit_required"]:
            rule = "its runs are always audited: leave audit_required out or set it to true"
            r.fail("audit_required", f"{job_class} is an audit-material class (jobgate.yaml job_classes): {rule}")
        flags["audit_required"] = True
    queue = r.name(doc.get("queue", DEFAULT_QUEUE), "queue")
    tenant_id = r.name(doc.get("tenant_id", DEFAULT_TENANT), "tenant_id")
    concurrency_limit = None
    if "concurrency_limit" in doc:
        concurrency_limit = r.integer(doc["concurrency_limit"], "concurrency_limit", minimum=1, maximum=10**6)
    rate_limit = None
    if "rate_limit_per_second" in doc:
        rate_limit = r.number(doc["rate_limit_per_second"], "rate_limit_per_second")
        if (problem := check_rate(rate_limit)) is not None:
            r.fail("rate_limit_per_second", problem)

    params = _params(r, doc.get("params", []))
    executor, runner, meid, cmi = _executor(r, doc, config)
    body = r.text(doc["body"], "body") if "body" in doc else None
    _check_templates(r, params, body, executor, runner)

    content: dict[str, Any] = json.loads(canonical_json({k: v for k, v in document.items() if k != "status"}))
    content_digest_ = content_digest(content)
    if config.signing.require_signed_definitions:
        from jobgate.governance.signing import verify

        try:
            verify(content_digest_, content.get("signature"), config.signing.roots(), what=f"definition {job_id}")
        except ValidationError as exc:
            r.fail("signature", exc.message)
    definition = JobDefinition(
        job_definition_id=job_id,
        version=0,
        digest=content_digest_,
        content=content,
        job_code=job_code,
        job_class=job_class,
        canonical_name=canonical_name,
        trigger_type=trigger_type,
        also_triggered_by=also_triggered_by,
        priority=priority,
        retry_policy=retry_policy,
        timeout_policy=timeout_policy,
        sla_policy=sla_policy,
        config_profile=profile,
        executor=executor,
        params=params,
        queue=queue,
        tenant_id=tenant_id,
        status=status,
        concurrency_limit=concurrency_limit,
        rate_limit_per_second=rate_limit,
        audit_required=flags["audit_required"],
        dal_anchor_required=flags["dal_anchor_required"],
        idempotency_policy=idempotency_policy,
        target_engine_meid=meid,
        target_engine_cmi=cmi,
        source=source,
        class_spec=class_spec,
    )
    return LoadedDefinition(definition, body, status, source)


def recorded_definition(
    content: Mapping[str, Any], stored_digest: str, executor: ExecutorSpec, job_class: JobClassSpec | None = None
) -> JobDefinition:
    """A stored version as its record says, read without today's registries: an audit replay
    rebuilds a run from this, so a policy, profile, runner or target since removed from
    ``jobgate.yaml`` cannot make an honest record look tampered (seed 000 §53: no live condition).

    The content must still match its digest (else ``ValidationError`` on ``digest``); what it
    executes comes from the run's binding (``executor``), not from today's target registry.
    Version and status are the caller's (``_with_version``-style); the fields are the ones the
    content was validated with when it was stored. A class declared in jobgate.yaml is read
    from the run's record too (``job_class``, what its creation bound): its default priority and
    audit materiality apply as they did then, even after the class left the configuration."""
    doc = dict(content)
    if content_digest(doc) != stored_digest:
        raise ValidationError(f"stored content no longer matches its digest {stored_digest}", field="digest")
    job_id = str(doc.get("job_definition_id"))
    class_name = job_class_name(str(doc.get("job_class")))
    spec = job_class if job_class is not None and job_class.name == class_name else None
    if spec is None and not is_builtin(class_name):
        message = f"job class {class_name!r} is neither built in nor declared in the run's record"
        raise ValidationError(message, field="job_class")
    class_priority = (None if spec is None else spec.default_priority) or Priority.NORMAL
    try:
        return JobDefinition(
            job_definition_id=job_id,
            version=0,
            digest=stored_digest,
            content=doc,
            job_code=str(doc.get("job_code", job_id)),
            job_class=class_name,
            canonical_name=str(doc.get("canonical_name", doc.get("job_code", job_id))),
            trigger_type=TriggerType(doc.get("trigger_type", TriggerType.MANUAL.value)),
            also_triggered_by=tuple(TriggerType(t) for t in doc.get("also_triggered_by") or ()),
            priority=Priority(doc.get("priority", class_priority.value)),
            retry_policy=str(doc.get("retry_policy", DEFAULT_RETRY_POLICY)),
            timeout_policy=doc.get("timeout_policy"),
            sla_policy=doc.get("sla_policy"),
            config_profile=str(doc.get("config_profile", DEFAULT_CONFIG_PROFILE)),
            executor=executor,
            queue=str(doc.get("queue", DEFAULT_QUEUE)),
            tenant_id=str(doc.get("tenant_id", DEFAULT_TENANT)),
            audit_required=bool(doc.get("audit_required", False)) or (spec is not None and spec.audit_material),
            dal_anchor_required=bool(doc.get("dal_anchor_required", False)),
            idempotency_policy=str(doc.get("idempotency_policy", "trigger")),
            target_engine_meid=doc.get("target_engine_meid"),
            target_engine_cmi=doc.get("target_engine_cmi"),
            class_spec=spec,
        )
    except ValueError as exc:  # an enum value no version was ever stored with
        raise ValidationError(f"stored content is not a definition: {exc}", field="content") from None


def _also_triggered_by(r: Reader, value: Any, declared: TriggerType) -> tuple[TriggerType, ...]:
    """The triggers besides ``trigger_type`` that may start the definition: distinct, each a
    trigger type other than the declared one (``workflow`` and ``manual`` always may)."""
    found: list[TriggerType] = []
    for index, item in enumerate(r.sequence(value, "also_triggered_by")):
        at = join("also_triggered_by", index)
        kind = r.choice(item, at, TriggerType)
        if kind in (declared, TriggerType.MANUAL, TriggerType.WORKFLOW) or kind in found:
            r.fail(at, f"{kind.value} may start it already (trigger_type, manual and workflow always may)")
        found.append(kind)
    return tuple(found)


def content_digest(document: Mapping[str, Any]) -> str:
    """What approvals pin and signatures sign: the canonical digest of the document as written,
    without ``status`` (lifecycle) and without ``signature`` (it attests the content; it is not
    part of it)."""
    return digest({k: v for k, v in document.items() if k not in ("status", "signature")})


def _check_schedule(r: Reader, doc: Mapping[str, Any], trigger: TriggerType) -> None:
    """``schedule_expression`` (with ``schedule_timezone`` and ``schedule_misfire``) is the
    schedule the definition keeps: a cron expression for ``cron``, an interval for ``interval``,
    the window length for ``batch_window``. Each is checked in full here, so a definition that
    is stored has a schedule that fires."""
    if "schedule_expression" not in doc:
        if trigger in (TriggerType.CRON, TriggerType.INTERVAL):
            r.fail("schedule_expression", f"required when trigger_type is {trigger.value}")
        for key in ("schedule_timezone", "schedule_misfire"):
            if key in doc:
                r.fail(key, "only with a schedule_expression")
        return
    expression = r.string(doc["schedule_expression"], "schedule_expression")
    if trigger not in SCHEDULED_TRIGGERS:
        r.fail("schedule_expression", f"only used by cron, interval and batch_window triggers, not {trigger}")
    if trigger in (TriggerType.INTERVAL, TriggerType.BATCH_WINDOW):
        if interval_seconds(expression) is None:
            r.fail("schedule_expression", _INTERVAL_RULE)
    else:
        if interval_seconds(expression) is not None:
            r.fail("schedule_expression", "an interval: use trigger_type interval (cron takes a cron expression)")
        if not expression.startswith("@") and not is_cron_shaped(expression):
            r.fail("schedule_expression", _CRON_RULE)
        try:
            cron.validate(expression)
        except ValidationError as exc:
            r.fail("schedule_expression", exc.message)
    if "schedule_timezone" in doc:
        zone = r.string(doc["schedule_timezone"], "schedule_timezone")
        problem = zone_problem(zone)
        if problem is not None:
            r.fail("schedule_timezone", problem)
    if "schedule_misfire" in doc and r.string(doc["schedule_misfire"], "schedule_misfire") not in MISFIRE_CHOICES:
        r.fail("schedule_misfire", f"one of {', '.join(MISFIRE_CHOICES)}")


def _params(r: Reader, value: Any) -> tuple[ParamSpec, ...]:
    """Declared parameters: names usable as placeholders, patterns that compile, defaults that pass."""
    out: list[ParamSpec] = []
    for index, item in enumerate(r.sequence(value, "params")):
        at = join("params", index)
        data = r.mapping(item, at)
        r.only_keys(data, at, PARAM_FIELDS)
        name = r.string(
            data.get("name"),
            join(at, "name"),
            pattern=PARAM_NAME_PATTERN,
            rule="must be an identifier (letters, digits and _, not starting with a digit)",
        )
        if name in RESERVED:
            r.fail(join(at, "name"), f"{name!r} is a reserved name ({_RESERVED_LIST})")
        if any(spec.name == name for spec in out):
            r.fail(join(at, "name"), f"parameter {name!r} is declared twice")
        required = r.boolean(data.get("required", False), join(at, "required"))
        kind = r.string(data.get("type", "string"), join(at, "type"))
        if kind not in PARAM_TYPES:
            r.fail(join(at, "type"), f"one of {', '.join(PARAM_TYPES)}")
        pattern = None
        if data.get("pattern") is not None:
            if kind != "string":
                r.fail(join(at, "pattern"), f"a pattern is for string params; a {kind} is checked by its type")
            pattern = r.string(data["pattern"], join(at, "pattern"))
            check_pattern(pattern, field=join(at, "pattern"), source=r.source)
        bounds: dict[str, str | None] = {"minimum": None, "maximum": None}
        for key in bounds:
            if data.get(key) is None:
                continue
            if kind not in ("integer", "decimal"):
                r.fail(join(at, key), f"only integer and decimal params have a {key}")
            bounds[key] = _typed_text(r, join(at, key), kind, data[key])
        low, high = bounds["minimum"], bounds["maximum"]
        if low is not None and high is not None and Decimal(low) > Decimal(high):
            r.fail(join(at, "maximum"), f"is below the minimum {low}")
        base = ParamSpec(name, required, pattern, None, "", kind, (), low, high)
        choices: tuple[str, ...] = ()
        if data.get("choices") is not None:
            items = r.sequence(data["choices"], join(at, "choices"))
            if not items:
                r.fail(join(at, "choices"), "name at least one value (or leave choices out)")
            texts = [_param_text(r, join(join(at, "choices"), i), base, item) for i, item in enumerate(items)]
            if len(set(texts)) != len(texts):
                r.fail(join(at, "choices"), "a value is listed twice")
            choices = tuple(texts)
        default = None
        if data.get("default") is not None:
            default = _param_text(r, join(at, "default"), replace(base, choices=choices), data["default"])
        description = r.text(data.get("description") or "", join(at, "description"))
        out.append(ParamSpec(name, required, pattern, default, description, kind, choices, low, high))
    return tuple(out)


def _param_text(r: Reader, field: str, spec: ParamSpec, raw: Any) -> str:
    """A declared value (a default, a choice) as a run would store it, or a refusal naming it."""
    try:
        return param_value(spec, raw)
    except ParamValueError as exc:
        r.fail(field, str(exc))


def _typed_text(r: Reader, field: str, kind: str, raw: Any) -> str:
    try:
        return canonical(kind, raw)
    except ParamValueError as exc:
        r.fail(field, str(exc))


def _executor(
    r: Reader, doc: Mapping[str, Any], config: JobgateConfig
) -> tuple[ExecutorSpec, RunnerSpec | None, str | None, str | None]:
    """Resolve the one executor source to an ``ExecutorSpec`` (and the runner, for template checks)."""
    sources = [key for key in EXECUTOR_FIELDS if key in doc]
    rule = "a definition has exactly one executor source: target_engine_meid, handler, runner or workflow"
    if not sources:
        r.fail("target_engine_meid", f"required: {rule}")
    if len(sources) > 1:
        r.fail(sources[1], f"conflicts with {sources[0]}: {rule}")
    if "target_engine_cmi" in doc and "target_engine_meid" not in doc:
        r.fail("target_engine_cmi", "only meaningful with target_engine_meid")
    if "workflow" in doc:
        from jobgate.workflows.spec import parse_workflow  # the workflows package imports this one

        if "body" in doc:
            r.fail("body", "a workflow has no body: its steps name the definitions they run")
        declared = [p.get("name") for p in doc.get("params") or [] if isinstance(p, dict)]
        parse_workflow(
            doc["workflow"],
            source=r.source,
            retry_policies=config.retry_policies,
            timeout_policies=config.timeout_policies,
            param_names=[n for n in declared if isinstance(n, str)],
        )
        return ExecutorSpec("python", handler=WORKFLOW_STARTER), None, None, None
    if "handler" in doc:
        handler = r.string(doc["handler"], "handler", pattern=HANDLER_PATTERN, rule=HANDLER_RULE)
        return ExecutorSpec("python", handler=handler), None, None, None
    if "runner" in doc:
        name = r.known(doc["runner"], "runner", "runner", config.runners)
        return ExecutorSpec("command", runner=name), config.runners[name], None, None
    meid = r.known(doc["target_engine_meid"], "target_engine_meid", "target engine MEID", config.targets)
    target = config.targets[meid]
    cmi = None
    if "target_engine_cmi" in doc:
        cmi = r.string(doc["target_engine_cmi"], "target_engine_cmi")
        if cmi not in target.cmis:
            accepted = ", ".join(target.cmis)
            r.fail("target_engine_cmi", f"target engine CMI not compatible with {meid} (accepts: {accepted})")
    if target.handler is not None:
        return ExecutorSpec("python", handler=target.handler, target=meid), None, meid, cmi
    if target.runner is not None:
        runner = config.runners[target.runner]
        return ExecutorSpec("command", runner=runner.name, target=meid), runner, meid, cmi
    return ExecutorSpec("http", target=meid), None, meid, cmi


def _check_templates(
    r: Reader,
    params: tuple[ParamSpec, ...],
    body: str | None,
    executor: ExecutorSpec,
    runner: RunnerSpec | None,
) -> None:
    """Every placeholder must be a declared param or reserved, so a run never fails on a typo.

    The body is only rendered for command runners (into ``{{tmpfile}}``); a body on another
    executor would be approved but never used, so it is refused.
    """
    allowed = {spec.name for spec in params} | RESERVED
    declared = ", ".join(sorted(spec.name for spec in params)) or "none"
    hint = f"(declared params: {declared}; reserved: {_RESERVED_LIST})"
    if body is not None:
        if executor.kind != "command":
            r.fail("body", f"a body template is only used by command runners, not {executor.kind} executors")
        for lineno, line in enumerate(body.splitlines(), start=1):
            for name in sorted(placeholders(line) - allowed):
                r.fail("body", f"line {lineno}: {{{{{name}}}}} is not a declared param {hint}")
        for name in sorted(placeholders(body) - allowed):
            r.fail("body", f"{{{{{name}}}}} is not a declared param {hint}")
    if runner is not None:
        field = "runner" if executor.target is None else "target_engine_meid"
        templates = [(f"args[{i}]", arg) for i, arg in enumerate(runner.args)]
        if runner.artifact is not None:
            templates.append(("artifact", runner.artifact))
        for where, template in templates:
            used = placeholders(template)
            prefix = f"runner {runner.name!r} {where} uses"
            if body is None and "tmpfile" in used:
                r.fail(field, f"{prefix} {{{{tmpfile}}}}, but the definition has no body to write to it")
            for name in sorted(used - allowed):
                r.fail(field, f"{prefix} {{{{{name}}}}}, which is not a declared param {hint}")


def names_raw_handler(document: Mapping[str, Any]) -> bool:
    """Whether a definition document names Python code to import (``handler``) rather than a
    target or runner the configuration declares. The API takes no such document, applied or
    imported in a pack: code to import is the operator's choice, made on the server. A target
    the configuration backs with a handler is the configuration's, not the document's."""
    return "handler" in document
